package decode

import (
	"errors"
	"slices"
	"testing"

	"github.com/tributary/tributary/internal/envelope"
)

func TestRelationsPutGetReplace(t *testing.T) {
	rels := NewRelations(nil)
	var p Parser
	m, err := p.Parse(encode(&Relation{ID: 7, Namespace: "", Name: "t", ReplicaIdentity: IdentityDefault,
		Columns: []RelationColumn{{Flags: ColumnKey, Name: "id", TypeOID: 20, TypeMod: -1}}}))
	if err != nil {
		t.Fatal(err)
	}
	first := rels.Put(m.(*Relation))
	if first.Err() != nil {
		t.Fatal(first.Err())
	}
	if first.Schema != "pg_catalog" {
		t.Errorf("schema %q, want pg_catalog for pgoutput's empty namespace", first.Schema)
	}
	// The parser reuses its Relation: the cached table must not change.
	if _, err := p.Parse(encode(&Relation{ID: 7, Namespace: "s", Name: "t2", ReplicaIdentity: IdentityFull,
		Columns: []RelationColumn{{Flags: ColumnKey, Name: "a", TypeOID: 25, TypeMod: -1}, {Flags: ColumnKey, Name: "b", TypeOID: 23, TypeMod: -1}}})); err != nil {
		t.Fatal(err)
	}
	if got, _ := rels.Get(7); got != first || got.Name != "t" || got.Columns[0].Name != "id" || len(got.Columns) != 1 {
		t.Fatalf("cached table changed under the parser: %+v", got)
	}
	second := rels.Put(&p.relation)
	if got, ok := rels.Get(7); !ok || got != second || got.Name != "t2" || len(got.EventColumns) != 2 {
		t.Fatalf("Get after replace = %+v", got)
	}
	if first.Name != "t" {
		t.Fatal("replacing changed the earlier table")
	}
	if _, ok := rels.Get(8); ok {
		t.Fatal("Get(8) found a table")
	}
}

func TestRelationsTypeName(t *testing.T) {
	var lookups []typeKey
	lookupErr := errors.New("connection refused")
	failing := true
	lookup := func(oid uint32, typmod int32) (CatalogType, error) {
		lookups = append(lookups, typeKey{oid, typmod})
		switch {
		case oid == 99999:
			return CatalogType{}, nil
		case failing && oid == 16500:
			return CatalogType{}, lookupErr
		case oid == 16600: // a domain over numeric(12,2): the catalogue knows its modifier
			return CatalogType{Name: "numeric(12,2)"}, nil
		case oid == 16601:
			return CatalogType{Name: "public.mood", Enum: true}, nil
		}
		return CatalogType{Name: "ext.vector(3)"}, nil
	}
	rels := NewRelations(nil)
	rels.PutType(&Type{OID: 16390, Namespace: "public", Name: "mood"})
	rels.PutType(&Type{OID: 16391, Namespace: "public", Name: "_mood"})
	rels.PutType(&Type{OID: 16392, Namespace: "", Name: "varchar"}) // a domain over varchar
	rels.PutType(&Type{OID: 16393, Namespace: "My Schema", Name: "order"})
	rels.PutType(&Type{OID: 16394, Namespace: "", Name: "aclitem"}) // a domain over a type outside the table

	for _, tc := range []struct {
		oid    uint32
		typmod int32
		want   string
	}{
		{20, -1, "bigint"},
		{1015, 44, "character varying(40)[]"},
		{16390, -1, "public.mood"},
		{16391, -1, "public._mood"},
		{16392, -1, "character varying"},
		{16393, -1, `"My Schema"."order"`},
		{16394, -1, "aclitem"},
	} {
		got, err := rels.TypeName(tc.oid, tc.typmod)
		if err != nil || got != tc.want {
			t.Errorf("without a lookup: TypeName(%d, %d) = %q, %v; want %q", tc.oid, tc.typmod, got, err, tc.want)
		}
	}

	// With a lookup, the catalogue answers for every type that is not
	// built in, before any Type message (which names a domain's base type
	// without its modifier, and an enum like any user type).
	rels = NewRelations(lookup)
	rels.PutType(&Type{OID: 16600, Namespace: "", Name: "numeric"})
	rels.PutType(&Type{OID: 16601, Namespace: "public", Name: "mood"})
	for _, tc := range []struct {
		oid    uint32
		typmod int32
		want   CatalogType
	}{
		{20, -1, CatalogType{Name: "bigint"}},
		{1015, 44, CatalogType{Name: "character varying(40)[]"}},
		{16600, -1, CatalogType{Name: "numeric(12,2)"}},
		{16601, -1, CatalogType{Name: "public.mood", Enum: true}},
		{16390, 7, CatalogType{Name: "ext.vector(3)"}},
		{27, -1, CatalogType{Name: "ext.vector(3)"}}, // a built-in outside the table
	} {
		got, err := rels.Type(tc.oid, tc.typmod)
		if err != nil || got != tc.want {
			t.Errorf("Type(%d, %d) = %+v, %v; want %+v", tc.oid, tc.typmod, got, err, tc.want)
		}
	}
	if want := []typeKey{{16600, -1}, {16601, -1}, {16390, 7}, {27, -1}}; !slices.Equal(lookups, want) {
		t.Errorf("lookups %v, want %v", lookups, want)
	}
	// Answers are cached.
	lookups = nil
	if _, err := rels.TypeName(27, -1); err != nil || len(lookups) != 0 {
		t.Errorf("second lookup: %v, %v", lookups, err)
	}

	// Errors are reported with the OID, and not cached.
	_, err := rels.TypeName(16500, -1)
	var ute *UnknownTypeError
	if !errors.As(err, &ute) || ute.OID != 16500 || !errors.Is(err, ErrUnknownType) || !errors.Is(err, lookupErr) {
		t.Fatalf("failing lookup: %v", err)
	}
	failing = false
	if name, err := rels.TypeName(16500, -1); err != nil || name != "ext.vector(3)" {
		t.Errorf("lookup after recovery: %q, %v", name, err)
	}
	if _, err := rels.TypeName(99999, -1); !errors.Is(err, errEmptyLookup) {
		t.Errorf("empty lookup answer: %v", err)
	}

	// Without a lookup, the Type message's names still show in the error.
	_, err = NewRelations(nil).TypeName(16390, 5)
	if !errors.As(err, &ute) || ute.OID != 16390 || ute.TypeMod != 5 {
		t.Fatalf("no lookup: %v", err)
	}
	norels := NewRelations(nil)
	norels.PutType(&Type{OID: 16390, Namespace: "public", Name: "mood"})
	_, err = norels.TypeName(16390, 5)
	if !errors.As(err, &ute) || ute.Name != "mood" || ute.Namespace != "public" {
		t.Fatalf("no lookup, with Type message: %v", err)
	}
	t.Log(err)
}

