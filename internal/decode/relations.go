package decode

import (
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/tributary/tributary/internal/envelope"
)

// TypeLookup resolves a column type that TypeName cannot name, through the
// shard's catalogue (typically pg_type and format_type on an ordinary,
// non-replication connection). It is called when a Relation is cached, never
// per row, at most once per (oid, typmod) per Relations.
type TypeLookup func(oid uint32, typmod int32) (CatalogType, error)

// CatalogType is a column type as the catalogue resolves it.
type CatalogType struct {
	// Name is what format_type prints for the type, with every domain
	// replaced by its base type and the domain's modifier: a domain over
	// numeric(12,2) is "numeric(12,2)", an array of a domain over text is
	// "text[]". Constraints of a domain are the source's business: every
	// value that reaches the stream satisfied them.
	Name string
	// Enum: the (base) type is an enum; its values are its labels.
	Enum bool
}

// Relations caches the Relation and Type messages of one replication
// session, by relation id and type OID. pgoutput sends them once per session
// (and again after a schema change), so a new session needs a new
// Relations. It belongs to the goroutine that reads the stream and is not
// safe for concurrent use.
type Relations struct {
	tables map[uint32]*Table
	types  map[uint32]Type
	lookup TypeLookup
	// looked caches the lookup's answers (not its errors, which may be
	// transient).
	looked map[typeKey]CatalogType
}

var errEmptyLookup = errors.New("type lookup returned an empty name")

type typeKey struct {
	oid    uint32
	typmod int32
}

// NewRelations returns an empty cache. lookup may be nil: columns whose
// type cannot be named then make Table.Err (and Table.Change) fail with an
// *UnknownTypeError.
func NewRelations(lookup TypeLookup) *Relations {
	return &Relations{
		tables: map[uint32]*Table{},
		types:  map[uint32]Type{},
		lookup: lookup,
		looked: map[typeKey]CatalogType{},
	}
}

// Table is a cached relation, ready to convert its changes. It never
// changes once built: a later Relation message for the same id puts a new
// *Table in the cache, and older ones stay valid for changes decoded
// before it.
type Table struct {
	// ID, Namespace, Name, ReplicaIdentity and Columns are the Relation
	// message's; Columns belongs to the Table.
	ID              uint32
	Namespace       string
	Name            string
	ReplicaIdentity ReplicaIdentity
	Columns         []RelationColumn
	// Schema is Namespace, with pgoutput's "" spelled "pg_catalog".
	Schema string
	// EventColumns is the envelope's column list, type names resolved. Every
	// event of the table shares this slice: it must not be modified.
	EventColumns []envelope.Column
	// index maps column names to positions.
	index map[string]int
	// err is the first type resolution error, reported by Err and Change.
	err error
}

// Err reports a column whose type could not be named (an
// *UnknownTypeError, wrapped with the column); Change fails with it too.
func (t *Table) Err() error { return t.err }

// Put caches rel, replacing an earlier Relation with the same id, and
// returns the new Table. rel is copied: it may come from a Parser. Column
// types are named here (see Relations.TypeName); a failure is kept in
// Table.Err rather than refusing the relation, so that its changes fail
// with the precise reason instead of "unknown relation".
func (r *Relations) Put(rel *Relation) *Table {
	t := &Table{
		ID:              rel.ID,
		Namespace:       rel.Namespace,
		Name:            rel.Name,
		ReplicaIdentity: rel.ReplicaIdentity,
		Columns:         slices.Clone(rel.Columns),
		Schema:          rel.Namespace,
	}
	if t.Schema == "" {
		t.Schema = "pg_catalog"
	}
	t.EventColumns = make([]envelope.Column, len(t.Columns))
	t.index = make(map[string]int, len(t.Columns))
	if !utf8.ValidString(t.Schema) || !utf8.ValidString(t.Name) {
		t.err = &ColumnError{Schema: t.Schema, Table: t.Name, Err: ErrNotUTF8}
	}
	for i, c := range t.Columns {
		if !utf8.ValidString(c.Name) && t.err == nil {
			t.err = &ColumnError{Schema: t.Schema, Table: t.Name, Column: c.Name, Err: ErrNotUTF8}
		}
		ct, err := r.Type(c.TypeOID, c.TypeMod)
		if err != nil && t.err == nil {
			t.err = &ColumnError{Schema: t.Schema, Table: t.Name, Column: c.Name, Err: err}
		}
		t.EventColumns[i] = envelope.Column{Name: c.Name, Type: ct.Name, OID: c.TypeOID, Key: c.Key(), Enum: ct.Enum}
		if _, dup := t.index[c.Name]; dup && t.err == nil {
			// PostgreSQL never sends this; After could not tell them apart.
			t.err = &ColumnError{Schema: t.Schema, Table: t.Name, Column: c.Name,
				Err: fmt.Errorf("%w: duplicate column name", ErrMalformed)}
		}
		t.index[c.Name] = i
	}
	r.tables[t.ID] = t
	return t
}

