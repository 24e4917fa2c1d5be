package ring

import (
	"encoding/json"
	"errors"
	"math"
	"path/filepath"
	"testing"
)

const (
	shardA = 0
	shardB = 1
	shardC = 2
	shardD = 3
)

func TestHash(t *testing.T) {
	// Values from Python: int.from_bytes(hashlib.sha256(k).digest()[:8], "big"),
	// and for "42" also from PostgreSQL:
	// ('x' || encode(substring(sha256('42'::bytea) from 1 for 8), 'hex'))::bit(64)::bigint
	// (signed there; 8306709966045482637 is below 2^63).
	tests := []struct {
		key  []byte
		want uint64
	}{
		{[]byte("42"), 8306709966045482637},
		{[]byte(""), 16406829232824261652},
		{[]byte("shopper-1003"), 608759652356599684},
		{Int64Key(-7), 12065375566394412525},
		{Int64Key(42), 8306709966045482637},
	}
	for _, tt := range tests {
		if got := Hash(tt.key); got != tt.want {
			t.Errorf("Hash(%q) = %d, want %d", tt.key, got, tt.want)
		}
	}
	if got, want := VNodePosition(3, 63), uint64(4472968773744431205); got != want {
		t.Errorf("VNodePosition(3, 63) = %d, want %d (Hash of \"shard-3-vnode-63\")", got, want)
	}
}

