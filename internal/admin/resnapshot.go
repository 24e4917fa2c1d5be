package admin

// resnapshot: ask a shard's reader to copy one table (or the rows
// matching a predicate) again while it streams (internal/reader,
// resnapshot.go, says how and why it is exact). The request travels
// through the shard's WAL as a logical message, so it needs no connection
// to the reader and is handled exactly once, in order with the changes.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/progress"
	"github.com/tributary/tributary/internal/reader"
	"github.com/tributary/tributary/internal/tables"
)

// ErrResnapshotRefused is returned when a resnapshot is not asked for
// because it is unsafe or would not run; the message says why and what to
// do.
var ErrResnapshotRefused = errors.New("resnapshot refused")

// ResnapshotTarget is one shard's reader, as a resnapshot reaches it.
type ResnapshotTarget struct {
	Shard int
	// DSN is the shard's reader DSN (a role with REPLICATION, which
	// pg_logical_emit_message and IDENTIFY_SYSTEM need).
	DSN        string
	Slot       string
	StateTopic string
	Brokers    []string
	// KafkaOpts are the client's TLS and SASL options (internal/kafkaconn).
	KafkaOpts []kgo.Opt
}

// ResnapshotStatus reads the reader state of target's shard: its identity
// from the shard itself (IDENTIFY_SYSTEM), its state from the state topic.
func ResnapshotStatus(ctx context.Context, cl *kgo.Client, target ResnapshotTarget) (reader.ResnapshotStatus, error) {
	sys, db, err := identify(ctx, target.DSN)
	if err != nil {
		return reader.ResnapshotStatus{}, fmt.Errorf("shard %d: %w", target.Shard, err)
	}
	st, err := reader.ReadResnapshotStatus(ctx, cl, target.Brokers, target.KafkaOpts, target.StateTopic, sys, db, target.Slot)
	if err != nil {
		return st, fmt.Errorf("shard %d, state topic %s: %w", target.Shard, target.StateTopic, err)
	}
	return st, nil
}

func identify(ctx context.Context, dsn string) (system, database string, err error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return "", "", fmt.Errorf("parse DSN: %w", err)
	}
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return "", "", fmt.Errorf("replication connection (the reader's role, with REPLICATION): %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	res, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return "", "", fmt.Errorf("identify system: %w", err)
	}
	return res.SystemID, res.DBName, nil
}

