package preagg

import (
	"fmt"
	"maps"
	"testing"
)

func TestBlockOf(t *testing.T) {
	for _, c := range []struct {
		id    string
		bits  int
		block int64
		ok    bool
	}{
		{"734197815705617408", 49, 734197815705617408 >> 49, true},
		{"0", 30, 0, true},
		{"-1", 30, -1, true}, // arithmetic shift, as bitShiftRight on Int64
		{"18446744073709551615", 49, int64(^uint64(0) >> 49), true}, // UInt64 beyond Int64
		// A uuid by its first 64 bits, big-endian (0x535d44ab71214ba1 >> 49 = 10670, as ClickHouse computes it).
		{"535d44ab-7121-4ba1-8002-e40297eb7e59", 49, 10670, true},
		{"ffffffff-ffff-ffff-0000-000000000000", 1, int64(^uint64(0) >> 1), true},
		{"535d44ab71214ba18002e40297eb7e59", 49, 0, false}, // not the canonical text form ClickHouse prints
		{"(1,2)", 30, 0, false},
		{"", 30, 0, false},
	} {
		got, ok := BlockOf(c.id, c.bits)
		if got != c.block || ok != c.ok {
			t.Errorf("BlockOf(%q, %d) = %d, %v; want %d, %v", c.id, c.bits, got, ok, c.block, c.ok)
		}
	}
}

// TestMarks: a batch's marks keep, per shard and block, the lowest commit
// LSN that changed it; an id without a block, a truncate and a snapshot end
// mark every block of their shard; copied rows mark nothing.
func TestMarks(t *testing.T) {
	b5, _ := BlockOf("5", 30)
	b7, _ := BlockOf(fmt.Sprint(int64(7)<<30), 30)
	tests := []struct {
		name string
		do   func(m *Marks)
		want map[markKey]uint64
	}{
		{name: "one id", do: func(m *Marks) { m.Add(1, "5", 100) }, want: map[markKey]uint64{{1, b5}: 100}},
		{name: "the lowest LSN stays", do: func(m *Marks) { m.Add(1, "5", 200); m.Add(1, "5", 100); m.Add(1, "5", 300) },
			want: map[markKey]uint64{{1, b5}: 100}},
		{name: "blocks and shards apart", do: func(m *Marks) { m.Add(1, "5", 100); m.Add(2, "5", 90); m.Add(1, fmt.Sprint(int64(7)<<30), 80) },
			want: map[markKey]uint64{{1, b5}: 100, {2, b5}: 90, {1, b7}: 80}},
		{name: "a copied row", do: func(m *Marks) { m.Add(1, "5", 0) }, want: map[markKey]uint64{}},
		{name: "an id without a block", do: func(m *Marks) { m.Add(3, "(1,2)", 50) }, want: map[markKey]uint64{{3, AllBlocks}: 50}},
		{name: "a truncate", do: func(m *Marks) { m.All(2, 70) }, want: map[markKey]uint64{{2, AllBlocks}: 70}},
		{name: "a snapshot end at LSN 0 still marks", do: func(m *Marks) { m.All(2, 0) }, want: map[markKey]uint64{{2, AllBlocks}: 1}},
	}
	for _, tt := range tests {
		m := NewMarks("ledger", 30)
		tt.do(m)
		if m.Len() != len(tt.want) || !maps.Equal(m.m, tt.want) {
			t.Errorf("%s: marks %v, want %v", tt.name, m.m, tt.want)
		}
	}
}

func TestMarksAdd(t *testing.T) {
	m := NewMarks("orders", 30)
	m.Add(1, "535d44ab-7121-4ba1-8002-e40297eb7e59", 200)
	m.Add(1, "535d44ab-7121-4ba1-8002-e40297eb7e59", 100) // the lowest LSN stays
	m.Add(2, "(1,2)", 300)                                // neither integer nor uuid: every block
	m.Add(3, "5", 0)                                      // a copied row: no mark
	b, _ := BlockOf("535d44ab-7121-4ba1-8002-e40297eb7e59", 30)
	if m.Len() != 2 || m.m[markKey{1, b}] != 100 || m.m[markKey{2, AllBlocks}] != 300 {
		t.Fatalf("marks %v", m.m)
	}
}
