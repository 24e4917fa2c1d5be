package api

import (
	"slices"
	"testing"

	"github.com/tributary/tributary/internal/query"
)

func TestOwnerRule(t *testing.T) {
	cp := func(shard int, ws string) query.Copy {
		return query.Copy{Shard: shard, Row: map[string]any{"workspace_id": ws}}
	}
	owners := map[string]query.KeyOwner{
		"7": {Owner: 1, RingVersion: 2, Staged: 3},
		"8": {Owner: 0, RingVersion: 2, Staged: -1},
	}
	for _, c := range []struct {
		name   string
		copies []query.Copy
		want   []int // shards kept; nil: the rule does not apply
	}{
		{"owner and staged copy", []query.Copy{cp(1, "7"), cp(3, "7")}, []int{1}},
		{"owner and leftover", []query.Copy{cp(0, "7"), cp(1, "7")}, []int{1}},
		{"two owned copies (a saga move across workspaces): not ownership's doing", []query.Copy{cp(1, "7"), cp(0, "8")}, nil},
		{"no copy owned", []query.Copy{cp(2, "7"), cp(3, "7")}, nil},
		{"a key never placed counts as owned", []query.Copy{cp(2, "9"), cp(0, "7")}, []int{2}},
		{"NULL key counts as owned", []query.Copy{{Shard: 2, Row: map[string]any{"workspace_id": nil}}, cp(0, "7")}, []int{2}},
	} {
		got, ok := OwnerRule("workspace_id", owners)(c.copies)
		var shards []int
		for _, g := range got {
			shards = append(shards, g.Shard)
		}
		if ok != (c.want != nil) || !slices.Equal(shards, c.want) {
			t.Errorf("%s: kept %v (applies %v), want %v", c.name, shards, ok, c.want)
		}
	}
}
