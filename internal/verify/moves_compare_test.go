package verify

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/tributary/tributary/internal/tables"
)

var testMoves = &tables.Moves{InProgressStates: []string{"started", "copied"}, DoneStates: []string{"done"}}

func TestExpectMoves(t *testing.T) {
	cutoff := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return cutoff.Add(d) }
	fin := func(d time.Duration) *time.Time { x := at(d); return &x }
	truth := &moveTruth{
		moves: []srcMove{
			{ID: "old-stuck", Doc: "1", From: 0, To: 1, State: "copied", Started: at(-time.Hour)},
			{ID: "fresh", Doc: "2", From: 0, To: 1, State: "copied", Started: at(time.Minute)},
			// 0.5 s after the (whole-second) cutoff: stored as the cutoff's second, not before it.
			{ID: "edge", Doc: "3", From: 0, To: 1, State: "started", Started: at(500 * time.Millisecond)},
			{ID: "just-before", Doc: "8", From: 0, To: 1, State: "started", Started: at(-time.Second)},
			{ID: "lost", Doc: "4", From: 0, To: 1, State: "done", Started: at(-time.Hour), Finished: fin(-time.Hour)},
			{ID: "arrived", Doc: "5", From: 0, To: 1, State: "done", Started: at(-time.Hour), Finished: fin(-time.Hour)},
			{ID: "lost-recently", Doc: "6", From: 0, To: 1, State: "done", Started: at(time.Minute), Finished: fin(time.Minute)},
			{ID: "failed", Doc: "7", From: 0, To: 1, State: "failed", Started: at(-time.Hour)},
			// Doc 1 moved earlier too; the newest move decides what is current.
			{ID: "earlier", Doc: "1", From: 2, To: 0, State: "done", Started: at(-2 * time.Hour), Finished: fin(-2 * time.Hour)},
			// Doc 9 moved 0 -> 1 -> 2 (ids colliding, per-shard serials): the
			// first hop's target never saw it, yet it is live: nothing lost.
			{ID: "1", LogShard: 0, Doc: "9", From: 0, To: 1, State: "done", Started: at(-time.Hour), Finished: fin(-time.Hour)},
			{ID: "1", LogShard: 1, Doc: "9", From: 1, To: 2, State: "done", Started: at(-time.Hour + time.Millisecond), Finished: fin(-time.Hour)},
			// Doc 10: a move left started, superseded by a newer finished one:
			// only the move in force can be stuck.
			{ID: "2", LogShard: 0, Doc: "10", From: 0, To: 1, State: "started", Started: at(-2 * time.Hour)},
			{ID: "3", LogShard: 0, Doc: "10", From: 0, To: 2, State: "done", Started: at(-time.Hour), Finished: fin(-time.Hour)},
		},
		liveOn: map[string][]int{"1": {0, 1}, "2": {0}, "3": {0}, "5": {1}, "8": {0}, "9": {2}, "10": {2}},
	}
	e := expectMoves(truth, testMoves, cutoff)
	keys := func(m map[string]srcMove) []string { // the move ids, in key order
		var ids []string
		for _, k := range slices.Sorted(maps.Keys(m)) {
			ids = append(ids, m[k].ID)
		}
		return ids
	}
	if got := keys(e.stuck); len(got) != 2 || got[0] != "just-before" || got[1] != "old-stuck" {
		t.Errorf("stuck = %v, want [just-before old-stuck]", got)
	}
	if got := keys(e.lost); len(got) != 1 || got[0] != "lost" {
		t.Errorf("lost = %v, want [lost]", got)
	}
	var current []string
	for _, mv := range e.current {
		current = append(current, mv.ID)
	}
	if len(current) != 4 || current[0] != "edge" || current[1] != "fresh" || current[2] != "just-before" || current[3] != "old-stuck" {
		t.Errorf("current = %v, want [edge fresh just-before old-stuck]", current)
	}
}

func TestCompareMoveAnomalies(t *testing.T) {
	stuck := srcMove{ID: "s", Doc: "1", From: 0, To: 1, State: "copied"}
	lost := srcMove{ID: "l", Doc: "2", From: 0, To: 1, State: "done"}
	deleted := srcMove{ID: "d", Doc: "3", From: 0, To: 1, State: "done"}
	e := moveExpect{stuck: map[string]srcMove{"s": stuck}, lost: map[string]srcMove{"l": lost, "d": deleted}}
	byID := map[string]srcMove{"s": stuck, "l": lost, "d": deleted}
	arrived := func(mv srcMove) (bool, error) { return mv.ID == "d", nil }
	cases := []struct {
		name    string
		listed  map[string]string
		diffs   int
		deleted int
	}{
		{"exact", map[string]string{"s": "stuck", "l": "lost"}, 0, 1},
		{"stuck missing", map[string]string{"l": "lost"}, 1, 1},
		{"lost missing", map[string]string{"s": "stuck"}, 1, 1},
		{"wrong kind", map[string]string{"s": "lost", "l": "lost"}, 2, 1},
		{"unknown move listed", map[string]string{"s": "stuck", "l": "lost", "x": "stuck"}, 1, 1},
		{"arrived then deleted listed as lost", map[string]string{"s": "stuck", "l": "lost", "d": "lost"}, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			diffs, deleted, err := compareMoveAnomalies("docs", e, byID, map[string][]int{}, c.listed, arrived)
			if err != nil {
				t.Fatal(err)
			}
			if len(diffs) != c.diffs || deleted != c.deleted {
				t.Fatalf("%d differences %+v, %d deleted later; want %d, %d", len(diffs), diffs, deleted, c.diffs, c.deleted)
			}
			for _, d := range diffs {
				if d.Kind != KindMoveAnomaly {
					t.Fatalf("kind %s", d.Kind)
				}
			}
		})
	}
}

func TestCompareMoveView(t *testing.T) {
	mv := srcMove{ID: "m", Doc: "1", From: 0, To: 2, State: "copied"}
	ok := func(shards ...int) *apiDocument {
		return &apiDocument{Status: 200, Shards: shards, MoveID: "m", MoveState: "copied"}
	}
	cases := []struct {
		name   string
		liveOn []int
		api    *apiDocument
		diff   bool
	}{
		{"both live, source shown", []int{0, 2}, ok(0), false},
		{"both live, both shown", []int{0, 2}, ok(0, 2), true},
		{"both live, target shown", []int{0, 2}, ok(2), true},
		{"source gone, target shown", []int{2}, ok(2), false},
		{"flagged duplicate", []int{0, 2}, &apiDocument{Status: 200, Shards: []int{0}, Duplicate: true, MoveID: "m", MoveState: "copied"}, true},
		{"move not reported", []int{0}, &apiDocument{Status: 200, Shards: []int{0}}, true},
		{"nowhere, 404", nil, &apiDocument{Status: 404}, false},
		{"live on a third shard: not judged", []int{0, 1, 2}, ok(0, 1, 2), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			diffs := compareMoveView("docs", mv, c.liveOn, c.api)
			if (len(diffs) > 0) != c.diff {
				t.Fatalf("differences %+v, want any: %v", diffs, c.diff)
			}
			if c.diff && diffs[0].Kind != KindMoveShown {
				t.Fatalf("kind %s", diffs[0].Kind)
			}
		})
	}
}
