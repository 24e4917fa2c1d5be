package query

import (
	"errors"
	"strings"
	"testing"
)

func TestPreaggIDKindOf(t *testing.T) {
	for typ, want := range map[string]PreaggIDKind{"Int64": PreaggInteger, "UInt64": PreaggInteger, "Int32": PreaggInteger, "UUID": PreaggUUID} {
		if got, err := PreaggIDKindOf(typ); err != nil || got != want {
			t.Errorf("PreaggIDKindOf(%s) = %s, %v; want %s", typ, got, err, want)
		}
	}
	for _, typ := range []string{"String", "Tuple(Int64, Int64)", "Nullable(Int64)", "Float64"} {
		if _, err := PreaggIDKindOf(typ); !errors.Is(err, ErrPreaggUnsupportedID) || !strings.Contains(err.Error(), typ) {
			t.Errorf("PreaggIDKindOf(%s) = %v; want ErrPreaggUnsupportedID naming the type", typ, err)
		}
	}
}

func TestPreaggBlocksWhere(t *testing.T) {
	w, args := preaggBlocksWhere(PreaggInteger, "id", 4, []int64{1, 2, 3, 7})
	if w != "((`id` >= 16 AND `id` < 64) OR (`id` >= 112 AND `id` < 128))" || len(args) != 0 {
		t.Errorf("integer blocks: %s %v", w, args)
	}
	w, args = preaggBlocksWhere(PreaggUUID, "id", 4, []int64{1, 2})
	if !strings.HasPrefix(w, "toInt64(bitShiftRight(reinterpretAsUInt64(") || !strings.HasSuffix(w, " IN ?") || len(args) != 1 {
		t.Errorf("uuid blocks: %s %v", w, args)
	}
}

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
