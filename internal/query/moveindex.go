package query

// The move log's index by document (chstore/byid_index.go): LatestMove
// finds the document's moves — (move id, log shard) pairs — through it, a
// primary-key read, instead of scanning the log's document column, once
// the index is built. The set of pairs is the same either way (every log
// row that names the document, whatever its version), and the moves are
// then read from the log with FINAL by those pairs, so the answer is the same
// (bench api --variants byid-read, which 09177d7 still has: 3.0 vs 5.3 ms
// p50 at 100k moves; docs/benchmarks-log.md).
//
// Whether the index is built is read from ClickHouse (the index state and
// the existence of the table and its view) at most every
// moveIndexRecheck, on the request that finds the reading stale; until
// then and whenever it is not, the log is scanned. A request whose index
// read finds the table gone falls back to the scan at once.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/tributary/tributary/internal/chstore"
)

// moveIndexRecheck is how long a reading of the index state is trusted.
const moveIndexRecheck = 10 * time.Second

// moveIndexState is the last reading of whether a log's index is built.
type moveIndexState struct {
	mu      sync.Mutex
	built   bool
	checked time.Time
}

// Index is l's by-document index.
func (l *MoveLog) Index() chstore.MoveIndex {
	return chstore.MoveIndex{Log: l.Log.Name, LogID: l.Log.IDColumn, Document: l.Moves.DocumentColumn}
}

// planLatestMoveIndexed is planLatestMove with the (move id, log shard)
// keys found through the index: the same set, read by the index's primary
// key.
func planLatestMoveIndexed(db string, l *MoveLog) string {
	return l.planLatestMoveOf(db, fmt.Sprintf("SELECT move, _shard FROM %s.%s WHERE document = ?", quote(db), quote(l.Index().Table())))
}

// PlanLatestMoveIndexed is the SQL of LatestMove once the index is built
// (one parameter: the document id); exported for tests/moveindex_test.go.
func PlanLatestMoveIndexed(db string, l *MoveLog) string { return planLatestMoveIndexed(db, l) }

// moveIndexBuilt says whether l's index may be read, from the last reading
// or, when that is older than moveIndexRecheck, a new one. A failed
// reading (the state table does not exist before a loader ensured an
// index) is "not built".
func (q *Queries) moveIndexBuilt(ctx context.Context, l *MoveLog) bool {
	v, _ := q.moveIndexes.LoadOrStore(l.Log.Name, &moveIndexState{})
	st := v.(*moveIndexState)
	st.mu.Lock()
	defer st.mu.Unlock()
	if time.Since(st.checked) < moveIndexRecheck {
		return st.built
	}
	sql, args := l.Index().BuiltQuery(q.db)
	var objects uint64
	var built uint8
	err := q.conn.QueryRow(ctx, sql, args...).Scan(&objects, &built)
	if err != nil && ctx.Err() != nil {
		return false // the request ended: read again next time
	}
	st.built, st.checked = err == nil && objects == 2 && built == 1, time.Now()
	return st.built
}

// forgetMoveIndex makes the next request read the index state again and
// this one scan the log.
func (q *Queries) forgetMoveIndex(l *MoveLog) {
	if v, ok := q.moveIndexes.Load(l.Log.Name); ok {
		st := v.(*moveIndexState)
		st.mu.Lock()
		st.built, st.checked = false, time.Time{}
		st.mu.Unlock()
	}
}

// ErrNoMoveIndex is RowWithMoves's answer when the move log's index is
// not built (or is gone): the caller reads Row and LatestMove instead.
var ErrNoMoveIndex = errors.New("move log index not built")

// movesColumn is the result column of RowWithMoves holding the index's
// count; scanCopies keeps it out of the row. No loader column starts with
// "_byid" (18.16: an alias shadows a column of the same name).
const movesColumn = "_byid_moves"

// planRowWithMoves is planRow with, as one more column, the number of
// index rows naming the id (two parameters: the id, twice). The count is a
// scalar subquery, computed once before the read; count() because 18.16
// cannot inline a scalar subquery of UUIDs ("There are no UInt128 literals
// in SQL"). It costs ~0.3 ms of ClickHouse CPU over the document read
// alone, against ~0.9 ms for the separate move read it replaces when the
// count is 0 (docs/benchmarks.md, by-id session 7).
func planRowWithMoves(db string, l *MoveLog) string {
	count := fmt.Sprintf(", (SELECT count() FROM %s.%s WHERE document = ?) AS %s", quote(db), quote(l.Index().Table()), movesColumn)
	return planRow(db, l.Documents.Name, l.Documents.IDColumn, count)
}

// RowWithMoves is Row of l's documents table read together with whether
// the move log may hold a move of id, in one query: moved is true when the
// log's index has a row naming id, or when there is no copy (the count
// rides on the copies' rows, so with none it is not known). When moved is
// false the log has no move of id that its index has, which is what
// LatestMove reads once the index is built: it would answer nil.
//
// It needs the index built (moveIndexBuilt); otherwise, and when the query
// finds a table gone, it returns ErrNoMoveIndex and the caller reads Row
// and LatestMove as before the index. An index found gone is read again
// by the next request (forgetMoveIndex), like LatestMove's fallback.
func (q *Queries) RowWithMoves(ctx context.Context, l *MoveLog, id any) (copies []Copy, moved bool, err error) {
	if !q.moveIndexBuilt(ctx, l) {
		return nil, false, ErrNoMoveIndex
	}
	rows, err := q.conn.Query(clickhouse.Context(ctx, clickhouse.WithSettings(pointLookup)), planRowWithMoves(q.db, l), id, id)
	if err != nil {
		if chstore.IsUnknownTable(err) {
			// The documents table missing is Row's to report; only a
			// missing index makes the next request read its state again.
			if strings.Contains(err.Error(), l.Index().Table()) {
				q.forgetMoveIndex(l)
			}
			return nil, false, ErrNoMoveIndex
		}
		return nil, false, fmt.Errorf("read %s: %w", l.Documents.Name, err)
	}
	defer rows.Close()
	copies, extras, err := scanCopies(rows, []string{movesColumn})
	if err != nil {
		return nil, false, fmt.Errorf("scan %s: %w", l.Documents.Name, err)
	}
	if len(copies) == 0 {
		return nil, true, nil
	}
	return copies, extras[0][0].(uint64) > 0, nil
}

// MoveLogReads is how many times this Queries has read the move log for a
// document's newest move (LatestMove's queries); for tests that check a
// by-id read skipped it.
func (q *Queries) MoveLogReads() int64 { return q.moveLogReads.Load() }

// latestMoveRead runs sql (a LatestMove plan: the newest moves first) and
// returns the newest of them (newestOfTied), or nil when there is none.
func (q *Queries) latestMoveRead(ctx context.Context, l *MoveLog, sql string, id any) (*Move, error) {
	q.moveLogReads.Add(1)
	rows, err := q.conn.Query(clickhouse.Context(ctx, clickhouse.WithSettings(latestMoveSettings)), sql, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var moves []Move // newest first, up to maxTiedMoves
	for rows.Next() {
		m, err := scanMove(rows)
		if err != nil {
			return nil, err
		}
		moves = append(moves, m)
	}
	if err := rows.Err(); err != nil || len(moves) == 0 {
		return nil, err
	}
	m := newestOfTied(moves, l.Moves.InProgress)
	return &m, nil
}
