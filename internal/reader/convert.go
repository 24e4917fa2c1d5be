package reader

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary/tributary/internal/decode"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/tables"
)

// relationID returns the relation a row change refers to.
func relationID(m decode.Message) uint32 {
	switch m := m.(type) {
	case *decode.Insert:
		return m.RelationID
	case *decode.Update:
		return m.RelationID
	case *decode.Delete:
		return m.RelationID
	}
	return 0
}

// toEvent converts a row change into an envelope. It returns a nil table
// for relations that are not configured (the publication may hold more).
func (r *Reader) toEvent(m decode.Message) (*envelope.Event, *tables.Table, error) {
	rel, ok := r.rels.Get(relationID(m))
	if !ok {
		return nil, nil, fmt.Errorf("%w: %d (no Relation message before its change)", decode.ErrUnknownRelation, relationID(m))
	}
	t, ok := r.cfg.Tables.BySource(rel.Schema, rel.Name)
	if !ok {
		return nil, nil, nil
	}
	ev := &envelope.Event{}
	if err := rel.Change(m, t.Key(), ev); err != nil {
		return nil, nil, err
	}
	return ev, t, nil
}

// typeLookup resolves column types that are not built in (domains, enums,
// extension types) through the shard's catalogue, on a short-lived
// connection of its own (the stream goroutine must not share the
// monitor's). It runs once per (oid, typmod) per session.
func (r *Reader) typeLookup(oid uint32, typmod int32) (decode.CatalogType, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.cfg.DSN)
	if err != nil {
		return decode.CatalogType{}, fmt.Errorf("type lookup: %w", err)
	}
	defer conn.Close(ctx)
	return catalogType(ctx, conn, oid, typmod)
}

// catalogTypeSQL resolves a type the way the loader can map it: an array
// stands for its element type; a domain is replaced by its base type with
// the domain's modifier (typtypmod), repeatedly for a domain over a domain;
// and the result says whether that base type is an enum.
const catalogTypeSQL = `
WITH RECURSIVE top AS (
    SELECT CASE WHEN t.typcategory = 'A' AND t.typelem <> 0 THEN t.typelem ELSE t.oid END AS oid,
           t.typcategory = 'A' AND t.typelem <> 0 AS is_array
    FROM pg_type t WHERE t.oid = $1::oid
), d(oid, typmod, depth) AS (
    SELECT top.oid, $2::int4, 0 FROM top
    UNION ALL
    SELECT t.typbasetype, t.typtypmod, d.depth + 1
    FROM d JOIN pg_type t ON t.oid = d.oid
    WHERE t.typtype = 'd' AND d.depth < 64
)
SELECT format_type(d.oid, d.typmod) || CASE WHEN top.is_array THEN '[]' ELSE '' END,
       t.typtype = 'e'
FROM d JOIN pg_type t ON t.oid = d.oid CROSS JOIN top
ORDER BY d.depth DESC LIMIT 1`

// catalogType runs catalogTypeSQL.
func catalogType(ctx context.Context, conn querier, oid uint32, typmod int32) (decode.CatalogType, error) {
	rows, err := conn.Query(ctx, catalogTypeSQL, oid, typmod)
	if err != nil {
		return decode.CatalogType{}, fmt.Errorf("type lookup %d: %w", oid, err)
	}
	defer rows.Close()
	var ct decode.CatalogType
	found := false
	for rows.Next() {
		if err := rows.Scan(&ct.Name, &ct.Enum); err != nil {
			return decode.CatalogType{}, fmt.Errorf("type lookup %d: %w", oid, err)
		}
		found = true
	}
	if err := rows.Err(); err != nil {
		return decode.CatalogType{}, fmt.Errorf("type lookup %d: %w", oid, err)
	}
	if !found {
		return decode.CatalogType{}, fmt.Errorf("type lookup %d: no such type in pg_type", oid)
	}
	return ct, nil
}

// missingValues asks the shard's catalog which columns of a configured
// table have a value in rows written before the column was added
// (ADD COLUMN ... DEFAULT fills them without writing WAL: attmissingval),
// and puts it in the table's column list, so the loader can give those rows
// the value PostgreSQL shows. It runs once per Relation message (at a
// session's first change of the table and after each schema change), on a
// short-lived connection of its own. The catalog is read now, not as of the
// Relation's WAL position; the value only changes when the table is
// rewritten (then it is gone, and old rows hold the value in their tuples).
// A column the catalog no longer has under its name (renamed or dropped
// since the Relation was sent) keeps the value an earlier Relation of the
// table found for it in this session (mergeMissing).
func (r *Reader) missingValues(t *decode.Table) error {
	if _, ok := r.cfg.Tables.BySource(t.Schema, t.Name); !ok || t.Err() != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.cfg.DSN)
	if err != nil {
		return fmt.Errorf("missing values of %s.%s: %w", t.Schema, t.Name, err)
	}
	defer conn.Close(ctx)
	// attmissingval is a one-element array of the column's type; its text
	// read as text[] gives the element in the type's output format, the
	// format pgoutput sends values in.
	rows, err := conn.Query(ctx, `SELECT attname::text, CASE WHEN atthasmissing THEN (attmissingval::text::text[])[1] END
		FROM pg_attribute
		WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped`, t.ID)
	if err != nil {
		return fmt.Errorf("missing values of %s.%s: %w", t.Schema, t.Name, err)
	}
	catalog := map[string]*string{}
	for rows.Next() {
		var name string
		var v *string
		if err := rows.Scan(&name, &v); err != nil {
			return fmt.Errorf("missing values of %s.%s: %w", t.Schema, t.Name, err)
		}
		catalog[name] = v
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("missing values of %s.%s: %w", t.Schema, t.Name, err)
	}
	names := make([]string, len(t.EventColumns))
	for i, c := range t.EventColumns {
		names[i] = c.Name
	}
	if r.missing == nil {
		r.missing = map[uint32]map[string]string{}
	}
	vals := mergeMissing(names, catalog, r.missing[t.ID])
	r.missing[t.ID] = vals
	t.SetMissing(vals)
	return nil
}

// mergeMissing gives each of a Relation's columns its missing value: the
// catalog's (read now: every current column, nil when it has none), or,
// for a column the catalog has no more under that name, the one known
// from an earlier Relation of the table.
func mergeMissing(columns []string, catalog map[string]*string, known map[string]string) map[string]string {
	out := map[string]string{}
	for _, c := range columns {
		if v, ok := catalog[c]; ok {
			if v != nil {
				out[c] = *v
			}
		} else if v, ok := known[c]; ok {
			out[c] = v
		}
	}
	return out
}
