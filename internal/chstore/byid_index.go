package chstore

// The move log's index by document. A move log (the table config's moves
// section) is keyed by move id, so finding a document's moves means
// scanning the log's document column: a by-id read of the API paid for it
// on every request (4.0 ms p50 at 100k moves, growing with the log). The
// index is a table next to the log, sorted by document, holding one
// (document, move id, shard) row per log row that names a document; a
// materialized view fills it on every insert into the log, so it is
// written in the same INSERT as the log itself, by ClickHouse.
//
//	_<log>_by_document (document <the document column's type, not null>,
//	  move <the log's id type>, _shard UInt16)
//	ENGINE = ReplacingMergeTree ORDER BY (document, move, _shard)
//
// It maps a document to (move id, log shard) pairs only — a move is
// identified by both: per-shard serial move ids collide across shards, so
// a move id alone may name another document's move. The moves themselves
// are still read from the log with FINAL by those pairs, so a move's newest version and its
// delete tombstone (whose document column is NULL: a tombstone carries only
// the id) decide as before; the index changes how the move ids are found,
// never which. Rows are never removed from it: a document's set of moves
// only grows, as the log's scan would find them too (every version of
// a move names the same document). Identical rows (a backfill overlapping
// the view) are one row for an IN set, and merges drop them.
//
// Readiness. A reader must not use the index before it holds every row
// the log held when the view was created: the backfill. _indexes records,
// per index, whether it is built (ReplacingMergeTree(version), newest
// wins). EnsureMoveIndex writes "not built" before creating anything,
// creates the table and the view, copies the log, and only then writes
// "built"; after a crash in between the next call does it again (the
// copy is idempotent). An index table or view found missing is rebuilt
// the same way. Readers (internal/query) fall back to the log's scan while
// the index is not built.
//
// 18.16 note: a SELECT alias shadows a column of the same name everywhere
// in the query (WHERE included), so the index's columns are named
// differently from the log's: `assumeNotNull(document_id) AS document_id
// ... WHERE isNotNull(document_id)` would keep the NULL rows.

import (
	"context"
	"fmt"
	"time"
)

// IndexStateTable records whether each derived index is built.
const IndexStateTable = "_indexes"

// MoveIndex names a move log and the columns its by-document index reads.
type MoveIndex struct {
	// Log is the move log's table, LogID its id column (the move id),
	// Document the column holding the moved row's id.
	Log, LogID, Document string
}

// Table is the index table's name.
func (m MoveIndex) Table() string { return "_" + m.Log + "_by_document" }

// View is the materialized view's name.
func (m MoveIndex) View() string { return m.Table() + "_mv" }

// select is the view's query: one index row per log row naming a document.
func (m MoveIndex) selectSQL(db string) string {
	return fmt.Sprintf("SELECT assumeNotNull(%s) AS document, %s AS move, _shard FROM %s.%s WHERE isNotNull(%s)",
		quote(m.Document), quote(m.LogID), quote(db), quote(m.Log), quote(m.Document))
}

func (s *Store) ensureIndexState(ctx context.Context) error {
	q := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (name String, built UInt8, version UInt64, updated_at DateTime('UTC'))
		ENGINE = %s ORDER BY name`, quote(s.db), IndexStateTable, s.ClusterReplicated(IndexStateTable, "ReplacingMergeTree(version)"))
	if err := s.ExecDDL(ctx, q); err != nil {
		return fmt.Errorf("create index state table: %w", err)
	}
	return nil
}

func (s *Store) markIndex(ctx context.Context, name string, built bool) error {
	b, err := s.conn.PrepareBatch(ctx, fmt.Sprintf("INSERT INTO %s.%s (name, built, version, updated_at)", quote(s.db), IndexStateTable))
	if err != nil {
		return fmt.Errorf("mark index %s: %w", name, err)
	}
	defer b.Abort() //nolint:errcheck // no-op after Send
	v := uint8(0)
	if built {
		v = 1
	}
	now := time.Now()
	if err := b.Append(name, v, uint64(now.UnixNano()), now.UTC()); err != nil {
		return fmt.Errorf("mark index %s: %w", name, err)
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("mark index %s: %w", name, err)
	}
	return nil
}

// EnsureMoveIndex makes m's by-document index exist and be built: it
// returns true when the index was (re)built by this call, false when it was
// already built. The log table must exist. Safe to run concurrently from
// several loaders and again after a crash at any point.
func (s *Store) EnsureMoveIndex(ctx context.Context, m MoveIndex) (bool, error) {
	if err := s.ensureIndexState(ctx); err != nil {
		return false, err
	}
	ok, err := s.moveIndexBuilt(ctx, m)
	if err != nil || ok {
		return false, err
	}
	// Not built (or its table or view is gone): say so before touching
	// anything, so that no reader trusts it while it is being filled.
	if err := s.markIndex(ctx, m.Table(), false); err != nil {
		return false, err
	}
	// In a cluster the index is held whole by every node, and the view is
	// on every node's Distributed log table: it fires on the node that
	// takes the loader's insert, whichever that is.
	ddl := []string{
		fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s.%s ENGINE = %s ORDER BY (document, move, _shard) SETTINGS index_granularity = 1024 AS %s AND 0",
			quote(s.db), quote(m.Table()), s.ClusterReplicated(m.Table(), "ReplacingMergeTree"), m.selectSQL(s.db)),
		// The view first, then the copy: a row inserted into the log from
		// here on reaches the index through the view; one inserted before
		// is in the log when the copy reads it. Both is harmless.
		fmt.Sprintf("CREATE MATERIALIZED VIEW IF NOT EXISTS %s.%s TO %s.%s AS %s",
			quote(s.db), quote(m.View()), quote(s.db), quote(m.Table()), m.selectSQL(s.db)),
	}
	for _, q := range ddl {
		if err := s.ExecDDL(ctx, q); err != nil {
			return false, fmt.Errorf("build index %s: %w", m.Table(), err)
		}
	}
	q := fmt.Sprintf("INSERT INTO %s.%s (document, move, _shard) %s", quote(s.db), quote(m.Table()), m.selectSQL(s.db))
	if err := s.conn.Exec(ctx, q); err != nil {
		return false, fmt.Errorf("build index %s: %w", m.Table(), err)
	}
	if err := s.markIndex(ctx, m.Table(), true); err != nil {
		return false, err
	}
	return true, nil
}

// BuiltQuery is the query that says whether the index is built: one row,
// (objects UInt64, built UInt8), built when objects is 2 (the table and
// the view exist) and built is 1. It fails when the state table does not
// exist yet (no loader has ensured an index).
func (m MoveIndex) BuiltQuery(db string) (string, []any) {
	q := fmt.Sprintf(`SELECT
		(SELECT count() FROM system.tables WHERE database = ? AND name IN (?, ?)),
		(SELECT toUInt8(argMax(built, version)) FROM %s.%s WHERE name = ?)`, quote(db), IndexStateTable)
	return q, []any{db, m.Table(), m.View(), m.Table()}
}

// moveIndexBuilt: recorded as built, and the table and view both exist.
func (s *Store) moveIndexBuilt(ctx context.Context, m MoveIndex) (bool, error) {
	q, args := m.BuiltQuery(s.db)
	var objects uint64
	var built uint8
	if err := s.conn.QueryRow(ctx, q, args...).Scan(&objects, &built); err != nil {
		return false, fmt.Errorf("read index state %s: %w", m.Table(), err)
	}
	return objects == 2 && built == 1, nil
}
