package preagg

import "testing"

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
