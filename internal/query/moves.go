package query

// Moves: the move log of a saga that moves rows (documents) between shards
// (tables.Moves). A move starts on the source shard's log, copies the row
// to the target shard, deletes it at the source and finishes; a half-done
// move leaves the row live on both shards, a broken one on neither.
//
// A move is identified by (the shard its log row lives on, its move id):
// per-shard serial move ids collide across shards, and the log's table is
// keyed by (id, _shard) like every replicated table. Every read below
// matches moves on both. Without a from-shard column, a move's source is
// the shard of its log row.
//
// A document may move many times; the move in force is its newest (the
// order of movetie.go: start time, then the chain, then the identity).
// The by-id read asks the log for it (LatestMove) and PickCurrent chooses
// the copy to show. The listing (MoveAnomalies) judges each document by
// its move in force only, entirely in ClickHouse:
//   - stuck: the move in force is in progress and started more than the
//     grace period ago;
//   - lost: the move in force is done, finished more than the grace
//     period ago, the document is live on no shard at all, and the target
//     shard has no row with the id (neither live nor a delete tombstone: a
//     tombstone means it arrived and was deleted or moved on later).
// So an older move of the chain is never stuck or lost (it was superseded:
// a move started before the initial copy has a target that ClickHouse may
// never have seen), and a document with a live copy is never lost.
// The log is read with FINAL and a plain WHERE like every replicated table.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/tables"
)

// MoveLog is a validated move-log configuration with the tables it names.
type MoveLog struct {
	Moves *tables.Moves
	// Log and Documents are the move log and the moved rows' table.
	Log, Documents *tables.Table
}

// MoveLogOf resolves the move log of documents; false when there is none.
func MoveLogOf(c *tables.Config, documents string) (*MoveLog, bool) {
	m, ok := c.MovesOf(documents)
	if !ok {
		return nil, false
	}
	logT, ok1 := c.ByName(m.Table)
	docT, ok2 := c.ByName(m.DocumentsTable)
	if !ok1 || !ok2 {
		return nil, false // Validate refuses this; be safe anyway
	}
	return &MoveLog{Moves: m, Log: logT, Documents: docT}, true
}

// Move is one move of a document, as its log row says (newest version).
type Move struct {
	MoveID string `json:"move_id"`
	// LogShard is the shard the move's log row lives on: with MoveID, the
	// move's identity.
	LogShard      int        `json:"log_shard"`
	DocumentID    string     `json:"document_id"`
	FromShard     int        `json:"from_shard"`
	ToShard       int        `json:"to_shard"`
	FromWorkspace string     `json:"from_workspace,omitempty"`
	ToWorkspace   string     `json:"to_workspace,omitempty"`
	State         string     `json:"state"`
	StartedAt     time.Time  `json:"started_at"`
	FinishedAt    *time.Time `json:"finished_at,omitempty"`
}

// Move anomaly kinds.
const (
	// MoveStuck: in progress for longer than the grace period (the row is
	// live on both shards, or still only at the source).
	MoveStuck = "stuck"
	// MoveLost: done, but the row is on neither shard.
	MoveLost = "lost"
)

// MoveAnomaly is a move that went wrong.
type MoveAnomaly struct {
	Kind  string `json:"kind"`
	Table string `json:"table"`
	Move
}

// MoveAnomaliesRequest is a validated listing request.
type MoveAnomaliesRequest struct {
	// Kinds to list: MoveStuck, MoveLost or both.
	Kinds []string
	// Cutoff: moves that started (stuck) or finished (lost) before it are
	// past the grace period; normally now minus the grace.
	Cutoff time.Time
	// After, when set, keeps moves strictly after it in the order
	// (started_at, move id) descending.
	After *MoveKey
	Limit int
}

// MoveKey is a move's position in the listing order: started_at, then the
// move's identity (log shard, move id in moveIDOrder).
type MoveKey struct {
	StartedAt time.Time
	LogShard  int
	MoveID    string
}

// Key is a's position in the listing order.
func (a MoveAnomaly) Key() MoveKey {
	return MoveKey{StartedAt: a.StartedAt, LogShard: a.LogShard, MoveID: a.MoveID}
}

