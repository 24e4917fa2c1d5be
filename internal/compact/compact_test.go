package compact

import "testing"

func TestDecide(t *testing.T) {
	cfg := Config{MaxParts: 3, MaxBytes: 1000}
	for _, c := range []struct {
		name string
		st   tableState
		want string
	}{
		{"missing", tableState{}, ResultMissing},
		{"one part", tableState{exists: true, parts: 1, bytes: 10}, ResultFewParts},
		{"at the bound", tableState{exists: true, parts: 3, bytes: 10}, ResultFewParts},
		{"over the bound", tableState{exists: true, parts: 4, bytes: 10}, ""},
		{"merging", tableState{exists: true, parts: 9, bytes: 10, merges: 1}, ResultMerging},
		{"too large", tableState{exists: true, parts: 9, bytes: 1001}, ResultTooLarge},
		{"exactly max bytes", tableState{exists: true, parts: 9, bytes: 1000}, ""},
		{"few parts wins over too large", tableState{exists: true, parts: 2, bytes: 5000}, ResultFewParts},
	} {
		if got := decide(c.st, cfg); got != c.want {
			t.Errorf("%s: decide(%+v) = %q, want %q", c.name, c.st, got, c.want)
		}
	}
}

func TestNewDefaults(t *testing.T) {
	k := New(Config{}, nil, "db", nil, nil)
	if k.cfg.Interval != DefaultInterval || k.cfg.MaxParts != DefaultMaxParts || k.cfg.MaxBytes != DefaultMaxBytes {
		t.Fatalf("defaults not applied: %+v", k.cfg)
	}
}