// CheckResnapshot checks, on the shard, that t exists with a key to page
// by and that where (if any) is a valid predicate on it: PostgreSQL plans
// the copy's query (EXPLAIN, nothing read) in a read-only transaction.
func CheckResnapshot(ctx context.Context, conn *pgx.Conn, t tables.Table, where string) error {
	name := pgx.Identifier{t.Schema, t.Name}.Sanitize()
	var keyed *bool
	err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND (i.indisprimary OR (i.indisreplident AND c.relreplident = 'i')))
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2`, t.Schema, t.Name).Scan(&keyed)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: table %s does not exist on this shard (check --shard and the table config)", ErrResnapshotRefused, name)
	case err != nil:
		return fmt.Errorf("look up %s: %w", name, err)
	case !*keyed:
		return fmt.Errorf("%w: table %s has no primary key or replica identity index, and a resnapshot pages by key (see docs/runbook.md, \"One table on one shard is wrong\")", ErrResnapshotRefused, name)
	}
	if where == "" {
		return nil
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	// The extended protocol runs one statement only: a predicate cannot
	// smuggle a second one in.
	if _, err := tx.Exec(ctx, "EXPLAIN SELECT 1 FROM "+name+" WHERE ("+where+")", pgx.QueryExecModeExec); err != nil {
		return fmt.Errorf("%w: --where %q is not a valid predicate on %s: PostgreSQL says: %w", ErrResnapshotRefused, where, name, err)
	}
	return nil
}

// RequestResnapshot asks target's reader for a resnapshot of table t
// (rows matching where; empty: all), after checking that it is safe:
// the table and predicate (CheckResnapshot), a reader that has stored
// state for the shard (and, for a predicate, can sweep), and no
// resnapshot of the table running there (other tables' may run). It
// returns the request id. The request is logged.
func RequestResnapshot(ctx context.Context, cl *kgo.Client, target ResnapshotTarget, t tables.Table, where string, log *slog.Logger) (string, error) {
	conn, err := pgx.Connect(ctx, target.DSN)
	if err != nil {
		return "", fmt.Errorf("connect shard %d: %w", target.Shard, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := CheckResnapshot(ctx, conn, t, where); err != nil {
		return "", fmt.Errorf("shard %d: %w", target.Shard, err)
	}
	st, err := ResnapshotStatus(ctx, cl, target)
	if err != nil {
		return "", err
	}
	switch {
	case !st.Found:
		return "", fmt.Errorf("%w: no reader state for shard %d, slot %s in %s: has its reader run (same --slot and --state-topic)? A resnapshot needs a streaming reader",
			ErrResnapshotRefused, target.Shard, target.Slot, target.StateTopic)
	case st.RunningOf(t.Name) != nil:
		a := st.RunningOf(t.Name)
		return "", fmt.Errorf("%w: a resnapshot of table %s (%s, id %s) is running on shard %d, phase %s, %d rows so far: one at a time per table (other tables may be copied meanwhile); wait for it (tributaryctl resnapshot --status --shard %d)",
			ErrResnapshotRefused, a.Table, whereText(a.Where), a.ID, target.Shard, a.Phase, a.Rows(), target.Shard)
	case where != "" && !st.Sweeps:
		return "", fmt.Errorf("%w: the reader of shard %d has no ClickHouse to sweep with: a resnapshot with --where ends with a sweep that deletes the rows the shard no longer has, which the reader runs reading the loaders' database; start cdc-reader with --clickhouse-addr (a read-only user as the API's is enough), or resnapshot every row",
			ErrResnapshotRefused, target.Shard)
	}
	b := make([]byte, 8)
	rand.Read(b) //nolint:errcheck // never fails
	req := reader.ResnapshotRequest{ID: hex.EncodeToString(b), Table: t.Name, Where: where, Requested: time.Now().UTC()}
	content, err := json.Marshal(req)
	if err != nil {
		return "", err
	}
	var at string
	if err := conn.QueryRow(ctx, "SELECT pg_logical_emit_message(true, $1, $2)::text", reader.ResnapshotRequestPrefix, string(content)).Scan(&at); err != nil {
		return "", fmt.Errorf("shard %d: write the resnapshot request: %w", target.Shard, err)
	}
	log.Info("resnapshot requested", slog.Int("shard", target.Shard), slog.String("table", t.Name), slog.String("where", where),
		slog.String("id", req.ID), slog.String("at", at))
	return req.ID, nil
}

// statusBoard is a terminal's status lines (progress.Terminal).
type statusBoard interface {
	Show(key, line string)
	Finish(key, line string)
}

// WaitResnapshot follows resnapshot id on target until it ends (with a
// predicate: copied and swept, by the reader), writing progress (rows,
// rate, estimate, ETA; then the sweep's) to w every interval: a bar redrawn
// in place when w is a progress.Terminal, a line each time otherwise. It
// fails when the resnapshot failed, or when the reader did not take the
// request up within accept (another resnapshot took its place, or no
// reader runs).
func WaitResnapshot(ctx context.Context, cl *kgo.Client, target ResnapshotTarget, id string, w io.Writer, interval, accept time.Duration) (*reader.Resnapshot, error) {
	start := time.Now()
	var lastRows int64
	var lastAt time.Time
	var rate float64
	for {
		st, err := ResnapshotStatus(ctx, cl, target)
		if err != nil {
			return nil, err
		}
		a, running := st.Find(id)
		switch {
		case a != nil && !running:
			if b, ok := w.(statusBoard); ok {
				b.Finish(id, ProgressLine(target.Shard, a, rate))
			} else {
				fmt.Fprintln(w, ProgressLine(target.Shard, a, rate))
			}
			if a.Phase == reader.PhaseFailed {
				return a, fmt.Errorf("resnapshot %s of %s on shard %d failed: %s", id, a.Table, target.Shard, a.Error)
			}
			return a, nil
		case a != nil && a.Phase == reader.PhaseSweeping:
			if b, ok := w.(statusBoard); ok {
				b.Show(id, ProgressLine(target.Shard, a, 0))
			} else {
				fmt.Fprintln(w, ProgressLine(target.Shard, a, 0))
			}
		case a != nil:
			rows := a.Rows()
			if !lastAt.IsZero() && rows > lastRows {
				rate = float64(rows-lastRows) / time.Since(lastAt).Seconds()
			}
			lastRows, lastAt = rows, time.Now()
			if b, ok := w.(statusBoard); ok {
				b.Show(id, progress.Bar(progress.Status{Label: fmt.Sprintf("resnapshot shard %d %s %s", target.Shard, a.Table, a.Phase),
					Done: rows, Total: a.Estimate(), Rate: rate}, 30))
			} else {
				fmt.Fprintln(w, ProgressLine(target.Shard, a, rate))
			}
		case time.Since(start) > accept:
			what := "no resnapshot is running"
			if len(st.Running) > 0 {
				what = fmt.Sprintf("resnapshot %s of %s is running instead", st.Active.ID, st.Active.Table)
			}
			return nil, fmt.Errorf("%w: the reader of shard %d did not take request %s up within %s (%s): is it running and streaming? Its log says why it refused",
				ErrResnapshotRefused, target.Shard, id, accept, what)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(interval):
		}
	}
}

// ProgressLine is one line of a resnapshot's progress.
func ProgressLine(shard int, a *reader.Resnapshot, rate float64) string {
	line := fmt.Sprintf("resnapshot %s shard %d table %s (%s): %s, %d rows", a.ID, shard, a.Table, whereText(a.Where), a.Phase, a.Rows())
	if est := a.Estimate(); est > 0 {
		line += fmt.Sprintf(" of ~%d (%.0f%%)", est, min(100, 100*float64(a.Rows())/float64(est)))
		if rate > 0 && a.Phase == reader.PhaseCopying {
			left := time.Duration(float64(max(est-a.Rows(), 0)) / rate * float64(time.Second))
			line += fmt.Sprintf(", %.0f rows/s, ETA %s", rate, left.Round(time.Second))
		}
	}
	if sw := a.Sweep; sw != nil {
		switch {
		case sw.Waiting:
			line += ", sweep waiting for the loader to apply the shard up to the switch (paused table?)"
		default:
			line += fmt.Sprintf(", sweep: %d rows checked, %d deleted", sw.Checked, sw.Deleted)
		}
		if sw.Attempts > 1 {
			line += fmt.Sprintf(" (attempt %d)", sw.Attempts)
		}
		if sw.Error != "" && a.Phase == reader.PhaseSweeping {
			line += " (last attempt failed, retried: " + sw.Error + ")"
		}
	}
	if !a.Finished.IsZero() && !a.Started.IsZero() {
		line += fmt.Sprintf(", took %s", a.Finished.Sub(a.Started).Round(time.Millisecond))
	}
	if a.Error != "" {
		line += ": " + a.Error
	}
	return line
}

func whereText(w string) string {
	if w == "" {
		return "every row"
	}
	return "WHERE " + w
}
