package loadgen

import "testing"

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
