package dedupe

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

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
	t.Run("text ids", func(t *testing.T) {
		testVersionsBounded(t, func(i int) Key { return Key{Table: "t", ID: string(rune('a' + i))} })
	})
	t.Run("integer ids", func(t *testing.T) {
		testVersionsBounded(t, func(i int) Key { return Key{Table: "t", ID: strconv.Itoa(734197815705617408 + i)} })
	})
}

func testVersionsBounded(t *testing.T, key func(int) Key) {
	const capacity = 6
	v := NewVersions(capacity)
	for i := 0; i < 20; i++ {
		v.Written(key(i), 1)
		if v.Len() > capacity {
			t.Fatalf("after %d writes Len = %d > capacity %d", i+1, v.Len(), capacity)
		}
	}
	// The most recent capacity/2 keys are always remembered, the oldest
	// forgotten.
	for i := 20 - capacity/2; i < 20; i++ {
		if !v.Stale(key(i), 1) {
			t.Errorf("recent key %d forgotten", i)
		}
	}
	if v.Stale(key(0), 1) {
		t.Error("oldest key still remembered past capacity")
	}
	// Rewriting a key of the old generation keeps its higher version.
	v2 := NewVersions(4)
	v2.Written(key(0), 9)
	v2.Written(key(1), 1)
	v2.Written(key(2), 1) // rotates: key 0 is in the old generation
	v2.Written(key(0), 3)
	if !v2.Stale(key(0), 9) {
		t.Error("version lowered when a key moved generations")
	}
	v.Forget()
	if v.Len() != 0 || v.Stale(key(19), 1) {
		t.Error("Forget kept entries")
	}
}

// Ids held as numbers and ids held as text are distinct rows whenever their
// text differs: "01" is not "1", and an id past int64 is not a wrapped one.
func TestVersionsIDForms(t *testing.T) {
	v := NewVersions(100)
	ids := []string{"1", "01", "+1", "-1", "-0", "0", "9223372036854775807", "9223372036854775808",
		"-9223372036854775808", "-9223372036854775809", "18446744073709551617", "1e3", "",
		"0188e0a4-7b4a-7d9e-9f00-000000000001"}
	for i, id := range ids {
		v.Written(Key{Table: "t", ID: id}, uint64(10+i))
	}
	for i, id := range ids {
		k := Key{Table: "t", ID: id}
		if !v.Stale(k, uint64(10+i)) || v.Stale(k, uint64(11+i)) {
			t.Errorf("id %q: want version %d remembered exactly", id, 10+i)
		}
		if v.Stale(Key{Table: "u", ID: id}, 1) || v.Stale(Key{Table: "t", ID: id, Shard: 1}, 1) {
			t.Errorf("id %q: another table's or shard's row is not this one", id)
		}
	}
	if v.Len() != len(ids) {
		t.Errorf("Len = %d, want %d", v.Len(), len(ids))
	}
}

func TestCanonicalInt(t *testing.T) {
	for s, want := range map[string]bool{
		"0": true, "7": true, "-7": true, "734197815705617408": true, "9223372036854775807": true, "-9223372036854775808": true,
		"": false, "-": false, "-0": false, "00": false, "07": false, "+7": false, " 7": false, "7 ": false,
		"9223372036854775808": false, "-9223372036854775809": false, "99999999999999999999": false, "1_0": false,
	} {
		n, ok := canonicalInt(s)
		if ok != want {
			t.Errorf("canonicalInt(%q) ok = %v, want %v", s, ok, want)
			continue
		}
		if ok && strconv.FormatInt(n, 10) != s {
			t.Errorf("canonicalInt(%q) = %d", s, n)
		}
	}
}

// TestVersionsMatchesReference: over random writes with few enough keys
// that none is forgotten, Versions answers as a plain map of the highest
// version per key (numeric and text ids, several tables and shards, the
// open-addressing table growing many times).
func TestVersionsMatchesReference(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	const keys = 5000
	v := NewVersions(4 * keys) // a generation holds every key: nothing forgotten
	ref := map[Key]uint64{}
	key := func() Key {
		n := rnd.IntN(keys)
		id := strconv.Itoa(n - keys/2)
		if n%7 == 0 {
			id = "u-" + id
		}
		return Key{Table: []string{"a", "b", "c"}[n%3], ID: id, Shard: n % 5}
	}
	for i := 0; i < 200_000; i++ {
		k, ver := key(), uint64(rnd.IntN(1000))
		want, known := ref[k]
		if got := v.Stale(k, ver); got != (known && ver <= want) {
			t.Fatalf("step %d: Stale(%v, %d) = %v, reference has %d (%v)", i, k, ver, got, want, known)
		}
		if rnd.IntN(2) == 0 {
			v.Written(k, ver)
			ref[k] = max(ref[k], ver)
		}
	}
	if v.Len() != len(ref) {
		t.Fatalf("Len = %d, reference %d", v.Len(), len(ref))
	}
}