// SetMissing records, by column name, the value each column has in rows
// written before it was added (PostgreSQL's attmissingval; see
// envelope.Column.Missing). Call it right after Put, before any change of
// the table is converted: the events share EventColumns.
func (t *Table) SetMissing(vals map[string]string) {
	for name, v := range vals {
		if i, ok := t.index[name]; ok {
			t.EventColumns[i].Missing = &v
		}
	}
}

// PutType records a Type message. pgoutput sends the Type messages of a
// relation before the Relation itself, so Put sees them.
func (r *Relations) PutType(t *Type) {
	r.types[t.OID] = *t
}

// Get returns the cached table with relation id id.
func (r *Relations) Get(id uint32) (*Table, bool) {
	t, ok := r.tables[id]
	return t, ok
}

// TypeName is Type's name.
func (r *Relations) TypeName(oid uint32, typmod int32) (string, error) {
	ct, err := r.Type(oid, typmod)
	return ct.Name, err
}

// Type names a column type, in this order:
//
//  1. a built-in type: TypeName(oid, typmod), PostgreSQL's exact spelling;
//  2. the TypeLookup: the catalogue, which resolves domains to their base
//     type with its modifier and says which types are enums;
//  3. without a lookup, a Type message for oid, when typmod is -1: the
//     schema-qualified, quoted type name ("public.mood", "public._mood"
//     for an array of it); a Type message in pg_catalog is a domain's base
//     type ("varchar" is named "character varying"). pgoutput sends a
//     domain's base type without the domain's modifier (a domain over
//     numeric(12,2) arrives as "numeric") and never says what an enum is,
//     which is why the catalogue comes first;
//
// and fails with an *UnknownTypeError otherwise. A user type with a
// modifier (typmod >= 0) needs the lookup: its typmodout function is unknown.
func (r *Relations) Type(oid uint32, typmod int32) (CatalogType, error) {
	if name, ok := TypeName(oid, typmod); ok {
		return CatalogType{Name: name}, nil
	}
	ty, haveType := r.types[oid]
	uerr := &UnknownTypeError{OID: oid, TypeMod: typmod, Namespace: ty.Namespace, Name: ty.Name}
	if r.lookup == nil {
		if !haveType || typmod >= 0 {
			return CatalogType{}, uerr
		}
		if ty.Namespace != "" {
			return CatalogType{Name: quoteIdent(ty.Namespace) + "." + quoteIdent(ty.Name)}, nil
		}
		if b := builtinByTypname[ty.Name]; b != nil {
			return CatalogType{Name: b.name}, nil
		}
		return CatalogType{Name: quoteIdent(ty.Name)}, nil
	}
	key := typeKey{oid, typmod}
	if ct, ok := r.looked[key]; ok {
		return ct, nil
	}
	ct, err := r.lookup(oid, typmod)
	if err == nil && ct.Name == "" {
		err = errEmptyLookup
	}
	if err != nil {
		uerr.Err = err
		return CatalogType{}, uerr
	}
	r.looked[key] = ct
	return ct, nil
}
