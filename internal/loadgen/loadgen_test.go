package loadgen

import (
	"context"
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"no moves", Config{}, true},
		{"demo", Config{MoveShare: 0.02, HalfDoneShare: 0.1, LegacyShare: 0.03}, true},
		{"every move fails one way or the other", Config{MoveShare: 1, HalfDoneShare: 0.5, LoseShare: 0.5}, true},
		{"negative share", Config{MoveShare: -0.1}, false},
		{"share above 1", Config{LoseShare: 1.5}, false},
		{"half-done and lost above 1", Config{HalfDoneShare: 0.6, LoseShare: 0.5}, false},
		{"moves and legacy above 1", Config{MoveShare: 0.7, LegacyShare: 0.4}, false},
		{"bulk", Config{RowsPerOp: 100, BulkBodyBytes: 200}, true},
		{"bulk with moves", Config{RowsPerOp: 100, MoveShare: 0.02}, false},
		{"bulk with legacy notes", Config{RowsPerOp: 100, LegacyShare: 0.03}, false},
		{"negative rows per operation", Config{RowsPerOp: -1}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.cfg.Validate(); (err == nil) != c.ok {
				t.Fatalf("Validate() = %v, want ok %v", err, c.ok)
			}
		})
	}
}

// TestNewChecksShards: a ring map placing workspaces on a shard that is not
// given is refused before anything connects (the DSNs lead nowhere), naming
// the shard; a sparse fleet's default ring has exactly its shards.
func TestNewChecksShards(t *testing.T) {
	m, err := DefaultRing([]int{1, 5, 17})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	for _, s := range m.Shards() {
		ids = append(ids, s.ID)
	}
	if len(ids) != 3 || ids[0] != 1 || ids[1] != 5 || ids[2] != 17 {
		t.Fatalf("default ring of shards 1, 5, 17 has shards %v", ids)
	}
	owners := map[int]bool{}
	for ws := int64(1); ws <= 200; ws++ {
		owners[m.OwnerInt64(ws)] = true
	}
	if len(owners) != 3 || !owners[1] || !owners[5] || !owners[17] {
		t.Fatalf("workspaces 1..200 land on %v, want shards 1, 5 and 17", owners)
	}
	nowhere := "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"
	_, err = New(context.Background(), Config{DSNs: map[int]string{1: nowhere, 5: nowhere}, Ring: m}, nil)
	if err == nil || !strings.Contains(err.Error(), "places workspaces on shard 17, which is not among the shards given ([1 5])") {
		t.Fatalf("New with shard 17 missing: %v", err)
	}
}
