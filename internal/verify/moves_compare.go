package verify

// Moves against the API. From the shards' move logs and where each moved
// document is live, at a cutoff (now minus the grace period), each
// document judged by its move in force (its newest move; an older move of
// its chain is never stuck or lost), moves identified by (log shard, move
// id):
//
//   - a document whose newest move is in progress counts once: the API's
//     GET /v1/documents/{id} must show exactly one copy — the source's while
//     the source row is live, else the target's — with that move, and not
//     flag a duplicate (KindMoveShown);
//   - stuck moves (in force, in progress, started before the cutoff) and
//     lost ones (in force, done, finished before the cutoff, the document
//     live on no shard) are
//     anomalies that exist: GET /v1/anomalies/moves must list exactly those
//     (KindMoveAnomaly).
//
// One thing the shards cannot tell: a moved document deleted at the target
// after it arrived looks like one that never arrived. For a lost candidate
// the API does not list, ClickHouse is asked whether the target ever had a
// row of it (a delete tombstone); if so it arrived and is counted apart.
// The cutoff is the one the API's listing states; source times are
// truncated to whole seconds first, as ClickHouse stores them.

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/tributary/tributary/internal/tables"
)

// moveExpect is what the API should report.
type moveExpect struct {
	stuck, lost map[string]srcMove // by moveKey; lost: candidates (see above)
	// current are the documents whose newest move is in progress.
	current []srcMove
}

// key is mv's identity as text: "<log shard>/<move id>".
func (mv srcMove) key() string { return fmt.Sprintf("%d/%s", mv.LogShard, mv.ID) }

// moveKey is the identity of the move id logged on shard.
func moveKey(shard int, id string) string { return fmt.Sprintf("%d/%s", shard, id) }

// newerMove says whether a is newer than b, two moves of one document:
// the shards' times are exact (microseconds), so the start time decides;
// at an equal start, as the API orders ties (internal/query/movetie.go),
// a move in progress, then the identity.
func newerMove(a, b srcMove, m *tables.Moves) bool {
	if !a.Started.Equal(b.Started) {
		return a.Started.After(b.Started)
	}
	return tables.NewerTied(tables.TiedMove{InProgress: m.InProgress(a.State), LogShard: a.LogShard, ID: a.ID},
		tables.TiedMove{InProgress: m.InProgress(b.State), LogShard: b.LogShard, ID: b.ID})
}

// expectMoves derives the expectation from the truth at cutoff.
func expectMoves(t *moveTruth, m *tables.Moves, cutoff time.Time) moveExpect {
	e := moveExpect{stuck: map[string]srcMove{}, lost: map[string]srcMove{}}
	past := func(at time.Time) bool { return at.Truncate(time.Second).Before(cutoff) }
	newest := map[string]srcMove{}
	for _, mv := range t.moves {
		if n, ok := newest[mv.Doc]; !ok || newerMove(mv, n, m) {
			newest[mv.Doc] = mv
		}
	}
	for _, mv := range newest {
		switch {
		case m.InProgress(mv.State):
			e.current = append(e.current, mv)
			if past(mv.Started) {
				e.stuck[mv.key()] = mv
			}
		case m.Done(mv.State):
			at := mv.Started
			if mv.Finished != nil {
				at = *mv.Finished
			}
			if len(t.liveOn[mv.Doc]) == 0 && past(at) {
				e.lost[mv.key()] = mv
			}
		}
	}
	sort.Slice(e.current, func(i, j int) bool { return e.current[i].key() < e.current[j].key() })
	return e
}

// moveDiff is a move anomaly difference.
func moveDiff(kind Kind, table string, mv srcMove, source, api, detail string) Difference {
	return Difference{Kind: kind, Table: table, ID: mv.Doc, Shard: mv.From, Source: source, API: api,
		Detail: fmt.Sprintf("move %s logged on shard %d, from shard %d to %d: %s", mv.ID, mv.LogShard, mv.From, mv.To, detail)}
}

// compareMoveAnomalies compares the API's listing (moveKey -> kind) with
// the expectation. arrived says whether a lost candidate's document ever
// reached its target (see the file comment). It returns the differences
// and how many candidates arrived and were deleted later.
func compareMoveAnomalies(table string, e moveExpect, byKey map[string]srcMove, liveOn map[string][]int, listed map[string]string,
	arrived func(srcMove) (bool, error)) ([]Difference, int, error) {
	var diffs []Difference
	deletedLater := 0
	for _, id := range slices.Sorted(maps.Keys(e.stuck)) {
		if k := listed[id]; k != "stuck" {
			diffs = append(diffs, moveDiff(KindMoveAnomaly, table, e.stuck[id], "stuck", orDash(k), "a move half-done past the grace period is not listed as stuck"))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(e.lost)) {
		if listed[id] == "lost" {
			continue
		}
		mv := e.lost[id]
		ok, err := arrived(mv)
		if err != nil {
			return nil, 0, err
		}
		if ok {
			deletedLater++
			continue
		}
		diffs = append(diffs, moveDiff(KindMoveAnomaly, table, mv, "lost", orDash(listed[id]), "done, on no shard and never arrived, but not listed as lost"))
	}
	ids := make([]string, 0, len(listed))
	for id := range listed {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		kind := listed[id]
		_, stuck := e.stuck[id]
		_, lost := e.lost[id]
		if (kind == "stuck" && stuck) || (kind == "lost" && lost) {
			continue
		}
		mv, known := byKey[id]
		if !known {
			mv = srcMove{ID: id, LogShard: -1, From: -1, To: -1}
		}
		diffs = append(diffs, moveDiff(KindMoveAnomaly, table, mv, "-", kind,
			fmt.Sprintf("listed as %s, but the source log says state %q, document live on shards %v", kind, orDash(mv.State), liveOn[mv.Doc])))
	}
	return diffs, deletedLater, nil
}

// compareMoveView checks the by-id answer d for a document whose newest
// move mv is in progress; liveOn are the shards where it is live.
func compareMoveView(table string, mv srcMove, liveOn []int, d *apiDocument) []Difference {
	var want []int
	switch {
	case slices.Contains(liveOn, mv.From):
		want = []int{mv.From}
	case slices.Contains(liveOn, mv.To):
		want = []int{mv.To}
	}
	for _, s := range liveOn {
		if s != mv.From && s != mv.To {
			return nil // live elsewhere too: not the move's doing, the row checks cover it
		}
	}
	var problems []string
	if !slices.Equal(d.Shards, want) {
		problems = append(problems, fmt.Sprintf("copies on shards %v, want one on %v", d.Shards, want))
	}
	if d.Duplicate {
		problems = append(problems, "flagged duplicate")
	}
	if len(want) > 0 && (d.MoveID != mv.ID || d.MoveLogShard != mv.LogShard || d.MoveState != mv.State) {
		problems = append(problems, fmt.Sprintf("move %q logged on shard %d in state %q, want %q logged on shard %d in %q",
			d.MoveID, d.MoveLogShard, d.MoveState, mv.ID, mv.LogShard, mv.State))
	}
	if len(problems) == 0 {
		return nil
	}
	return []Difference{moveDiff(KindMoveShown, table, mv, shardList(want), shardList(d.Shards),
		fmt.Sprintf("a document mid-move must be shown once: %v", problems))}
}
