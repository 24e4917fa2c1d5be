package chstore

import (
	"testing"
)

// TestLiteral: a column default is written into DDL as a literal; every
// value must come out as one literal of the column's type, quotes and
// backslashes escaped (the server side of this is TestAddColumnMissingValues
// in tests/).
func TestLiteral(t *testing.T) {
	cases := []struct{ pg, text, want string }{
		{"text", `it's`, `'it\'s'`},
		{"text", `a\'); DROP TABLE t; --`, `'a\\\'); DROP TABLE t; --'`},
		{"integer", "-5", "-5"},
		{"boolean", "f", "0"},
		{"numeric(30,4)", "1.5", "toDecimal128('1.5000', 4)"},
		{"numeric(9,2)", "-0.5", "toDecimal32('-0.50', 2)"},
		{"numeric(12,2)", "3", "toDecimal64('3.00', 2)"},
		{"double precision", "1e300", "toFloat64('1e+300')"},
		{"double precision", "-Infinity", "toFloat64('-inf')"},
		{"double precision", "Infinity", "toFloat64('inf')"},
		{"double precision", "NaN", "toFloat64('nan')"},
		{"date", "2026-01-02", "toDate('2026-01-02')"},
		{"timestamp with time zone", "2026-01-02 04:04:05.9+01", "toDateTime('2026-01-02 03:04:05', 'UTC')"},
		{"uuid", "0190b0a8-0000-7000-8000-000000000001", "toUUID('0190b0a8-0000-7000-8000-000000000001')"},
		{"integer[]", `{1,"a'b"}`, `'{1,"a\'b"}'`},
	}
	for _, c := range cases {
		ct, err := mapType(c.pg)
		if err != nil {
			t.Fatal(err)
		}
		v, err := ct.convert(c.text)
		if err != nil {
			t.Fatalf("%s %q: %v", c.pg, c.text, err)
		}
		got, err := ct.literal(v)
		if err != nil || got != c.want {
			t.Errorf("%s %q: literal %s (%v), want %s", c.pg, c.text, got, err, c.want)
		}
	}
	// A value of the wrong Go type is refused, not formatted.
	ct, _ := mapType("integer")
	if got, err := ct.literal("5"); err == nil {
		t.Errorf("integer literal of a string: %s, want an error", got)
	}
}
