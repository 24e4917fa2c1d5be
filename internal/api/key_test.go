package api

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/tributary/tributary/internal/query"
	"github.com/tributary/tributary/internal/tables"
)

// TestParseKey: a composite key's text splits into its columns' values;
// a malformed one is a 400 that names the table's key and the path form.
func TestParseKey(t *testing.T) {
	cfg, err := tables.Parse([]byte(`{"tables":[{"name":"order_lines","id_columns":["tenant_id","line_no"],"id_layout":"key"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	tb, _ := cfg.ByName("order_lines")
	const help = `order_lines is keyed by (tenant_id, line_no): /v1/tables/order_lines/rows/{tenant_id},{line_no}`
	for _, c := range []struct {
		text    string
		want    []string // nil: a 400
		mention string
	}{
		{"7,1", []string{"7", "1"}, ""},
		{`acme\, inc,1`, []string{"acme, inc", "1"}, ""},
		{"7", nil, "1 parts, the key has 2 columns"},
		{"7,1,2", nil, "3 parts, the key has 2 columns"},
		{`7\x,1`, nil, "escapes neither"},
		{strings.Repeat("1", 2000) + ",1", nil, "more than 1024"},
	} {
		got, err := parseKey(c.text, tb)
		if c.want != nil {
			if err != nil || !slices.Equal(got, c.want) {
				t.Errorf("%q: %q, %v; want %q", c.text, got, err, c.want)
			}
			continue
		}
		var e *Error
		if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Code != "bad_id" ||
			!strings.Contains(e.Message, c.mention) || !strings.Contains(e.Message, help) {
			t.Errorf("%q: %v; want 400 bad_id mentioning %q and %q", c.text, err, c.mention, help)
		}
	}
	// A part that is not a value of its column (found by the query layer).
	err = keyError(tb, &query.KeyPartError{Column: "line_no", Type: "Int32", Value: "one"})
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusBadRequest || !strings.Contains(e.Message, `"one" is not a value of line_no (Int32)`) || !strings.Contains(e.Message, help) {
		t.Errorf("key part: %v", err)
	}
}
