package query

// The order of a document's moves: which one is in force.
//
// ClickHouse 18.16 keeps the move log's times to the second, so two moves
// of one document started within the same second tie on started_at, and
// their ids (random uuids in the demo, per-shard serials elsewhere) say
// nothing about their order across shards. Their versions cannot either:
// each is an LSN of the shard that wrote the move, and the moves of a chain
// start on different shards. What does order them is the chain itself: a
// document moved from A to B and then from B to C has a second move that
// starts where the first one ended.
//
// So a document's moves are ordered by, in turn:
//  1. started_at (whole seconds);
//  2. not continued before continued: a move that another move of the
//     document started in the same second continues (starts on the shard,
//     and workspace, where it ended) is older than that one;
//  3. in progress before not: a document's moves run one after another,
//     so an unfinished move is the last one started;
//  4. the identity: log shard, then move id (shorter first, then as text:
//     numeric order for serial ids), so that the order is total.
//
// The newest in that order is the move in force. newestOfTied applies it
// to the few newest moves the by-id read fetches; the listing computes the
// same order in ClickHouse (inForceMoves). Both must agree.

import (
	"fmt"
	"strings"

	"github.com/tributary/tributary/internal/tables"
)

// maxTiedMoves is how many of a document's newest moves LatestMove reads
// to order those that tie on their start time.
const maxTiedMoves = 8

// newestOfTied picks the newest of moves (ordered by start time, newest
// first) in the order above.
func newestOfTied(moves []Move, inProgress func(state string) bool) Move {
	tied := moves[:1]
	for _, m := range moves[1:] {
		if !m.StartedAt.Equal(moves[0].StartedAt) {
			break
		}
		tied = append(tied, m)
	}
	continued := func(m Move) bool {
		for _, o := range tied {
			if continues(o, m) {
				return true
			}
		}
		return false
	}
	best, bestContinued := tied[0], continued(tied[0])
	for _, m := range tied[1:] {
		c := continued(m)
		if newerTied(m, c, best, bestContinued, inProgress) {
			best, bestContinued = m, c
		}
	}
	return best
}

// newerTied says whether a is newer than b, two moves started in the same
// second (aCont, bCont: whether another move continues each).
func newerTied(a Move, aCont bool, b Move, bCont bool, inProgress func(string) bool) bool {
	if aCont != bCont {
		return !aCont
	}
	return tables.NewerTied(tables.TiedMove{InProgress: inProgress(a.State), LogShard: a.LogShard, ID: a.MoveID},
		tables.TiedMove{InProgress: inProgress(b.State), LogShard: b.LogShard, ID: b.MoveID})
}

// continues says whether move b starts where move a ended: on its target
// shard and workspace (both empty when the log has no workspace columns).
func continues(b, a Move) bool {
	return b.FromShard == a.ToShard && b.FromWorkspace == a.ToWorkspace
}

// identityOrder is the SQL of step 4, newest first (for ORDER BY).
func (l *MoveLog) identityOrder() string {
	id := "toString(" + quote(l.Log.IDColumn) + ")"
	return fmt.Sprintf("_shard DESC, length(%[1]s) DESC, %[1]s DESC", id)
}

// workspaces are the SQL of a log row's from and to workspaces as text
// (” without workspace columns), as moveColumns reads them.
func (l *MoveLog) workspaces() (from, to string) {
	from, to = "''", "''"
	if c := l.Moves.FromWorkspaceColumn; c != "" {
		from = "toString(" + quote(c) + ")"
	}
	if c := l.Moves.ToWorkspaceColumn; c != "" {
		to = "toString(" + quote(c) + ")"
	}
	return from, to
}

// inForceMoves is a subquery selecting the (move id, log shard) of every
// document's move in force: the argMax of the order above over the log's
// live rows that name a document. One parameter: the in-progress states.
// Step 2's "continued" is a lookup of (document, start second, target
// shard, workspace) among the (document, start second, source shard,
// workspace) of every move: a move that matches is continued by a move of
// the same document started in the same second.
func (l *MoveLog) inForceMoves(db string) string {
	m := l.Moves
	logT := quote(db) + "." + quote(l.Log.Name)
	doc, started, id := quote(m.DocumentColumn), quote(m.StartedColumn), quote(l.Log.IDColumn)
	fromWS, toWS := l.workspaces()
	live := fmt.Sprintf("%s FINAL WHERE _deleted = 0 AND isNotNull(%s)", logT, doc)
	starts := fmt.Sprintf("SELECT %s, %s, %s, %s FROM %s", doc, started, l.fromShard(), fromWS, live)
	key := strings.Join([]string{
		"toUInt32(" + started + ")",
		fmt.Sprintf("(%s, %s, toInt64(%s), %s) NOT IN (%s)", doc, started, quote(m.ToShardColumn), toWS, starts),
		quote(m.StateColumn) + " IN ?",
		"_shard", "length(toString(" + id + "))", "toString(" + id + ")",
	}, ", ")
	return fmt.Sprintf("SELECT tupleElement(_mv_force, 1), tupleElement(_mv_force, 2) FROM (SELECT argMax(tuple(%s, _shard), tuple(%s)) AS _mv_force FROM %s GROUP BY %s)",
		id, key, live, doc)
}
