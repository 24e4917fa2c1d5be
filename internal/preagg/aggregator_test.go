package preagg

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/revenueblocks"
)

// TestNeedsFull: a round recomputes every block when nothing was computed
// yet, or the blocks were computed under another ring map or layout.
func TestNeedsFull(t *testing.T) {
	cur := &revenueblocks.State{RingVersion: 3, Kind: revenueblocks.Integer, Bits: 49}
	with := func(f func(*revenueblocks.State)) *revenueblocks.State {
		st := *cur
		f(&st)
		return &st
	}
	tests := []struct {
		name string
		st   *revenueblocks.State
		want bool
	}{
		{"nothing computed yet", nil, true},
		{"the same ring and layout", cur, false},
		{"another ring map version", with(func(st *revenueblocks.State) { st.RingVersion = 4 }), true},
		{"another id kind", with(func(st *revenueblocks.State) { st.Kind = revenueblocks.UUID }), true},
		{"another block size", with(func(st *revenueblocks.State) { st.Bits = 30 }), true},
		{"a state written before the layout was recorded", with(func(st *revenueblocks.State) { st.Kind, st.Bits = "", 0 }), true},
	}
	for _, tt := range tests {
		if got := needsFull(tt.st, 3, revenueblocks.Integer, 49); got != tt.want {
			t.Errorf("%s: needsFull = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestMarkConds: the marks a round reads are those of each shard whose
// watermark moved, after the previous round's position and up to the new
// one; a shard that did not move (or went back) adds nothing.
func TestMarkConds(t *testing.T) {
	const one = "(shard = ? AND commit_lsn > ? AND commit_lsn <= ?)"
	tests := []struct {
		name  string
		prev  map[uint16]uint64
		w     map[uint16]uint64
		conds string
		args  []any
	}{
		{name: "nothing moved", prev: map[uint16]uint64{1: 10, 2: 20}, w: map[uint16]uint64{1: 10, 2: 20}},
		{name: "a shard went back", prev: map[uint16]uint64{1: 10}, w: map[uint16]uint64{1: 9}},
		{name: "one shard moved", prev: map[uint16]uint64{1: 10, 2: 20}, w: map[uint16]uint64{1: 15, 2: 20},
			conds: one, args: []any{uint16(1), uint64(10), uint64(15)}},
		{name: "a new shard, from 0", prev: map[uint16]uint64{1: 10}, w: map[uint16]uint64{1: 10, 7: 5},
			conds: one, args: []any{uint16(7), uint64(0), uint64(5)}},
		{name: "two shards, in shard order", prev: map[uint16]uint64{}, w: map[uint16]uint64{9: 3, 2: 4},
			conds: one + " OR " + one, args: []any{uint16(2), uint64(0), uint64(4), uint16(9), uint64(0), uint64(3)}},
	}
	for _, tt := range tests {
		w := map[uint16]shardPos{}
		for s, lsn := range tt.w {
			w[s] = shardPos{lsn: lsn}
		}
		conds, args := markConds(tt.prev, w)
		if conds != tt.conds || !slices.Equal(args, tt.args) {
			t.Errorf("%s: markConds = %q %v, want %q %v", tt.name, conds, args, tt.conds, tt.args)
		}
	}
}

// TestAdvanced: a round with no marks still writes its state when a
// watermark moved, in either direction (the state follows the watermarks).
func TestAdvanced(t *testing.T) {
	tests := []struct {
		prev map[uint16]uint64
		w    map[uint16]uint64
		want bool
	}{
		{map[uint16]uint64{1: 10}, map[uint16]uint64{1: 10}, false},
		{map[uint16]uint64{1: 10}, map[uint16]uint64{1: 11}, true},
		{map[uint16]uint64{1: 10}, map[uint16]uint64{1: 9}, true},
		{map[uint16]uint64{1: 10}, map[uint16]uint64{1: 10, 2: 1}, true},
		{map[uint16]uint64{1: 10, 2: 1}, map[uint16]uint64{1: 10}, false}, // a shard no longer reporting
	}
	for _, tt := range tests {
		w := map[uint16]shardPos{}
		for s, lsn := range tt.w {
			w[s] = shardPos{lsn: lsn}
		}
		if got := advanced(tt.prev, w); got != tt.want {
			t.Errorf("advanced(%v, %v) = %v, want %v", tt.prev, tt.w, got, tt.want)
		}
	}
}

// TestLagOf: the pre-aggregates' lag is the largest gap, over the shards,
// between the table's freshness and the positions the round computed at.
func TestLagOf(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	fresh := []chstore.ShardWatermark{{Shard: 1, CommitTS: t0.Add(10 * time.Second)}, {Shard: 2, CommitTS: t0.Add(4 * time.Second)}}
	tests := []struct {
		name string
		w    map[uint16]shardPos
		want float64
	}{
		{"caught up", map[uint16]shardPos{1: {ts: t0.Add(10 * time.Second)}, 2: {ts: t0.Add(4 * time.Second)}}, 0},
		{"one shard behind", map[uint16]shardPos{1: {ts: t0.Add(7 * time.Second)}, 2: {ts: t0.Add(4 * time.Second)}}, 3},
		{"the worst shard counts", map[uint16]shardPos{1: {ts: t0.Add(9 * time.Second)}, 2: {ts: t0}}, 4},
	}
	for _, tt := range tests {
		if got := lagOf(fresh, tt.w); got != tt.want {
			t.Errorf("%s: lagOf = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestBlockSums: a block keeps its groups twice: summed over shards by
// (day, currency), and per (day, shard, currency) as the rows came.
func TestBlockSums(t *testing.T) {
	d1, d2 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	dec := decimal.RequireFromString
	type group struct {
		day     time.Time
		shard   uint16
		cur     string
		kept    string
		refunds string
		n       uint64
	}
	tests := []struct {
		name   string
		groups []group
		sums   []string // day currency kept refunds n, in first-seen order
	}{
		{name: "empty"},
		{name: "two shards of one day and currency are summed",
			groups: []group{{d1, 0, "EUR", "10.50", "0", 2}, {d1, 3, "EUR", "4.25", "1.00", 1}},
			sums:   []string{"2026-12-01 EUR 14.75 1 3"}},
		{name: "days and currencies apart",
			groups: []group{{d1, 0, "EUR", "1", "0", 1}, {d1, 0, "USD", "2", "0", 1}, {d2, 0, "EUR", "3", "0", 1}, {d1, 1, "USD", "5", "2", 4}},
			sums:   []string{"2026-12-01 EUR 1 0 1", "2026-12-01 USD 7 2 5", "2026-12-02 EUR 3 0 1"}},
	}
	for _, tt := range tests {
		b := newBlockSums()
		for _, g := range tt.groups {
			b.add(g.day, g.shard, g.cur, dec(g.kept), dec(g.refunds), g.n)
		}
		var sums []string
		for i := range b.day {
			sums = append(sums, fmt.Sprintf("%s %s %s %s %d", b.day[i].Format(time.DateOnly), b.cur[i], b.kept[i], b.refunds[i], b.n[i]))
		}
		if !slices.Equal(sums, tt.sums) {
			t.Errorf("%s: sums %q, want %q", tt.name, sums, tt.sums)
		}
		// The per-shard arrays keep every group as added, aligned.
		if len(b.sDay) != len(tt.groups) || len(b.sShard) != len(tt.groups) || len(b.sCur) != len(tt.groups) ||
			len(b.sKept) != len(tt.groups) || len(b.sRefunds) != len(tt.groups) || len(b.sN) != len(tt.groups) {
			t.Fatalf("%s: per-shard arrays of %d, %d, %d, %d, %d, %d groups, want %d", tt.name,
				len(b.sDay), len(b.sShard), len(b.sCur), len(b.sKept), len(b.sRefunds), len(b.sN), len(tt.groups))
		}
		for i, g := range tt.groups {
			if !b.sDay[i].Equal(g.day) || b.sShard[i] != g.shard || b.sCur[i] != g.cur || !b.sKept[i].Equal(dec(g.kept)) || b.sN[i] != g.n {
				t.Errorf("%s: per-shard group %d is %v %d %s %s %d, want %v", tt.name, i, b.sDay[i], b.sShard[i], b.sCur[i], b.sKept[i], b.sN[i], g)
			}
		}
		// Arrays are never nil: ClickHouse takes an empty block's arrays.
		if b.day == nil || b.sDay == nil || b.kept == nil || b.sN == nil {
			t.Errorf("%s: nil arrays", tt.name)
		}
	}
}

// TestDeref: a NULL sum (no row of the group) is zero.
func TestDeref(t *testing.T) {
	d := decimal.RequireFromString("12.30")
	if got := deref(&d); !got.Equal(d) {
		t.Errorf("deref(12.30) = %s", got)
	}
	if got := deref(nil); !got.IsZero() {
		t.Errorf("deref(nil) = %s", got)
	}
}