// MoveAnomaliesPage is one page of the listing.
type MoveAnomaliesPage struct {
	Anomalies []MoveAnomaly
	More      bool
}

// moveColumns are the SELECT expressions of a Move, in scanMove's order;
// typed so that the scan does not depend on the source column types.
func (l *MoveLog) moveColumns() string {
	m := l.Moves
	ws := func(col string) string {
		if col == "" {
			return "''"
		}
		return "toString(" + quote(col) + ")"
	}
	finished := "toUInt32(0)"
	if m.FinishedColumn != "" {
		finished = "ifNull(toUInt32(" + quote(m.FinishedColumn) + "), 0)"
	}
	return strings.Join([]string{
		"toString(" + quote(l.Log.IDColumn) + ")", "toInt64(_shard)", "toString(" + quote(m.DocumentColumn) + ")",
		l.fromShard(), "toInt64(" + quote(m.ToShardColumn) + ")",
		ws(m.FromWorkspaceColumn), ws(m.ToWorkspaceColumn), "toString(" + quote(m.StateColumn) + ")",
		"toUInt32(" + quote(m.StartedColumn) + ")", finished,
	}, ", ")
}

// fromShard is the source shard of a log row: its from-shard column, or
// without one the shard the row lives on.
func (l *MoveLog) fromShard() string {
	if l.Moves.FromShardColumn == "" {
		return "toInt64(_shard)"
	}
	return "toInt64(" + quote(l.Moves.FromShardColumn) + ")"
}

// scanner is what scanMove reads from (driver.Rows or driver.Row).
type scanner interface{ Scan(dest ...any) error }

func scanMove(r scanner, extra ...any) (Move, error) {
	var m Move
	var logShard, from, to int64
	var started, finished uint32
	dest := append([]any{&m.MoveID, &logShard, &m.DocumentID, &from, &to, &m.FromWorkspace, &m.ToWorkspace, &m.State, &started, &finished}, extra...)
	if err := r.Scan(dest...); err != nil {
		return m, err
	}
	m.LogShard, m.FromShard, m.ToShard = int(logShard), int(from), int(to)
	m.StartedAt = time.Unix(int64(started), 0).UTC()
	if finished > 0 {
		f := time.Unix(int64(finished), 0).UTC()
		m.FinishedAt = &f
	}
	return m, nil
}

// stateSet is a state list as a bound IN set.
func stateSet(states []string) clickhouse.GroupSet {
	v := make([]any, len(states))
	for i, s := range states {
		v[i] = s
	}
	return clickhouse.GroupSet{Value: v}
}

var plainWhere = clickhouse.Settings{"optimize_move_to_prewhere": 0}

// latestMoveSettings are LatestMove's: a plain WHERE, and, like a by-id
// read, decompressed blocks kept in ClickHouse's cache and one thread. The
// scan of the document column is the read's cost; from the cache it
// skips the decompression (bench api --variants byid-read, at 09177d7, at 10M
// documents and 100k moves, 1 client: p50 9.6 -> 5.9 ms, p99 14.0 -> 10.2
// ms, docs/benchmarks-log.md, API). Speed only, never the answer.
var latestMoveSettings = clickhouse.Settings{"optimize_move_to_prewhere": 0, "use_uncompressed_cache": 1, "max_threads": 1}

// planLatestMove is the by-id read of the move log. The log is keyed by
// move id, not document id, so a FINAL read filtered on the document
// would merge the whole log (273 ms at 1M moves, measured). Instead, a
// plain scan of the document column alone finds the document's move ids,
// and the FINAL read is restricted to those keys — (move id, log shard):
// a move id alone may name another document's move on another shard —
// which the primary index finds. Exact for the same reason as planRow's
// PREWHERE: every version of a move's row carries the same document id, so
// the inner scan sees every move of the document whatever its versions,
// and the FINAL merge then sees every version of each of them.
func planLatestMove(db string, l *MoveLog) string {
	logT := quote(db) + "." + quote(l.Log.Name)
	keys := fmt.Sprintf("SELECT %s, _shard FROM %s WHERE %s = ?", quote(l.Log.IDColumn), logT, quote(l.Moves.DocumentColumn))
	return l.planLatestMoveOf(db, keys)
}