func tiny(t *testing.T, extra ...Point) *Map {
	t.Helper()
	shards := []Shard{{ID: shardA, Name: "A"}, {ID: shardB, Name: "B"}, {ID: shardC, Name: "C"}}
	points := []Point{{20, shardA}, {50, shardB}, {80, shardC}}
	for _, p := range extra {
		shards = append(shards, Shard{ID: p.Shard, Name: "D"})
		points = append(points, p)
	}
	m, err := NewWithPoints(1+int64(len(extra)), shards, points)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestTinyRing is a worked example on a 0..99 ring: A=20, B=50, C=80.
func TestTinyRing(t *testing.T) {
	m := tiny(t)
	owned := map[int]int{}
	for h := uint64(0); h < 100; h++ {
		owned[m.OwnerOfHash(h)]++
	}
	// A owns 81..99 and 0..20 (40), B 21..50 (30), C 51..80 (30).
	if owned[shardA] != 40 || owned[shardB] != 30 || owned[shardC] != 30 {
		t.Fatalf("ownership %v, want A 40, B 30, C 30", owned)
	}
	for _, tt := range []struct {
		h    uint64
		want int
	}{{0, shardA}, {20, shardA}, {21, shardB}, {50, shardB}, {51, shardC}, {80, shardC}, {81, shardA}, {91, shardA}} {
		if got := m.OwnerOfHash(tt.h); got != tt.want {
			t.Errorf("OwnerOfHash(%d) = %d, want %d", tt.h, got, tt.want)
		}
	}
}

func TestTinyRingAddShard(t *testing.T) {
	tests := []struct {
		name    string
		d       uint64
		from    int // the only shard that loses positions
		moved   int // of 100 positions
		shopper map[uint64]bool
	}{
		// Adding D at 65 takes 51..65 from C: 15 of 100 positions.
		{"D at 65", 65, shardC, 15, nil},
		// QuickCart's ring example: D at 35 takes 21..35 from B; of shoppers at 5, 22,
		// 50, 51, 80 and 99 only 22 moves.
		{"D at 35", 35, shardB, 15, map[uint64]bool{5: false, 22: true, 50: false, 51: false, 80: false, 99: false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, after := tiny(t), tiny(t, Point{tt.d, shardD})
			moved := 0
			for h := uint64(0); h < 100; h++ {
				o, n := before.OwnerOfHash(h), after.OwnerOfHash(h)
				if o == n {
					continue
				}
				moved++
				if o != tt.from || n != shardD {
					t.Errorf("position %d moved %d -> %d, want %d -> D", h, o, n, tt.from)
				}
			}
			if moved != tt.moved {
				t.Errorf("%d positions moved, want %d", moved, tt.moved)
			}
			for h, want := range tt.shopper {
				if got := before.OwnerOfHash(h) != after.OwnerOfHash(h); got != want {
					t.Errorf("shopper at %d moved = %v, want %v", h, got, want)
				}
			}
		})
	}
}

func TestTinyRingRemoveShard(t *testing.T) {
	// If B leaves, its arc goes to the next point clockwise: C owns 21..80.
	m, err := NewWithPoints(2, []Shard{{ID: shardA}, {ID: shardC}}, []Point{{20, shardA}, {80, shardC}})
	if err != nil {
		t.Fatal(err)
	}
	c := 0
	for h := uint64(0); h < 100; h++ {
		if m.OwnerOfHash(h) == shardC {
			c++
		}
	}
	if c != 60 {
		t.Fatalf("C owns %d of 100 positions without B, want 60", c)
	}
}

func shardsN(n int, skip ...int) []Shard {
	var s []Shard
	for i := range n {
		if !containsInt(skip, i) {
			s = append(s, Shard{ID: i})
		}
	}
	return s
}

func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func mustNew(t *testing.T, version int64, shards []Shard, vnodes int) *Map {
	t.Helper()
	m, err := New(version, shards, vnodes)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

const keys = 100_000

// TestAddFifthShard: going from 4 to 5 shards with 64 vnodes each moves
// about 1/5 of the keys, and only to the new shard.
func TestAddFifthShard(t *testing.T) {
	four, five := mustNew(t, 3, shardsN(4), 64), mustNew(t, 4, shardsN(5), 64)
	moved := 0
	for k := int64(0); k < keys; k++ {
		o, n := four.OwnerInt64(k), five.OwnerInt64(k)
		if o == n {
			continue
		}
		moved++
		if n != 4 {
			t.Fatalf("key %d moved %d -> %d, not to the new shard 4", k, o, n)
		}
	}
	frac := float64(moved) / keys
	if frac < 0.12 || frac > 0.28 {
		t.Fatalf("adding a 5th shard moved %.3f of keys, want about 0.2 (0.12..0.28)", frac)
	}
	// Diff measures the same thing exactly over the hash space.
	if d := Diff(four, five); math.Abs(d-frac) > 0.01 {
		t.Fatalf("Diff = %.4f, sampled %.4f", d, frac)
	}
	// hash mod N for comparison: going from 4 to 5 keeps a key only when
	// h%4 == h%5, i.e. for 4 of every 20 hash values: 80% move.
	modMoved := 0
	for k := int64(0); k < keys; k++ {
		h := Hash(Int64Key(k))
		if h%4 != h%5 {
			modMoved++
		}
	}
	if f := float64(modMoved) / keys; f < 0.75 {
		t.Fatalf("mod-N moved only %.3f", f)
	}
}

// TestRemoveShardScatters: the keys of a departing shard spread over the
// remaining shards instead of all landing on one neighbour.
func TestRemoveShardScatters(t *testing.T) {
	const n, gone = 8, 5
	before, after := mustNew(t, 1, shardsN(n), 64), mustNew(t, 2, shardsN(n, gone), 64)
	took := map[int]int{}
	total := 0
	for k := int64(0); k < keys; k++ {
		o, nw := before.OwnerInt64(k), after.OwnerInt64(k)
		if o != gone {
			if o != nw {
				t.Fatalf("key %d of staying shard %d moved to %d", k, o, nw)
			}
			continue
		}
		took[nw]++
		total++
	}
	if len(took) != n-1 {
		t.Fatalf("keys of shard %d went to %d shards (%v), want all %d remaining", gone, len(took), took, n-1)
	}
	for s, c := range took {
		if share := float64(c) / float64(total); share > 0.35 {
			t.Fatalf("shard %d took %.2f of the departed shard's keys; want them scattered (%v)", s, share, took)
		}
	}
}

func TestBalance(t *testing.T) {
	m := mustNew(t, 3, shardsN(4), 64)
	count := map[int]int{}
	for k := int64(0); k < keys; k++ {
		count[m.OwnerInt64(k)]++
	}
	for s, c := range count {
		if f := float64(c) / keys; f < 0.15 || f > 0.35 {
			t.Errorf("shard %d owns %.3f of keys with 64 vnodes, want about 0.25", s, f)
		}
	}
}

func TestDiff(t *testing.T) {
	a := mustNew(t, 1, shardsN(4), 16)
	if d := Diff(a, a); d != 0 {
		t.Errorf("Diff(a, a) = %v", d)
	}
	one, _ := NewWithPoints(1, []Shard{{ID: 0}}, []Point{{7, 0}})
	other, _ := NewWithPoints(2, []Shard{{ID: 1}}, []Point{{7, 1}})
	if d := Diff(one, other); d != 1 {
		t.Errorf("Diff of single-point rings with different owners = %v, want 1", d)
	}
	// Tiny ring: D at 65 takes 15 positions out of 2^64.
	if d, want := Diff(tiny(t), tiny(t, Point{65, shardD})), 15/ringSize; d != want {
		t.Errorf("Diff(tiny, tiny+D) = %g, want %g", d, want)
	}
	// Removing one of two halves: moves that half.
	half, _ := NewWithPoints(1, []Shard{{ID: 0}, {ID: 1}}, []Point{{0, 0}, {1 << 63, 1}})
	whole, _ := NewWithPoints(2, []Shard{{ID: 0}}, []Point{{0, 0}})
	if d := Diff(half, whole); d != 0.5 {
		t.Errorf("Diff(half, whole) = %v, want 0.5", d)
	}
}

func TestLoad(t *testing.T) {
	m, err := Load(filepath.Join("testdata", "tiny.json"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Version() != 1 || m.OwnerOfHash(91) != shardA || len(m.Points()) != 3 {
		t.Fatalf("tiny.json loaded as version %d, %v", m.Version(), m.Points())
	}
	q, err := Load(filepath.Join("testdata", "quickcart-v3.json"))
	if err != nil {
		t.Fatal(err)
	}
	if q.Version() != 3 || q.VNodes() != 64 || len(q.Points()) != 256 {
		t.Fatalf("quickcart-v3.json: version %d, vnodes %d, %d points", q.Version(), q.VNodes(), len(q.Points()))
	}
	if _, err := Load(filepath.Join("testdata", "missing.json")); err == nil {
		t.Fatal("loading a missing file succeeded")
	}
}

func TestParseRoundTrip(t *testing.T) {
	for _, m := range []*Map{tiny(t), mustNew(t, 7, shardsN(3), 8)} {
		data, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse(data)
		if err != nil {
			t.Fatalf("Parse(%s): %v", data, err)
		}
		if back.Version() != m.Version() || Diff(m, back) != 0 || len(back.Points()) != len(m.Points()) {
			t.Fatalf("round trip of %s changed the ring", data)
		}
	}
}

// TestStagedNext: a map with a staged next map keeps both, and writes both
// back.
func TestStagedNext(t *testing.T) {
	m, err := Parse([]byte(`{"version": 4, "vnodes": 16, "shards": [{"id": 0}, {"id": 1}],
		"next": {"version": 5, "vnodes": 16, "shards": [{"id": 0}, {"id": 1}, {"id": 2}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if m.Version() != 4 || m.Next() == nil || m.Next().Version() != 5 || len(m.Next().Shards()) != 3 || m.Next().Next() != nil {
		t.Fatalf("parsed %+v, want version 4 with a staged 3-shard version 5", m.File())
	}
	if Diff(m, m.Next()) == 0 {
		t.Error("the staged map moves no key")
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(data)
	if err != nil || back.Next() == nil || back.Next().Version() != 5 || Diff(back.Next(), m.Next()) != 0 {
		t.Fatalf("round trip of %s lost the staged map: %v", data, err)
	}
}

func TestParseRefuses(t *testing.T) {
	tests := []struct {
		name string
		json string
	}{
		{"not json", `{"version":`},
		{"unknown field", `{"version": 1, "vnode": 64, "shards": [{"id": 0}]}`},
		{"trailing data", `{"version": 1, "vnodes": 4, "shards": [{"id": 0}]} {}`},
		{"version 0", `{"version": 0, "vnodes": 4, "shards": [{"id": 0}]}`},
		{"no shards", `{"version": 1, "vnodes": 4, "shards": []}`},
		{"duplicate shard", `{"version": 1, "vnodes": 4, "shards": [{"id": 0}, {"id": 0}]}`},
		{"negative shard", `{"version": 1, "vnodes": 4, "shards": [{"id": -1}]}`},
		{"no vnodes nor points", `{"version": 1, "shards": [{"id": 0}]}`},
		{"too many vnodes", `{"version": 1, "vnodes": 65537, "shards": [{"id": 0}]}`},
		{"both vnodes and points", `{"version": 1, "vnodes": 4, "shards": [{"id": 0}], "points": [{"position": 1, "shard": 0}]}`},
		{"point of unknown shard", `{"version": 1, "shards": [{"id": 0}], "points": [{"position": 1, "shard": 0}, {"position": 2, "shard": 9}]}`},
		{"shard without points", `{"version": 1, "shards": [{"id": 0}, {"id": 1}], "points": [{"position": 1, "shard": 0}]}`},
		{"duplicate position", `{"version": 1, "shards": [{"id": 0}, {"id": 1}], "points": [{"position": 5, "shard": 0}, {"position": 5, "shard": 1}]}`},
		{"negative position", `{"version": 1, "shards": [{"id": 0}], "points": [{"position": -5, "shard": 0}]}`},
		{"position beyond 64 bits", `{"version": 1, "shards": [{"id": 0}], "points": [{"position": 18446744073709551616, "shard": 0}]}`},
		{"staged version not above", `{"version": 2, "vnodes": 4, "shards": [{"id": 0}], "next": {"version": 2, "vnodes": 4, "shards": [{"id": 0}, {"id": 1}]}}`},
		{"staged map invalid", `{"version": 1, "vnodes": 4, "shards": [{"id": 0}], "next": {"version": 2, "shards": [{"id": 0}]}}`},
		{"staged map with a next", `{"version": 1, "vnodes": 4, "shards": [{"id": 0}], "next": {"version": 2, "vnodes": 4, "shards": [{"id": 0}], "next": {"version": 3, "vnodes": 4, "shards": [{"id": 0}]}}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if m, err := Parse([]byte(tt.json)); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse(%s) = %v, %v; want ErrInvalid", tt.json, m, err)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"version": 3, "vnodes": 2, "shards": [{"id": 0}, {"id": 1}]}`))
	f.Add([]byte(`{"version": 1, "shards": [{"id": 0}], "points": [{"position": 18446744073709551615, "shard": 0}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse error %v does not wrap ErrInvalid", err)
			}
			return
		}
		// Every position has an owner listed among the shards.
		for _, h := range []uint64{0, 1 << 63, math.MaxUint64} {
			o := m.OwnerOfHash(h)
			found := false
			for _, s := range m.Shards() {
				found = found || s.ID == o
			}
			if !found {
				t.Fatalf("owner %d of %d is not a shard", o, h)
			}
		}
	})
}
