package decode

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/tributary/tributary/internal/envelope"
)

type eventT = envelope.Event

func sp(s string) *string { return &s }

// testTable: public.docs (id bigint key, title text, body text, n numeric(12,2)).
func testTable(t *testing.T, identity ReplicaIdentity) *Table {
	t.Helper()
	key := ColumnKey
	var other ColumnFlags
	if identity == IdentityFull {
		other = ColumnKey
	}
	tbl := NewRelations(nil).Put(&Relation{ID: 42, Namespace: "public", Name: "docs", ReplicaIdentity: identity,
		Columns: []RelationColumn{
			{Flags: key, Name: "id", TypeOID: 20, TypeMod: -1},
			{Flags: other, Name: "title", TypeOID: 25, TypeMod: -1},
			{Flags: other, Name: "body", TypeOID: 25, TypeMod: -1},
			{Flags: other, Name: "n", TypeOID: 1700, TypeMod: 786438},
		}})
	if err := tbl.Err(); err != nil {
		t.Fatal(err)
	}
	return tbl
}

func TestChange(t *testing.T) {
	wantCols := []envelope.Column{
		{Name: "id", Type: "bigint", OID: 20, Key: true},
		{Name: "title", Type: "text", OID: 25},
		{Name: "body", Type: "text", OID: 25},
		{Name: "n", Type: "numeric(12,2)", OID: 1700},
	}
	tests := []struct {
		name      string
		identity  ReplicaIdentity
		m         Message
		op        envelope.Op
		id        string
		after     map[string]*string
		before    map[string]*string
		unchanged []string
	}{
		{"insert", IdentityDefault,
			&Insert{RelationID: 42, New: tup(txt("734197815705617408"), txt("Zoë ☃"), null, txt("12.50"))},
			envelope.OpInsert, "734197815705617408",
			map[string]*string{"id": sp("734197815705617408"), "title": sp("Zoë ☃"), "body": nil, "n": sp("12.50")}, nil, nil},
		{"insert empty and NUL text", IdentityDefault,
			&Insert{RelationID: 42, New: tup(txt("1"), txt(""), txt("a\x00b"), null)},
			envelope.OpInsert, "1",
			map[string]*string{"id": sp("1"), "title": sp(""), "body": sp("a\x00b"), "n": nil}, nil, nil},
		{"update without old tuple", IdentityDefault,
			&Update{RelationID: 42, New: tup(txt("1"), txt("t2"), unch, txt("1.00"))},
			envelope.OpUpdate, "1",
			map[string]*string{"id": sp("1"), "title": sp("t2"), "n": sp("1.00")}, nil, []string{"body"}},
		{"update all unchanged but key", IdentityDefault,
			&Update{RelationID: 42, New: tup(txt("1"), unch, unch, null)},
			envelope.OpUpdate, "1",
			map[string]*string{"id": sp("1"), "n": nil}, nil, []string{"title", "body"}},
		{"update key change", IdentityDefault,
			&Update{RelationID: 42, OldKind: OldKey, Old: tup(txt("1"), null, null, null), New: tup(txt("2"), txt("t"), null, null)},
			envelope.OpUpdate, "2",
			map[string]*string{"id": sp("2"), "title": sp("t"), "body": nil, "n": nil},
			map[string]*string{"id": sp("1")}, nil},
		{"update full identity", IdentityFull,
			&Update{RelationID: 42, OldKind: OldFull, Old: tup(txt("1"), txt("old"), null, txt("2.00")), New: tup(txt("1"), txt("new"), null, txt("2.00"))},
			envelope.OpUpdate, "1",
			map[string]*string{"id": sp("1"), "title": sp("new"), "body": nil, "n": sp("2.00")},
			map[string]*string{"id": sp("1"), "title": sp("old"), "body": nil, "n": sp("2.00")}, nil},
		{"delete key", IdentityDefault,
			&Delete{RelationID: 42, OldKind: OldKey, Old: tup(txt("9"), null, null, null)},
			envelope.OpDelete, "9", nil, map[string]*string{"id": sp("9")}, nil},
		{"delete full", IdentityFull,
			&Delete{RelationID: 42, OldKind: OldFull, Old: tup(txt("9"), txt("x"), null, txt("0.00"))},
			envelope.OpDelete, "9", nil,
			map[string]*string{"id": sp("9"), "title": sp("x"), "body": nil, "n": sp("0.00")}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tbl := testTable(t, tc.identity)
			// Go through the wire and a Parser, then overwrite the Parser's
			// storage: the event must not change.
			var p Parser
			m, err := p.Parse(encode(tc.m))
			if err != nil {
				t.Fatal(err)
			}
			ev := envelope.Event{Shard: 3, LSN: 7, XID: 99}
			if err := tbl.Change(m, []string{"id"}, &ev); err != nil {
				t.Fatal(err)
			}
			junk := tup(txt("XXXXXXXXXXXXXXXXXXXXXXXX"), txt("XXXXXXXXXXXXXXXXXX"), txt("XXXXXXXXXXXX"), txt("XXXXXXXX"))
			if _, err := p.Parse(encode(&Update{RelationID: 1, OldKind: OldFull, Old: junk, New: junk})); err != nil {
				t.Fatal(err)
			}
			if ev.Kind != envelope.KindChange || ev.Schema != "public" || ev.Table != "docs" || ev.Op != tc.op || ev.ID != tc.id {
				t.Errorf("header = %s %s.%s %s id %q", ev.Kind, ev.Schema, ev.Table, ev.Op, ev.ID)
			}
			if ev.Shard != 3 || ev.LSN != 7 || ev.XID != 99 {
				t.Errorf("caller's fields changed: %+v", ev)
			}
			if !reflect.DeepEqual(ev.After, tc.after) {
				t.Errorf("After = %s, want %s", show(ev.After), show(tc.after))
			}
			if !reflect.DeepEqual(ev.Before, tc.before) {
				t.Errorf("Before = %s, want %s", show(ev.Before), show(tc.before))
			}
			if !reflect.DeepEqual(ev.Unchanged, tc.unchanged) {
				t.Errorf("Unchanged = %q, want %q", ev.Unchanged, tc.unchanged)
			}
			cols := wantCols
			if tc.identity == IdentityFull {
				cols = []envelope.Column{wantCols[0], wantCols[1], wantCols[2], wantCols[3]}
				for i := range cols {
					cols[i].Key = true
				}
			}
			if !reflect.DeepEqual(ev.Columns, cols) {
				t.Errorf("Columns = %+v", ev.Columns)
			}
			if err := ev.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
			if _, err := envelope.Encode(&ev); err != nil {
				t.Errorf("Encode: %v", err)
			}
		})
	}
}

