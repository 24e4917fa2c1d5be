package revenueblocks

import (
	"errors"
	"strings"
	"testing"
)

func TestKindOf(t *testing.T) {
	for typ, want := range map[string]IDKind{"Int64": Integer, "UInt64": Integer, "Int32": Integer, "UUID": UUID} {
		if got, err := KindOf(typ); err != nil || got != want {
			t.Errorf("KindOf(%s) = %s, %v; want %s", typ, got, err, want)
		}
	}
	for _, typ := range []string{"String", "Tuple(Int64, Int64)", "Nullable(Int64)", "Float64"} {
		if _, err := KindOf(typ); !errors.Is(err, ErrUnsupportedID) || !strings.Contains(err.Error(), typ) {
			t.Errorf("KindOf(%s) = %v; want ErrUnsupportedID naming the type", typ, err)
		}
	}
}

func TestBlocksWhere(t *testing.T) {
	w, args := BlocksWhere(Integer, "id", 4, []int64{1, 2, 3, 7})
	if w != "((`id` >= 16 AND `id` < 64) OR (`id` >= 112 AND `id` < 128))" || len(args) != 0 {
		t.Errorf("integer blocks: %s %v", w, args)
	}
	w, args = BlocksWhere(UUID, "id", 4, []int64{1, 2})
	if !strings.HasPrefix(w, "toInt64(bitShiftRight(reinterpretAsUInt64(") || !strings.HasSuffix(w, " IN ?") || len(args) != 1 {
		t.Errorf("uuid blocks: %s %v", w, args)
	}
}

func TestDecimalScale(t *testing.T) {
	for _, c := range []struct {
		typ   string
		scale int32
		ok    bool
	}{
		{"Decimal(38, 2)", 2, true},
		{"Nullable(Decimal(38, 2))", 2, true},
		{"Decimal(38,4)", 4, true},
		{"Decimal128(3)", 3, true},
		{"Nullable(Decimal64(0))", 0, true},
		{"Float64", 0, false},
		{"Nullable(Float64)", 0, false},
		{"Int64", 0, false},
		{"Decimal", 0, false},
	} {
		s, ok := DecimalScale(c.typ)
		if s != c.scale || ok != c.ok {
			t.Errorf("DecimalScale(%q) = %d, %v; want %d, %v", c.typ, s, ok, c.scale, c.ok)
		}
	}
}
