package query

import (
	"slices"
	"testing"
)

func shardsOf(cs []Copy) []int {
	out := []int{}
	for _, c := range cs {
		out = append(out, c.Shard)
	}
	return out
}

func TestPickCurrentMoveRule(t *testing.T) {
	inProgress := func(s string) bool { return s == "started" || s == "copied" }
	move := func(state string) *Move { return &Move{MoveID: "m", FromShard: 0, ToShard: 2, State: state} }
	copies := func(shards ...int) []Copy {
		var cs []Copy
		for _, s := range shards {
			cs = append(cs, Copy{Shard: s})
		}
		return cs
	}
	cases := []struct {
		name    string
		move    *Move
		copies  []Copy
		want    []int
		decided int
	}{
		{"no move: every copy", nil, copies(0, 2), []int{0, 2}, -1},
		{"started, only the source", move("started"), copies(0), []int{0}, 0},
		{"copied, both: the source", move("copied"), copies(0, 2), []int{0}, 0},
		{"copied, source gone: the target", move("copied"), copies(2), []int{2}, 0},
		{"done, both: a real duplicate", move("done"), copies(0, 2), []int{0, 2}, -1},
		{"failed, both: a real duplicate", move("failed"), copies(0, 2), []int{0, 2}, -1},
		{"in progress, a third shard: not the move's doing", move("copied"), copies(0, 1, 2), []int{0, 1, 2}, -1},
		{"in progress, no copy", move("copied"), nil, []int{}, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, by := PickCurrent(c.copies, MoveRule(c.move, inProgress))
			if !slices.Equal(shardsOf(got), c.want) || by != c.decided {
				t.Fatalf("PickCurrent = shards %v by rule %d, want %v by %d", shardsOf(got), by, c.want, c.decided)
			}
		})
	}
}

// TestPickCurrentOrder: the first rule that applies decides; rules that do
// not apply (or are nil) are skipped.
func TestPickCurrentOrder(t *testing.T) {
	cs := []Copy{{Shard: 0}, {Shard: 1}}
	never := func([]Copy) ([]Copy, bool) { return nil, false }
	first := func(c []Copy) ([]Copy, bool) { return c[:1], true }
	last := func(c []Copy) ([]Copy, bool) { return c[1:], true }
	if got, by := PickCurrent(cs, nil, never, last, first); by != 2 || got[0].Shard != 1 {
		t.Fatalf("got shard %v by rule %d, want shard 1 by rule 2", shardsOf(got), by)
	}
}
