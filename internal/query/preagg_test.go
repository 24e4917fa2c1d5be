package query

import "testing"

func TestKeyLess(t *testing.T) {
	keys := [][]any{{"2026-11-02", "EUR"}, {"2026-11-01", "USD"}, {"2026-11-01", "EUR"}}
	if !keyLess(keys[2], keys[1]) || !keyLess(keys[1], keys[0]) || keyLess(keys[0], keys[0]) {
		t.Error("dates then currencies")
	}
	if !keyLess([]any{2, "EUR"}, []any{10, "EUR"}) {
		t.Error("shards are numbers")
	}
	if !keyLess([]any{"x"}, []any{nil}) || keyLess([]any{nil}, []any{"x"}) {
		t.Error("NULL last")
	}
}
