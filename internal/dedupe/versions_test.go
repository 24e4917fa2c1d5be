package dedupe

import "testing"

func TestVersions(t *testing.T) {
	k := Key{Table: "documents", ID: "734197815705617408", Shard: 17}
	other := Key{Table: "documents", ID: "734197815705617408", Shard: 4}
	steps := []struct {
		op      string // "stale?" or "write"
		key     Key
		version uint64
		want    bool
	}{
		{"stale?", k, 10, false},
		{"write", k, 10, false},
		{"stale?", k, 10, true}, // redelivery
		{"stale?", k, 9, true},  // older version
		{"stale?", k, 11, false},
		{"stale?", other, 1, false}, // same id, other shard: a different row
		{"write", k, 5, false},      // never lowers
		{"stale?", k, 10, true},
		{"stale?", k, 11, false},
	}
	v := NewVersions(10)
	for i, s := range steps {
		switch s.op {
		case "write":
			v.Written(s.key, s.version)
		case "stale?":
			if got := v.Stale(s.key, s.version); got != s.want {
				t.Fatalf("step %d: Stale(%v, %d) = %v, want %v", i, s.key, s.version, got, s.want)
			}
		}
	}
}

func TestVersionsBounded(t *testing.T) {
	v := NewVersions(3)
	for i := 0; i < 10; i++ {
		v.Written(Key{Table: "t", ID: string(rune('a' + i))}, 1)
	}
	if v.Len() != 3 {
		t.Fatalf("Len = %d, want 3", v.Len())
	}
	// The most recent keys are remembered, the oldest forgotten.
	if !v.Stale(Key{Table: "t", ID: "j"}, 1) {
		t.Error("most recent key forgotten")
	}
	if v.Stale(Key{Table: "t", ID: "a"}, 1) {
		t.Error("oldest key still remembered past capacity")
	}
	v.Forget()
	if v.Len() != 0 || v.Stale(Key{Table: "t", ID: "j"}, 1) {
		t.Error("Forget kept entries")
	}
}
