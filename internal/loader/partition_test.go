package loader

import (
	"strconv"
	"testing"

	"github.com/tributary/tributary/internal/ids"
)

func sp(s string) *string { return &s }

// Bounds as PostgreSQL 15 prints them (pg_get_expr, DateStyle ISO,
// TimeZone UTC), against key values as ClickHouse prints them.
func TestPartitionBoundContains(t *testing.T) {
	cases := []struct {
		strategy, bound string
		types           []string
		row             []*string
		want            bool
	}{
		{"r", "FOR VALUES FROM ('2026-01-01 00:00:00+00') TO ('2026-02-01 00:00:00+00')", []string{"timestamp with time zone"}, []*string{sp("2026-01-31 23:59:59")}, true},
		{"r", "FOR VALUES FROM ('2026-01-01 00:00:00+00') TO ('2026-02-01 00:00:00+00')", []string{"timestamp with time zone"}, []*string{sp("2026-02-01 00:00:00")}, false},
		{"r", "FOR VALUES FROM ('2026-01-01 00:00:00+00') TO ('2026-02-01 00:00:00+00')", []string{"timestamp with time zone"}, []*string{sp("2026-01-01 00:00:00")}, true},
		{"r", "FOR VALUES FROM ('2026-01-01') TO ('2026-02-01')", []string{"date"}, []*string{sp("2025-12-31")}, false},
		{"r", "FOR VALUES FROM (MINVALUE) TO (100)", []string{"bigint"}, []*string{sp("-7")}, true},
		{"r", "FOR VALUES FROM (10, MINVALUE) TO (10, MAXVALUE)", []string{"integer", "integer"}, []*string{sp("10"), sp("99")}, true},
		{"r", "FOR VALUES FROM (10, 5) TO (20, 0)", []string{"integer", "integer"}, []*string{sp("10"), sp("4")}, false},
		{"r", "FOR VALUES FROM (10, 5) TO (20, 0)", []string{"integer", "integer"}, []*string{sp("15"), sp("-1")}, true},
		{"r", "FOR VALUES FROM ('0.5') TO ('10.25')", []string{"numeric(12,2)"}, []*string{sp("10.24")}, true},
		{"l", "FOR VALUES IN ('eu', 'it''s')", []string{"text"}, []*string{sp("it's")}, true},
		{"l", "FOR VALUES IN ('eu', 'us')", []string{"text"}, []*string{sp("apac")}, false},
		{"l", "FOR VALUES IN (NULL, 'eu')", []string{"text"}, []*string{nil}, true},
		{"l", "FOR VALUES IN (1, 2)", []string{"integer"}, []*string{sp("2")}, true},
		{"l", "FOR VALUES IN (true)", []string{"boolean"}, []*string{sp("1")}, true},
		{"l", "FOR VALUES IN (true)", []string{"boolean"}, []*string{sp("0")}, false},
	}
	for _, c := range cases {
		b, err := parseBound(c.strategy, c.bound)
		if err != nil {
			t.Fatalf("%s: %v", c.bound, err)
		}
		got, err := b.contains(c.row, c.types)
		if err != nil || got != c.want {
			t.Errorf("%s contains %v: %v, %v; want %v", c.bound, c.row, got, err, c.want)
		}
	}
}

func TestPartitionBoundHash(t *testing.T) {
	b, err := parseBound("h", "FOR VALUES WITH (modulus 4, remainder 3)")
	if err != nil || b.modulus != 4 || b.remainder != 3 {
		t.Fatalf("parsed %+v, %v", b, err)
	}
	for v := int64(1); v < 50; v++ {
		r, _ := ids.PartitionInt8(v, 4)
		got, err := b.contains([]*string{sp(itoa(v))}, []string{"bigint"})
		if err != nil || got != (r == 3) {
			t.Errorf("%d: %v, %v; PostgreSQL's remainder is %d", v, got, err, r)
		}
	}
}

func TestPartitionBoundRefused(t *testing.T) {
	for _, c := range []struct{ strategy, bound string }{
		{"r", "FOR VALUES IN ('a')"},
		{"h", "FOR VALUES WITH (modulus 0, remainder 0)"},
		{"l", "FOR VALUES IN ('a'"},
		{"r", "FOR VALUES FROM ('a) TO ('b')"},
		{"r", "VALUES FROM (1) TO (2)"},
	} {
		if _, err := parseBound(c.strategy, c.bound); err == nil {
			t.Errorf("%s %q accepted", c.strategy, c.bound)
		}
	}
	b, _ := parseBound("r", "FOR VALUES FROM ('2026-01-01 00:00:00.5+00') TO ('2026-02-01 00:00:00+00')")
	if _, err := b.contains([]*string{sp("2026-01-10 00:00:00")}, []string{"timestamp with time zone"}); err == nil {
		t.Error("a bound with a fraction of a second was matched against whole seconds")
	}
	if err := b.check([]string{"timestamp with time zone"}); err == nil {
		t.Error("a bound with a fraction of a second passed the check before matching")
	}
	h, _ := parseBound("h", "FOR VALUES WITH (modulus 2, remainder 0)")
	if err := h.check([]string{"text"}); err == nil {
		t.Error("hash partitioning on text passed the check")
	}
	r, _ := parseBound("r", "FOR VALUES FROM (1) TO (2)")
	if err := r.check([]string{"integer", "integer"}); err == nil {
		t.Error("a range bound with fewer values than key columns passed the check")
	}
	if err := r.check([]string{"integer"}); err != nil {
		t.Errorf("a valid range bound: %v", err)
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// TestPartitionBoundErrors: a refused bound says which bound and why.
func TestPartitionBoundErrors(t *testing.T) {
	for _, c := range []struct{ strategy, bound, want string }{
		{"r", "FOR VALUES IN ('a')", `partition bound "FOR VALUES IN ('a')": does not match the partition strategy r`},
		{"h", "FOR VALUES WITH (modulus 0, remainder 0)", `partition bound "FOR VALUES WITH (modulus 0, remainder 0)": modulus must be positive and above the remainder`},
		{"h", "FOR VALUES WITH (modulus 4)", `partition bound "FOR VALUES WITH (modulus 4)": want (modulus m, remainder r)`},
		{"h", "FOR VALUES WITH (modulus 4, rest 1)", `partition bound "FOR VALUES WITH (modulus 4, rest 1)": want (modulus m, remainder r)`},
		{"l", "FOR VALUES IN ('a'", `partition bound "FOR VALUES IN ('a'": unterminated list`},
		{"l", "FOR VALUES IN 'a'", `partition bound "FOR VALUES IN 'a'": want (`},
		{"l", "FOR VALUES IN ('a' 'b')", `partition bound "FOR VALUES IN ('a' 'b')": unexpected "b"`},
		{"l", "FOR VALUES IN (,)", `partition bound "FOR VALUES IN (,)": unexpected ","`},
		{"r", "FOR VALUES FROM (1) (2)", `partition bound "FOR VALUES FROM (1) (2)": want TO`},
		{"r", "FOR VALUES FROM ('a) TO ('b')", `partition bound "FOR VALUES FROM ('a) TO ('b')": unterminated literal`},
		{"r", "VALUES FROM (1) TO (2)", `partition bound "VALUES FROM (1) TO (2)": want FOR VALUES or DEFAULT`},
		{"l", "FOR VALUES IN (1) x", `partition bound "FOR VALUES IN (1) x": unexpected text after the bound`},
	} {
		_, err := parseBound(c.strategy, c.bound)
		if err == nil || err.Error() != c.want {
			t.Errorf("%s %q: %v, want %s", c.strategy, c.bound, err, c.want)
		}
	}
}