func show(m map[string]*string) string {
	if m == nil {
		return "nil"
	}
	var b strings.Builder
	for k, v := range m {
		if v == nil {
			b.WriteString(k + "=NULL ")
		} else {
			b.WriteString(k + "=" + *v + " ")
		}
	}
	return b.String()
}

func TestChangeErrors(t *testing.T) {
	tests := []struct {
		name     string
		identity ReplicaIdentity
		m        Message
		idColumn string
		want     error
		msg      string
	}{
		{"not a change", IdentityDefault, &Begin{}, "id", nil, "*decode.Begin is not a row change"},
		{"truncate", IdentityDefault, &Truncate{RelationIDs: []uint32{42}}, "id", nil, "not a row change"},
		{"other relation", IdentityDefault, &Insert{RelationID: 43, New: tup(txt("1"), null, null, null)}, "id", ErrUnknownRelation, "relation 43"},
		{"new too short", IdentityDefault, &Insert{RelationID: 42, New: tup(txt("1"), null, null)}, "id", ErrColumnCount, "tuple has 3 columns, relation 4"},
		{"new too long", IdentityDefault, &Update{RelationID: 42, New: tup(txt("1"), null, null, null, null)}, "id", ErrColumnCount, "5 columns"},
		{"old wrong count", IdentityDefault, &Delete{RelationID: 42, OldKind: OldKey, Old: tup(txt("1"))}, "id", ErrColumnCount, "1 columns"},
		{"binary", IdentityDefault, &Insert{RelationID: 42, New: tup(txt("1"), bin(1), null, null)}, "id", ErrBinaryValue, `column "title"`},
		{"binary old", IdentityFull, &Delete{RelationID: 42, OldKind: OldFull, Old: tup(txt("1"), null, null, bin())}, "id", ErrBinaryValue, `column "n"`},
		{"unchanged in insert", IdentityDefault, &Insert{RelationID: 42, New: tup(txt("1"), unch, null, null)}, "id", ErrUnchangedValue, `column "title"`},
		{"unchanged in old", IdentityFull, &Update{RelationID: 42, OldKind: OldFull, Old: tup(txt("1"), unch, null, null), New: tup(txt("1"), null, null, null)}, "id", ErrUnchangedValue, "title"},
		{"value for non-key in key tuple", IdentityDefault, &Delete{RelationID: 42, OldKind: OldKey, Old: tup(txt("1"), txt("x"), null, null)}, "id", ErrMalformed, "non-key column"},
		{"no id column", IdentityDefault, &Insert{RelationID: 42, New: tup(txt("1"), null, null, null)}, "uuid", ErrID, `column "uuid": no usable id value: no such column`},
		{"invalid UTF-8", IdentityDefault, &Insert{RelationID: 42, New: tup(txt("1"), txt("ok"), txt("caf\xe9"), null)}, "id", ErrNotUTF8, `column "body"`},
		{"null id", IdentityDefault, &Insert{RelationID: 42, New: tup(null, null, null, null)}, "id", ErrID, "NULL"},
		{"empty id", IdentityDefault, &Insert{RelationID: 42, New: tup(txt(""), null, null, null)}, "id", ErrID, "empty"},
		{"unchanged id", IdentityDefault, &Update{RelationID: 42, New: tup(txt("1"), unch, null, null)}, "title", ErrID, "unchanged TOAST"},
		{"delete id not in key", IdentityDefault, &Delete{RelationID: 42, OldKind: OldKey, Old: tup(txt("1"), null, null, null)}, "title", ErrID, "not a replica identity column"},
		{"delete null id full", IdentityFull, &Delete{RelationID: 42, OldKind: OldFull, Old: tup(txt("1"), null, null, null)}, "title", ErrID, "NULL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tbl := testTable(t, tc.identity)
			ev := envelope.Event{Shard: 1}
			err := tbl.Change(tc.m, []string{tc.idColumn}, &ev)
			if err == nil {
				t.Fatalf("Change succeeded: %+v", ev)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("Change = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not mention %q", err, tc.msg)
			}
			if !reflect.DeepEqual(ev, envelope.Event{Shard: 1}) {
				t.Errorf("event changed on error: %+v", ev)
			}
		})
	}
}
