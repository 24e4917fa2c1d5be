package decode

import (
	"errors"
	"reflect"
	"testing"

	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/rowkey"
)

// compositeTable: public.order_lines (tenant_id text key, line_no int key,
// note text), default replica identity.
func compositeTable(t *testing.T) *Table {
	t.Helper()
	tbl := NewRelations(nil).Put(&Relation{ID: 7, Namespace: "public", Name: "order_lines", ReplicaIdentity: IdentityDefault,
		Columns: []RelationColumn{
			{Flags: ColumnKey, Name: "tenant_id", TypeOID: 25, TypeMod: -1},
			{Flags: ColumnKey, Name: "line_no", TypeOID: 23, TypeMod: -1},
			{Name: "note", TypeOID: 25, TypeMod: -1},
		}})
	if err := tbl.Err(); err != nil {
		t.Fatal(err)
	}
	return tbl
}

func TestChangeCompositeKey(t *testing.T) {
	key := []string{"tenant_id", "line_no"}
	tbl := compositeTable(t)
	cases := []struct {
		name   string
		m      Message
		id     string
		oldKey string // key text of Before; "" when Before has none
	}{
		{"insert", &Insert{RelationID: 7, New: tup(txt("acme, inc"), txt("1"), txt("x"))}, `acme\, inc,1`, ""},
		{"update of a non-key column", &Update{RelationID: 7, New: tup(txt("t7"), txt("1"), txt("y"))}, "t7,1", ""},
		{"update of a key column", &Update{RelationID: 7, OldKind: OldKey, Old: tup(txt("t7"), txt("1"), null), New: tup(txt("t7"), txt("2"), txt("y"))}, "t7,2", "t7,1"},
		{"delete", &Delete{RelationID: 7, OldKind: OldKey, Old: tup(txt(`a\b`), txt("3"), null)}, `a\\b,3`, `a\\b,3`},
		{"empty text key column", &Insert{RelationID: 7, New: tup(txt(""), txt("1"), null)}, ",1", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var ev envelope.Event
			if err := tbl.Change(c.m, key, &ev); err != nil {
				t.Fatal(err)
			}
			if ev.ID != c.id {
				t.Errorf("ID = %q, want %q", ev.ID, c.id)
			}
			old, ok := rowkey.Of(key, ev.Before)
			if (c.oldKey != "") != ok || old != c.oldKey {
				t.Errorf("old key = %q (%v), want %q", old, ok, c.oldKey)
			}
			if c.oldKey != "" && c.oldKey != c.id && !reflect.DeepEqual(ev.Before, map[string]*string{"tenant_id": sp("t7"), "line_no": sp("1")}) {
				t.Errorf("Before = %s", show(ev.Before))
			}
		})
	}
}

func TestChangeCompositeKeyRefused(t *testing.T) {
	tbl := compositeTable(t)
	cases := []struct {
		name   string
		m      Message
		key    []string
		column string
	}{
		{"a NULL key column", &Insert{RelationID: 7, New: tup(txt("t7"), null, null)}, []string{"tenant_id", "line_no"}, "line_no"},
		{"a key column not sent", &Update{RelationID: 7, New: tup(unch, txt("1"), null)}, []string{"tenant_id", "line_no"}, "tenant_id"},
		{"no such key column", &Insert{RelationID: 7, New: tup(txt("t7"), txt("1"), null)}, []string{"tenant_id", "rev"}, "rev"},
		{"a key column deletes do not carry", &Delete{RelationID: 7, OldKind: OldKey, Old: tup(txt("t7"), txt("1"), null)}, []string{"tenant_id", "note"}, "note"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var ev envelope.Event
			err := tbl.Change(c.m, c.key, &ev)
			var ce *ColumnError
			if !errors.Is(err, ErrID) || !errors.As(err, &ce) || ce.Column != c.column {
				t.Fatalf("Change = %v, want ErrID about column %s", err, c.column)
			}
		})
	}
}
