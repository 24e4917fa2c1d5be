package loadgen

// The move saga of docs/design/moves.md: a document moves to a workspace that lives on
// another shard in four idempotent steps, each a single-shard transaction:
//
//	start    on the source: a move-log row, state started
//	copy     on the target: insert the row if absent; on the source: state copied
//	finish   on the source, in one transaction: delete the row, state done
//
// A crash between steps leaves the log saying how far the move got, and
// Resume re-runs the remaining steps (each is safe to run twice). A move
// stopped after copy is the classic half-done move: the id is live on both
// shards. Skipping copy (Lose) reproduces the "on neither shard" bug: the
// source row is deleted and marked done, and nothing arrived.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Move log states (schema/postgres/10_demo.sql, document_moves).
const (
	StateStarted = "started"
	StateCopied  = "copied"
	StateDone    = "done"
	StateFailed  = "failed"
)

// Saga moves rows of Documents between shards, logging to Moves on the
// source shard. Table and column names are configuration so that tests can
// run it on tables of their own.
type Saga struct {
	// Documents and Moves are table names; IDColumn and WorkspaceColumn
	// columns of Documents. The move log has the demo's columns.
	Documents, Moves          string
	IDColumn, WorkspaceColumn string
}

// Shard is one side of a move.
type Shard struct {
	ID   int
	Pool *pgxpool.Pool
}

// ErrNoDocument is returned when the document to move is not at the source.
var ErrNoDocument = errors.New("document not at the source")

func ident(s string) string { return pgx.Identifier{s}.Sanitize() }

// Start records a move of doc from fromWS on src to toWS on dst and returns
// its move id.
func (s Saga) Start(ctx context.Context, src, dst Shard, doc, fromWS, toWS int64) (string, error) {
	var moveID string
	err := src.Pool.QueryRow(ctx, fmt.Sprintf(`INSERT INTO %s (document_id, from_workspace, to_workspace, from_shard, to_shard, state)
		VALUES ($1, $2, $3, $4, $5, $6) RETURNING move_id::text`, ident(s.Moves)),
		doc, fromWS, toWS, src.ID, dst.ID, StateStarted).Scan(&moveID)
	if err != nil {
		return "", fmt.Errorf("start move: %w", err)
	}
	return moveID, nil
}

// Copy inserts the source's row on the target with the target workspace,
// unless the target has it already, then marks the move copied.
func (s Saga) Copy(ctx context.Context, src, dst Shard, moveID string, doc, toWS int64) error {
	cols, vals, err := s.readRow(ctx, src, doc)
	if err != nil {
		return err
	}
	ph := make([]string, len(cols))
	for i, c := range cols {
		ph[i] = fmt.Sprintf("$%d", i+1)
		if c == s.WorkspaceColumn {
			vals[i] = toWS
		}
		cols[i] = ident(c)
	}
	_, err = dst.Pool.Exec(ctx, fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s) ON CONFLICT (%s) DO NOTHING",
		ident(s.Documents), strings.Join(cols, ", "), strings.Join(ph, ", "), ident(s.IDColumn)), vals...)
	if err != nil {
		return fmt.Errorf("copy to shard %d: %w", dst.ID, err)
	}
	return s.setState(ctx, src, moveID, StateCopied)
}

// readRow reads every column of doc at the source.
func (s Saga) readRow(ctx context.Context, src Shard, doc int64) ([]string, []any, error) {
	rows, err := src.Pool.Query(ctx, fmt.Sprintf("SELECT * FROM %s WHERE %s = $1", ident(s.Documents), ident(s.IDColumn)), doc)
	if err != nil {
		return nil, nil, fmt.Errorf("read document: %w", err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return nil, nil, fmt.Errorf("read document: %w", err)
		}
		return nil, nil, fmt.Errorf("%w: id %d on shard %d", ErrNoDocument, doc, src.ID)
	}
	vals, err := rows.Values()
	if err != nil {
		return nil, nil, fmt.Errorf("read document: %w", err)
	}
	var cols []string
	for _, f := range rows.FieldDescriptions() {
		cols = append(cols, f.Name)
	}
	return cols, vals, rows.Err()
}