// planLatestMoveOf reads the newest moves among the (move id, log shard)
// keys that the subquery keys selects (one parameter: the document id),
// newest first in the order newestOfTied completes.
func (l *MoveLog) planLatestMoveOf(db, keys string) string {
	return fmt.Sprintf(`SELECT %[1]s FROM %[2]s.%[3]s FINAL WHERE (%[4]s, _shard) IN (%[5]s) AND _deleted = 0
		ORDER BY %[6]s DESC, %[7]s LIMIT %[8]d`,
		l.moveColumns(), quote(db), quote(l.Log.Name), quote(l.Log.IDColumn), keys, quote(l.Moves.StartedColumn), l.identityOrder(), maxTiedMoves)
}

// PlanLatestMove is the SQL of LatestMove (one parameter: the document
// id); exported for tests/moveindex_test.go, which reads the log both ways.
func PlanLatestMove(db string, l *MoveLog) string { return planLatestMove(db, l) }

// LatestMoveSettings returns a copy of LatestMove's settings.
func LatestMoveSettings() clickhouse.Settings {
	out := clickhouse.Settings{}
	for k, v := range latestMoveSettings {
		out[k] = v
	}
	return out
}

// LatestMove returns the newest move of the document with id (bound as
// the documents table's id: an int64 or a UUID's text), or nil when the log
// has none (or does not exist in ClickHouse yet).
func (q *Queries) LatestMove(ctx context.Context, l *MoveLog, id any) (*Move, error) {
	if q.moveIndexBuilt(ctx, l) {
		m, err := q.latestMoveRead(ctx, l, planLatestMoveIndexed(q.db, l), id)
		if err == nil || !chstore.IsUnknownTable(err) {
			if err != nil {
				return nil, fmt.Errorf("read move log: %w", err)
			}
			return m, nil
		}
		// The index (or the log) is gone: the scan below says which.
		q.forgetMoveIndex(l)
	}
	m, err := q.latestMoveRead(ctx, l, planLatestMove(q.db, l), id)
	if err != nil {
		if chstore.IsUnknownTable(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read move log: %w", err)
	}
	return m, nil
}

// planMoveAnomalies builds the condition selecting stuck and lost moves
// (see the file comment) and its arguments: the move in force of its
// document, and stuck or lost.
func planMoveAnomalies(db string, l *MoveLog, kinds []string, cutoff time.Time) (string, []any) {
	m := l.Moves
	state, started := quote(m.StateColumn), quote(m.StartedColumn)
	finished := started
	if m.FinishedColumn != "" {
		finished = fmt.Sprintf("ifNull(%s, %s)", quote(m.FinishedColumn), started)
	}
	var conds []string
	var args []any
	for _, k := range kinds {
		switch k {
		case MoveStuck:
			conds = append(conds, fmt.Sprintf("(%s IN ? AND %s < ?)", state, started))
			args = append(args, stateSet(m.InProgressStates), cutoff.UTC())
		case MoveLost:
			doc, docID := quote(m.DocumentColumn), quote(l.Documents.IDColumn)
			docs := quote(db) + "." + quote(l.Documents.Name)
			doneIDs := fmt.Sprintf("SELECT %s FROM %s.%s FINAL WHERE _deleted = 0 AND %s IN ?",
				doc, quote(db), quote(l.Log.Name), state)
			conds = append(conds, fmt.Sprintf(`(%[1]s IN ? AND %[2]s < ?
				AND (%[3]s, toInt64(%[4]s)) NOT IN (SELECT %[5]s, toInt64(_shard) FROM %[6]s FINAL WHERE %[5]s IN (%[7]s))
				AND %[3]s NOT IN (SELECT %[5]s FROM %[6]s FINAL WHERE %[5]s IN (%[7]s) AND _deleted = 0))`,
				state, finished, doc, quote(m.ToShardColumn), docID, docs, doneIDs))
			args = append(args, stateSet(m.DoneStates), cutoff.UTC(), stateSet(m.DoneStates), stateSet(m.DoneStates))
		}
	}
	cond := fmt.Sprintf("(%s, _shard) IN (%s) AND (%s)", quote(l.Log.IDColumn), l.inForceMoves(db), strings.Join(conds, " OR "))
	return cond, append([]any{stateSet(m.InProgressStates)}, args...)
}

// kindExpr says which kind a selected move is.
func kindExpr(l *MoveLog) (string, []any) {
	return fmt.Sprintf("if(%s IN ?, '%s', '%s')", quote(l.Moves.StateColumn), MoveStuck, MoveLost),
		[]any{stateSet(l.Moves.InProgressStates)}
}

// MoveAnomalies lists stuck and lost moves, newest first, a page at a time.
// Before the loader has created the move log, the list is empty.
func (q *Queries) MoveAnomalies(ctx context.Context, l *MoveLog, req MoveAnomaliesRequest) (*MoveAnomaliesPage, error) {
	page := &MoveAnomaliesPage{Anomalies: []MoveAnomaly{}}
	if len(req.Kinds) == 0 {
		return page, nil
	}
	kind, args := kindExpr(l)
	cond, condArgs := planMoveAnomalies(q.db, l, req.Kinds, req.Cutoff)
	args = append(args, condArgs...)
	started, moveID := quote(l.Moves.StartedColumn), "toString("+quote(l.Log.IDColumn)+")"
	if a := req.After; a != nil {
		cond += fmt.Sprintf(" AND (%[1]s < ? OR (%[1]s = ? AND (toInt64(_shard), length(%[2]s), %[2]s) < (?, ?, ?)))", started, moveID)
		args = append(args, a.StartedAt.UTC(), a.StartedAt.UTC(), int64(a.LogShard), uint64(len(a.MoveID)), a.MoveID)
	}
	limit := min(max(req.Limit, 1), MaxAnomalyLimit)
	sql := fmt.Sprintf(`SELECT %s, %s FROM %s.%s FINAL WHERE _deleted = 0 AND %s ORDER BY %s DESC, %s LIMIT %d`,
		l.moveColumns(), kind, quote(q.db), quote(l.Log.Name), cond, started, l.identityOrder(), limit+1)
	rows, err := q.conn.Query(clickhouse.Context(ctx, clickhouse.WithSettings(plainWhere)), sql, args...)
	if err != nil {
		if chstore.IsUnknownTable(err) {
			return page, nil
		}
		return nil, fmt.Errorf("read move anomalies: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		if len(page.Anomalies) == limit {
			page.More = true
			break
		}
		a := MoveAnomaly{Table: l.Documents.Name}
		if a.Move, err = scanMove(rows, &a.Kind); err != nil {
			return nil, fmt.Errorf("read move anomalies: %w", err)
		}
		page.Anomalies = append(page.Anomalies, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read move anomalies: %w", err)
	}
	return page, nil
}

// MoveAnomalyCounts counts stuck and lost moves (for metrics).
func (q *Queries) MoveAnomalyCounts(ctx context.Context, l *MoveLog, cutoff time.Time) (stuck, lost int64, err error) {
	kind, args := kindExpr(l)
	cond, condArgs := planMoveAnomalies(q.db, l, []string{MoveStuck, MoveLost}, cutoff)
	args = append(args, condArgs...)
	sql := fmt.Sprintf(`SELECT %s AS kind, count() FROM %s.%s FINAL WHERE _deleted = 0 AND %s GROUP BY kind`,
		kind, quote(q.db), quote(l.Log.Name), cond)
	rows, err := q.conn.Query(clickhouse.Context(ctx, clickhouse.WithSettings(plainWhere)), sql, args...)
	if err != nil {
		if chstore.IsUnknownTable(err) {
			return 0, 0, nil
		}
		return 0, 0, fmt.Errorf("count move anomalies: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var n uint64
		if err := rows.Scan(&k, &n); err != nil {
			return 0, 0, fmt.Errorf("count move anomalies: %w", err)
		}
		if k == MoveStuck {
			stuck = int64(n)
		} else {
			lost = int64(n)
		}
	}
	return stuck, lost, rows.Err()
}
