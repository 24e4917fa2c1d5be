package loader

import "testing"

// TestPollCountKeepsTheByteBound fills a batch the way poll does, with
// records of one size, and checks that it ends within one record of the
// byte bound — never past it by more — and within the record bound.
func TestPollCountKeepsTheByteBound(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		record, maxRecords, bytes int
	}{
		{"small records, bytes bind", 300, 50000, 64 << 10},
		{"large records, bytes bind", 100 << 10, 50000, 64 << 20},
		{"records bind", 100, 1000, 64 << 20},
		{"record larger than the bound", 2 << 20, 50000, 1 << 20},
		{"bound not a multiple", 7777, 50000, 1 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, size, polls := 0, 0, 0
			for n < tc.maxRecords && size < tc.bytes {
				k := pollCount(n, size, tc.maxRecords, tc.bytes)
				if k < 1 {
					t.Fatalf("asked for %d records at n=%d size=%d", k, n, size)
				}
				n += k
				size += k * tc.record
				polls++
			}
			if n > tc.maxRecords {
				t.Errorf("batch of %d records, bound %d", n, tc.maxRecords)
			}
			if size > tc.bytes+tc.record {
				t.Errorf("batch of %d bytes, bound %d (+ one record %d)", size, tc.bytes, tc.record)
			}
			if polls > 64 {
				t.Errorf("%d polls for one batch", polls)
			}
			t.Logf("%d records, %d bytes, %d polls", n, size, polls)
		})
	}
}
