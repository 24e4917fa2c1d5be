package chstore

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tributary/tributary/internal/envelope"
)

// recorded keeps what a column-wise Append received.
type recorded struct{ got any }

func (r *recorded) Append(v any) error    { r.got = v; return nil }
func (r *recorded) AppendRow(v any) error { return errors.New("row-wise append not expected") }

func blockTable(t *testing.T) *Table {
	t.Helper()
	tab, err := layout("docs", []string{"id"}, []envelope.Column{
		{Name: "id", Type: "bigint", Key: true}, {Name: "title", Type: "text"},
		{Name: "amount", Type: "numeric(12,2)"}, {Name: "created_at", Type: "timestamp with time zone"},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

func str(s string) *string { return &s }

// TestBlockMatchesConvert: every cell of a block equals what Convert gives
// for the same row, NULLs and tombstone zeros included.
func TestBlockMatchesConvert(t *testing.T) {
	tab := blockTable(t)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	rows := []*Row{
		{Shard: 1, Version: 10, Values: map[string]*string{"id": str("7"), "title": str("a"), "amount": str("12.34"), "created_at": str("2026-11-30 12:00:00.5+01")}},
		{Shard: 2, Version: 11, Values: map[string]*string{"id": str("8")}},  // NULLs
		{Shard: 2, Version: 12, Deleted: true, Values: map[string]*string{}}, // tombstone: key zero
		{Shard: 3, Version: 13, Values: map[string]*string{"id": str("9"), "title": str("b")},
			Filled: map[string]any{"amount": decimal.RequireFromString("1.50"), "created_at": (*time.Time)(nil)}},
	}
	b := tab.NewBlock(len(rows), now)
	for i, r := range rows {
		if err := b.Set(i, r); err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		want, err := tab.Convert(r, now)
		if err != nil {
			t.Fatalf("row %d: Convert: %v", i, err)
		}
		for ci, c := range tab.Columns {
			got := b.Value(i, c.Name)
			w := want[ci]
			if p, ok := w.(*time.Time); ok && p == nil {
				w = nil
			}
			if !reflect.DeepEqual(got, w) {
				t.Errorf("row %d column %s: block %#v, Convert %#v", i, c.Name, got, w)
			}
		}
	}
}

func TestBlockErrors(t *testing.T) {
	tab := blockTable(t)
	b := tab.NewBlock(2, time.Now())
	var ce *ConvertError
	if err := b.Set(0, &Row{Values: map[string]*string{"id": str("x")}}); !errors.As(err, &ce) || ce.Column != "id" {
		t.Errorf("bad bigint: got %v, want a ConvertError on id", err)
	}
	if err := b.Set(1, &Row{Values: map[string]*string{"title": str("no id")}}); !errors.As(err, &ce) || ce.Column != "id" {
		t.Errorf("NULL key of a live row: got %v, want a ConvertError on id", err)
	}
	if err := b.Set(1, &Row{Values: map[string]*string{"id": str("1")}, Filled: map[string]any{"amount": "1.5"}}); !errors.As(err, &ce) || ce.Column != "amount" {
		t.Errorf("kept value of the wrong type: got %v, want a ConvertError on amount", err)
	}
}

// TestBlockAppend: the chosen rows, in the order given, reach the batch as
// typed slices; NULLs as nil pointers of Nullable columns.
func TestBlockAppend(t *testing.T) {
	tab := blockTable(t)
	b := tab.NewBlock(3, time.Now())
	for i, title := range []*string{str("a"), nil, str("c")} {
		if err := b.Set(i, &Row{Values: map[string]*string{"id": str(string(rune('1' + i))), "title": title}}); err != nil {
			t.Fatal(err)
		}
	}
	var ids, titles recorded
	if err := b.cols[0].appendTo(&ids, []int{2, 1}, b.isNull[0]); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ids.got, []int64{3, 2}) {
		t.Errorf("ids appended %#v, want []int64{3, 2}", ids.got)
	}
	if err := b.cols[1].appendTo(&titles, []int{2, 1, 0}, b.isNull[1]); err != nil {
		t.Fatal(err)
	}
	ptrs, ok := titles.got.([]*string)
	if !ok || len(ptrs) != 3 || ptrs[0] == nil || *ptrs[0] != "c" || ptrs[1] != nil || ptrs[2] == nil || *ptrs[2] != "a" {
		t.Errorf("titles appended %#v, want [c, NULL, a] as []*string", titles.got)
	}
}
