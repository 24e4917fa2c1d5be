package api

// The move log of `bench api`: a by-id answer of the documents table also
// reads the document's newest move (query.LatestMove), so the benchmark
// needs a log of realistic size for that read to cost what it costs. The
// moves are of deleted documents (moved, then deleted later), so every
// live document's answer stays what the check expects, while each by-id
// read still searches the whole log.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/loadgen"
	"github.com/tributary/tributary/internal/query"
)

// moveVersionBase keeps the move log's versions apart from the rows'.
const moveVersionBase = uint64(1) << 44

// loadMoves makes document_moves hold --moves moves, two versions each
// (started, then done), of the first deleted documents; a log that already
// holds them is kept. Returns the number of moves.
func (d *dataset) loadMoves(ctx context.Context, store *chstore.Store) (int, error) {
	if d.c.moves == 0 {
		return 0, nil
	}
	t, err := store.EnsureTable(ctx, "document_moves", []string{"move_id"}, loadgen.MoveLogColumns)
	if err != nil {
		return 0, err
	}
	var have uint64
	if err := store.Conn().QueryRow(ctx, fmt.Sprintf("SELECT count() FROM %s.document_moves", chstore.Quote(d.c.db))).Scan(&have); err != nil {
		return 0, err
	}
	if have == uint64(2*d.c.moves) {
		return d.c.moves, d.ensureMoveIndex(ctx, store)
	}
	if have != 0 {
		return 0, fmt.Errorf("%s.document_moves holds %d rows, not the %d of --moves %d: drop it (or the database) first", d.c.db, have, 2*d.c.moves, d.c.moves)
	}
	b, err := store.Conn().PrepareBatch(ctx, fmt.Sprintf("INSERT INTO %s.document_moves (%s)", chstore.Quote(d.c.db),
		strings.Join(quoteAll(t.InsertColumns()), ", ")))
	if err != nil {
		return 0, fmt.Errorf("prepare moves: %w", err)
	}
	defer b.Abort() //nolint:errcheck // no-op after Send
	n := 0
	loaded := time.Now().UTC().Truncate(time.Second)
	for i := 0; i < d.c.docs && n < d.c.moves; i++ {
		if !d.docDeleted[i] {
			continue
		}
		id := d.id(tDocs, i, d.c.docs)
		to := d.shard(tDocs, i)
		from := (to + 1) % d.c.shards
		ws := d.workspace(tDocs, i)
		started := time.UnixMilli(d.created(i, d.c.docs)).UTC().Add(time.Hour).Truncate(time.Second)
		finished := started.Add(2 * time.Second)
		moveID := uuid.NewSHA1(uuid.NameSpaceOID, fmt.Appendf(nil, "bench-move-%d", i))
		for k, state := range []string{"started", "done"} {
			ver := moveVersionBase + uint64(2*n+k)
			var fin *time.Time
			if state == "done" {
				fin = &finished
			}
			vals := map[string]any{"move_id": moveID, "document_id": &id, "from_workspace": &ws, "to_workspace": &ws,
				"from_shard": ptr(int32(from)), "to_shard": ptr(int32(to)), "state": &state, "started_at": &started, "finished_at": fin,
				"_shard": uint16(from), "_version": ver, "_deleted": uint8(0), "_commit_lsn": ver, "_commit_ts": started.Add(time.Duration(k) * 2 * time.Second),
				"_loaded_at": loaded}
			row, err := valuesOf(t, vals)
			if err != nil {
				return 0, err
			}
			if err := b.Append(row...); err != nil {
				return 0, fmt.Errorf("append move: %w", err)
			}
		}
		n++
	}
	if err := b.Send(); err != nil {
		return 0, fmt.Errorf("insert moves: %w", err)
	}
	return n, d.ensureMoveIndex(ctx, store)
}

// ensureMoveIndex builds the log's index by document as the loader does
// (chstore.EnsureMoveIndex: backfilled once, kept by a materialized view),
// so that the API reads the log the way it does in a deployment.
func (d *dataset) ensureMoveIndex(ctx context.Context, store *chstore.Store) error {
	l, ok := query.MoveLogOf(d.tcfg, "documents")
	if !ok {
		return fmt.Errorf("%s has no move log for documents", d.c.tablesFile)
	}
	start := time.Now()
	built, err := store.EnsureMoveIndex(ctx, l.Index())
	if err != nil {
		return err
	}
	if built {
		fmt.Printf("move log index %s built in %s\n", l.Index().Table(), time.Since(start).Round(time.Millisecond))
	}
	return nil
}

func ptr[T any](v T) *T { return &v }