func TestRelationsUnknownTypeInTable(t *testing.T) {
	rels := NewRelations(nil)
	tbl := rels.Put(&Relation{ID: 1, Namespace: "public", Name: "t", ReplicaIdentity: IdentityDefault, Columns: []RelationColumn{
		{Flags: ColumnKey, Name: "id", TypeOID: 20, TypeMod: -1},
		{Name: "g", TypeOID: 17000, TypeMod: -1},
	}})
	err := tbl.Err()
	var ce *ColumnError
	if !errors.Is(err, ErrUnknownType) || !errors.As(err, &ce) || ce.Column != "g" || ce.Table != "t" {
		t.Fatalf("Err() = %v", err)
	}
	if _, ok := rels.Get(1); !ok {
		t.Fatal("table with an unknown type is not cached")
	}
	var p Parser
	m, _ := p.Parse(encode(&Insert{RelationID: 1, New: tup(txt("1"), txt("x"))}))
	if err := tbl.Change(m, []string{"id"}, new(eventT)); !errors.Is(err, ErrUnknownType) {
		t.Fatalf("Change = %v, want ErrUnknownType", err)
	}
}

func TestRelationsDuplicateColumn(t *testing.T) {
	tbl := NewRelations(nil).Put(&Relation{ID: 1, Name: "t", ReplicaIdentity: IdentityDefault, Columns: []RelationColumn{
		{Name: "a", TypeOID: 25, TypeMod: -1}, {Name: "a", TypeOID: 25, TypeMod: -1},
	}})
	if !errors.Is(tbl.Err(), ErrMalformed) {
		t.Fatalf("Err() = %v", tbl.Err())
	}
}

func TestRelationsNotUTF8(t *testing.T) {
	for _, rel := range []*Relation{
		{ID: 1, Namespace: "s", Name: "caf\xe9", ReplicaIdentity: IdentityDefault},
		{ID: 1, Namespace: "s", Name: "t", ReplicaIdentity: IdentityDefault, Columns: []RelationColumn{{Name: "\xff", TypeOID: 25, TypeMod: -1}}},
	} {
		if err := NewRelations(nil).Put(rel).Err(); !errors.Is(err, ErrNotUTF8) {
			t.Errorf("Put(%q.%q): Err() = %v", rel.Namespace, rel.Name, err)
		}
	}
}

// TestRelationsEventColumnsFromCatalogue: a Relation's envelope columns
// carry what the catalogue resolved: a domain's base type with its
// modifier, and the enum mark.
func TestRelationsEventColumnsFromCatalogue(t *testing.T) {
	rels := NewRelations(func(oid uint32, typmod int32) (CatalogType, error) {
		switch oid {
		case 16600:
			return CatalogType{Name: "numeric(12,2)"}, nil
		case 16601:
			return CatalogType{Name: "public.mood", Enum: true}, nil
		}
		return CatalogType{}, errors.New("no such type")
	})
	rels.PutType(&Type{OID: 16600, Namespace: "", Name: "numeric"}) // as pgoutput sends a domain
	tbl := rels.Put(&Relation{ID: 1, Namespace: "public", Name: "t", ReplicaIdentity: IdentityDefault, Columns: []RelationColumn{
		{Flags: ColumnKey, Name: "id", TypeOID: 20, TypeMod: -1},
		{Name: "amount", TypeOID: 16600, TypeMod: -1},
		{Name: "mood", TypeOID: 16601, TypeMod: -1},
	}})
	if err := tbl.Err(); err != nil {
		t.Fatal(err)
	}
	want := []envelope.Column{{Name: "id", Type: "bigint", OID: 20, Key: true},
		{Name: "amount", Type: "numeric(12,2)", OID: 16600}, {Name: "mood", Type: "public.mood", OID: 16601, Enum: true}}
	if !slices.Equal(tbl.EventColumns, want) {
		t.Fatalf("EventColumns %+v, want %+v", tbl.EventColumns, want)
	}
}
