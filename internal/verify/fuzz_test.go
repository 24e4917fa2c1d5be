package verify

import (
	"testing"
)

// FuzzSourceCanon: the PostgreSQL text parsers never panic, and a value
// always equals itself as the API would write it when it is representable.
func FuzzSourceCanon(f *testing.F) {
	for _, s := range []string{"12.50", "-0.00", "1e+21", "NaN", "t", "2024-03-01", "2024-03-01 12:34:56.789+05:30",
		"2024-03-01 12:34:56", "infinity", "0044-03-15 BC", "734197815705617408", "", "{1,2}", "\x00\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for k := kindText; int(k) < len(kindNames); k++ {
			c1, err1 := sourceCanon(k, s)
			c2, err2 := sourceCanon(k, s)
			if c1 != c2 || (err1 == nil) != (err2 == nil) {
				t.Fatalf("%s %q: not deterministic", k, s)
			}
		}
		if c, err := canonDecimal(s); err == nil {
			// The canonical form ("125e-1") is itself a decimal: it must map to itself.
			if again, err := canonDecimal(c); err != nil || again != c {
				t.Fatalf("canonDecimal(%q) = %q is not stable: %q, %v", s, c, again, err)
			}
		}
	})
}
