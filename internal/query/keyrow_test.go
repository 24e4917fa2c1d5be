package query

import (
	"errors"
	"testing"
)

func TestKeyValue(t *testing.T) {
	for _, c := range []struct {
		typ, part string
		want      any // nil: a *KeyPartError
	}{
		{"Int32", "7", int64(7)},
		{"Int16", "40000", nil},
		{"Int64", "-9223372036854775808", int64(-9223372036854775808)},
		{"Int64", "x", nil},
		{"UUID", "0190C2D4-0000-7000-8000-000000000001", "0190c2d4-0000-7000-8000-000000000001"},
		{"UUID", "0190c2d400007000800000000000000001", nil},
		{"String", "acme, inc", "acme, inc"},
	} {
		got, err := keyValue("k", c.typ, c.part)
		var kp *KeyPartError
		switch {
		case c.want == nil && !errors.As(err, &kp):
			t.Errorf("%s %q: %v, %v; want a KeyPartError", c.typ, c.part, got, err)
		case c.want != nil && (err != nil || got != c.want):
			t.Errorf("%s %q: %v, %v; want %v", c.typ, c.part, got, err, c.want)
		}
	}
}
