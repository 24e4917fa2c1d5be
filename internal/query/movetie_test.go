package query

import (
	"fmt"
	"testing"
	"time"
)

func TestNewestOfTied(t *testing.T) {
	at := time.Date(2026, 12, 1, 5, 0, 0, 0, time.UTC)
	before := at.Add(-time.Second)
	mv := func(id string, from, to int, state string, started time.Time) Move {
		return Move{MoveID: id, LogShard: from, DocumentID: "7", FromShard: from, ToShard: to,
			FromWorkspace: "w" + string(rune('0'+from)), ToWorkspace: "w" + string(rune('0'+to)), State: state, StartedAt: started}
	}
	inProgress := func(s string) bool { return s == "started" || s == "copied" }
	for _, tc := range []struct {
		name  string
		moves []Move // newest first by start time; ties in uuid order
		want  string
	}{
		{"one move", []Move{mv("a", 0, 1, "done", at)}, "a"},
		{"no tie", []Move{mv("b", 1, 2, "done", at), mv("a", 0, 1, "done", before)}, "b"},
		{"chain, the first listed first", []Move{mv("a", 0, 1, "done", at), mv("b", 1, 2, "started", at)}, "b"},
		{"chain, both done", []Move{mv("a", 0, 1, "done", at), mv("b", 1, 2, "done", at)}, "b"},
		{"chain of three, shuffled", []Move{mv("b", 1, 2, "done", at), mv("c", 2, 3, "copied", at), mv("a", 0, 1, "done", at)}, "c"},
		{"there and back: the one in progress", []Move{mv("a", 0, 1, "done", at), mv("b", 1, 0, "started", at)}, "b"},
		{"there and back, listed the other way", []Move{mv("b", 1, 0, "started", at), mv("a", 0, 1, "done", at)}, "b"},
		{"there and back, both done: the identity decides (log shard first)", []Move{mv("b", 0, 1, "done", at), mv("a", 1, 0, "done", at)}, "a"},
		{"same id on two shards, unrelated: the log shard decides", []Move{mv("5", 0, 1, "done", at), mv("5", 2, 3, "done", at)}, "5@2"},
		{"serial ids on one shard: numeric order", []Move{mv("9", 0, 1, "failed", at), mv("10", 0, 1, "done", at)}, "10@0"},
		{"chain with colliding serial ids", []Move{mv("1", 1, 2, "done", at), mv("1", 0, 1, "done", at)}, "1@1"},
		{"older moves never count", []Move{mv("a", 0, 1, "done", at), mv("z", 1, 2, "started", before)}, "a"},
		{"same shard, other workspace: not a continuation",
			[]Move{mv("a", 0, 1, "done", at), {MoveID: "0", FromShard: 1, ToShard: 2, FromWorkspace: "other", ToWorkspace: "w2", State: "done", StartedAt: at}}, "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := newestOfTied(tc.moves, inProgress)
			if id := got.MoveID; id != tc.want && fmt.Sprintf("%s@%d", id, got.LogShard) != tc.want {
				t.Errorf("newest = %s@%d, want %s", id, got.LogShard, tc.want)
			}
		})
	}
}
