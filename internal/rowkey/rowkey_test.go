package rowkey

import (
	"errors"
	"slices"
	"testing"
)

func TestEncodeParse(t *testing.T) {
	cases := []struct {
		values []string
		text   string
	}{
		{[]string{"734197815705617408"}, "734197815705617408"},
		{[]string{"a,b\\c"}, "a,b\\c"}, // one column: the value, unescaped
		{[]string{"7", "1"}, "7,1"},
		{[]string{"acme, inc", "1"}, `acme\, inc,1`},
		{[]string{`C:\x`, ""}, `C:\\x,`},
		{[]string{"", ""}, ","},
		{[]string{"a", "b", "c"}, "a,b,c"},
	}
	for _, c := range cases {
		if got := Encode(c.values); got != c.text {
			t.Errorf("Encode(%q) = %q, want %q", c.values, got, c.text)
		}
		back, err := Parse(c.text, len(c.values))
		if err != nil || !slices.Equal(back, c.values) {
			t.Errorf("Parse(%q, %d) = %q, %v; want %q", c.text, len(c.values), back, err, c.values)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	cases := []struct {
		text string
		n    int
	}{
		{"7", 2},     // too few parts
		{"7,1,2", 2}, // too many
		{`7\`, 2},    // trailing backslash
		{`7\x,1`, 2}, // escapes neither \ nor ,
		{"7", 0},     // no columns
		{`a\,b`, 2},  // an escaped comma is not a separator
	}
	for _, c := range cases {
		if v, err := Parse(c.text, c.n); !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse(%q, %d) = %q, %v; want ErrMalformed", c.text, c.n, v, err)
		}
	}
}

func TestOf(t *testing.T) {
	s := func(v string) *string { return &v }
	row := map[string]*string{"tenant_id": s("7"), "line_no": s("1"), "note": nil}
	if got, ok := Of([]string{"tenant_id", "line_no"}, row); !ok || got != "7,1" {
		t.Errorf("Of = %q, %v; want 7,1", got, ok)
	}
	if _, ok := Of([]string{"tenant_id", "note"}, row); ok {
		t.Error("Of with a NULL key column: ok")
	}
	if _, ok := Of([]string{"tenant_id", "missing"}, row); ok {
		t.Error("Of with an absent key column: ok")
	}
}

// FuzzRoundTrip: every list of values comes back from its key text, and a
// text Parse accepts encodes back to itself.
func FuzzRoundTrip(f *testing.F) {
	f.Add("7", "1", `acme\, inc`, 2)
	f.Add(`\`, ",", "", 3)
	f.Add("x", "", "", 1)
	f.Fuzz(func(t *testing.T, a, b, c string, n int) {
		n = 1 + (n%3+3)%3
		values := []string{a, b, c}[:n]
		text := Encode(values)
		back, err := Parse(text, n)
		if err != nil || !slices.Equal(back, values) {
			t.Fatalf("Parse(Encode(%q)) = %q, %v", values, back, err)
		}
		if parts, err := Parse(a, n); err == nil && Encode(parts) != a {
			t.Fatalf("Encode(Parse(%q)) = %q", a, Encode(parts))
		}
	})
}