// Finish deletes the row at the source and marks the move done, in one
// transaction: the log never says done while the source row is live.
func (s Saga) Finish(ctx context.Context, src Shard, moveID string, doc int64) error {
	return pgx.BeginFunc(ctx, src.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("DELETE FROM %s WHERE %s = $1", ident(s.Documents), ident(s.IDColumn)), doc); err != nil {
			return fmt.Errorf("finish move: %w", err)
		}
		_, err := tx.Exec(ctx, fmt.Sprintf("UPDATE %s SET state = $2, finished_at = now() WHERE move_id = $1 AND state <> $2",
			ident(s.Moves)), moveID, StateDone)
		if err != nil {
			return fmt.Errorf("finish move: %w", err)
		}
		return nil
	})
}

func (s Saga) setState(ctx context.Context, src Shard, moveID, state string) error {
	_, err := src.Pool.Exec(ctx, fmt.Sprintf("UPDATE %s SET state = $2 WHERE move_id = $1 AND state <> 'done'", ident(s.Moves)), moveID, state)
	if err != nil {
		return fmt.Errorf("move %s to %s: %w", moveID, state, err)
	}
	return nil
}

// Outcome is how far Move takes a move.
type Outcome int

// The outcomes.
const (
	// Complete runs every step.
	Complete Outcome = iota
	// HalfDone stops after the copy: live on both shards, state copied.
	HalfDone
	// Lose skips the copy and finishes: on neither shard, state done.
	Lose
)

// Move moves doc and returns the move id.
func (s Saga) Move(ctx context.Context, src, dst Shard, doc, fromWS, toWS int64, how Outcome) (string, error) {
	moveID, err := s.Start(ctx, src, dst, doc, fromWS, toWS)
	if err != nil {
		return "", err
	}
	if how != Lose {
		if err := s.Copy(ctx, src, dst, moveID, doc, toWS); err != nil {
			return moveID, err
		}
	}
	if how == HalfDone {
		return moveID, nil
	}
	return moveID, s.Finish(ctx, src, moveID, doc)
}

// Resume re-runs the remaining steps of every unfinished move logged on
// src (the recovery job); shards maps shard numbers to targets. It returns
// how many moves it finished.
func (s Saga) Resume(ctx context.Context, src Shard, shards map[int]Shard) (int, error) {
	type pending struct {
		moveID    string
		state     string
		doc, toWS int64
		toShard   int
	}
	rows, err := src.Pool.Query(ctx, fmt.Sprintf(`SELECT move_id::text, state, document_id, to_workspace, to_shard FROM %s
		WHERE state IN ($1, $2) AND from_shard = $3 ORDER BY started_at`, ident(s.Moves)), StateStarted, StateCopied, src.ID)
	if err != nil {
		return 0, fmt.Errorf("unfinished moves: %w", err)
	}
	var todo []pending
	for rows.Next() {
		var p pending
		if err := rows.Scan(&p.moveID, &p.state, &p.doc, &p.toWS, &p.toShard); err != nil {
			rows.Close()
			return 0, fmt.Errorf("unfinished moves: %w", err)
		}
		todo = append(todo, p)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("unfinished moves: %w", err)
	}
	done := 0
	for _, p := range todo {
		dst, ok := shards[p.toShard]
		if !ok {
			return done, fmt.Errorf("move %s: no shard %d", p.moveID, p.toShard)
		}
		// Copy again (a no-op when the target has the row). A source row
		// gone before the copy was deleted by its user: nothing to move,
		// the move failed (finishing it would claim a move that never
		// happened). Gone after the copy: only the log lags.
		err := s.Copy(ctx, src, dst, p.moveID, p.doc, p.toWS)
		switch {
		case errors.Is(err, ErrNoDocument) && p.state == StateStarted:
			if err := s.setState(ctx, src, p.moveID, StateFailed); err != nil {
				return done, err
			}
			continue
		case err != nil && !errors.Is(err, ErrNoDocument):
			return done, err
		}
		if err := s.Finish(ctx, src, p.moveID, p.doc); err != nil {
			return done, err
		}
		done++
	}
	return done, nil
}
