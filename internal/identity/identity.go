// Package identity reads from a shard's catalogue which columns identify
// a source table's rows, and checks the table config against it. Both the
// reader (at start, before it publishes or streams anything) and preflight
// use it, so they refuse the same tables with the same words.
//
// A table's identity is its replica identity index under REPLICA IDENTITY
// USING INDEX, else its primary key: all of its columns. The pipeline
// identifies a row by the configured id columns (ClickHouse sorts and
// replaces by them, the loader's versions and duplicate check key by
// them), so they must be the whole identity: one column (the key's only
// column, or a column with a unique index of its own), or every column of
// the key in index order (id_columns, see CheckColumns). An id column that is only part of a composite key would
// merge the rows that share it — silently — and is refused. A partitioned table's keys must include its partition key
// columns, so there the id column together with partition key columns is
// its whole key. A table without a key under REPLICA IDENTITY FULL is
// allowed: the config's id column is then the operator's claim, and only
// its nullability can be checked.
package identity

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Key is what a shard's catalogue says identifies one table's rows.
type Key struct {
	// Schema and Name name the table.
	Schema, Name string
	// Replident is pg_class.relreplident: 'd' (default: the primary key),
	// 'n' (nothing), 'f' (full) or 'i' (a chosen index).
	Replident byte
	// Index names the index whose columns identify a row (the replica
	// identity index, or the primary key); "" when the table has none.
	Index string
	// Primary says Index is the primary key.
	Primary bool
	// Columns are Index's columns in index order; empty without Index.
	Columns []string
	// PartitionColumns, of a partitioned table or a partition, are the
	// columns of the partition keys of every partitioned table of its tree:
	// PostgreSQL makes every unique key of a partitioned table include
	// them, so an id column can be a partitioned table's whole key only
	// together with them.
	PartitionColumns []string
	// IDColumn is the configured id column; IDExists and IDNullable say
	// whether the table has it and whether it may hold NULL, IDUnique
	// whether a unique index (not partial, not on an expression) has it
	// as its only key column.
	IDColumn   string
	IDExists   bool
	IDNullable bool
	IDUnique   bool
	// IDColumns are the configured id columns when there are several
	// (id_columns), and Facts what the catalogue says about each, in the
	// same order; both empty for one id column.
	IDColumns []string
	Facts     []Column
}

// Column is what the catalogue says about one configured id column.
type Column struct {
	Name     string
	Exists   bool
	Nullable bool
	// Type is format_type of the column's type, of a domain's base type.
	Type string
}

// ErrNoTable is returned by Read for a table the shard does not have.
var ErrNoTable = errors.New("table does not exist on this shard")

// Read reads the identity of schema.name from conn's catalogue, and what it
// says about the configured id columns (tables.Table.Key).
func Read(ctx context.Context, conn *pgx.Conn, schema, name string, idColumns []string) (Key, error) {
	if len(idColumns) == 0 {
		return Key{}, fmt.Errorf("read the identity of %s.%s: no id column configured", schema, name)
	}
	k, err := read(ctx, conn, schema, name, idColumns[0])
	if err != nil || len(idColumns) == 1 {
		return k, err
	}
	k.IDColumns = idColumns
	rows, err := conn.Query(ctx, `
		SELECT want.name, a.attnum IS NOT NULL, COALESCE(NOT a.attnotnull, false),
		       COALESCE(CASE WHEN t.typtype = 'd' THEN format_type(t.typbasetype, t.typtypmod) ELSE format_type(a.atttypid, a.atttypmod) END, '')
		FROM unnest($3::text[]) WITH ORDINALITY want(name, ord)
		JOIN pg_class c ON c.relname = $2
		JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = $1
		LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = want.name AND a.attnum > 0 AND NOT a.attisdropped
		LEFT JOIN pg_type t ON t.oid = a.atttypid
		WHERE c.relkind IN ('r', 'p')
		ORDER BY want.ord`, schema, name, idColumns)
	if err != nil {
		return k, fmt.Errorf("read the id columns of %s: %w", k.table(), err)
	}
	defer rows.Close()
	for rows.Next() {
		var c Column
		if err := rows.Scan(&c.Name, &c.Exists, &c.Nullable, &c.Type); err != nil {
			return k, fmt.Errorf("read the id columns of %s: %w", k.table(), err)
		}
		k.Facts = append(k.Facts, c)
	}
	if err := rows.Err(); err != nil {
		return k, fmt.Errorf("read the id columns of %s: %w", k.table(), err)
	}
	return k, nil
}

// read reads the identity of schema.name and what it says about one id
// column.
func read(ctx context.Context, conn *pgx.Conn, schema, name, idColumn string) (Key, error) {
	k := Key{Schema: schema, Name: name, IDColumn: idColumn}
	var ident string
	err := conn.QueryRow(ctx, `
		SELECT c.relreplident::text, COALESCE(ix.name, ''), COALESCE(ix.indisprimary, false), COALESCE(ix.cols, '{}'),
		       a.attnum IS NOT NULL, COALESCE(NOT a.attnotnull, false),
		       EXISTS (SELECT 1 FROM pg_index u WHERE u.indrelid = c.oid AND u.indisunique AND u.indpred IS NULL
		               AND u.indnkeyatts = 1 AND u.indkey[0] = a.attnum),
		       CASE WHEN c.relkind = 'p' OR c.relispartition THEN ARRAY(
		           SELECT DISTINCT pa.attname::text
		           FROM pg_partition_tree(pg_partition_root(c.oid)) pt
		           JOIN pg_partitioned_table p ON p.partrelid = pt.relid
		           JOIN LATERAL unnest(p.partattrs::int2[]) k(attnum) ON true
		           JOIN pg_attribute pa ON pa.attrelid = pt.relid AND pa.attnum = k.attnum
		           ORDER BY 1) ELSE '{}' END
		FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = $3 AND a.attnum > 0 AND NOT a.attisdropped
		LEFT JOIN LATERAL (
		    SELECT ic.relname::text AS name, i.indisprimary,
		           ARRAY(SELECT ka.attname::text
		                 FROM unnest(i.indkey::int2[]) WITH ORDINALITY k(attnum, ord)
		                 JOIN pg_attribute ka ON ka.attrelid = c.oid AND ka.attnum = k.attnum
		                 ORDER BY k.ord) AS cols
		    FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
		    WHERE i.indrelid = c.oid
		      AND CASE WHEN c.relreplident = 'i' THEN i.indisreplident ELSE i.indisprimary END
		    LIMIT 1) ix ON true
		WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`,
		schema, name, idColumn).Scan(&ident, &k.Index, &k.Primary, &k.Columns, &k.IDExists, &k.IDNullable, &k.IDUnique, &k.PartitionColumns)
	if errors.Is(err, pgx.ErrNoRows) {
		return k, fmt.Errorf("%w: %s", ErrNoTable, k.table())
	}
	if err != nil {
		return k, fmt.Errorf("read the identity of %s: %w", k.table(), err)
	}
	if len(ident) == 1 {
		k.Replident = ident[0]
	}
	return k, nil
}

// Problem is why a table's identity is unusable for its config.
type Problem struct {
	// Field is the table config field to change ("id_column"), or "" when
	// the fix is on the shard.
	Field string
	// Reason says what is wrong and how to fix it.
	Reason string
}

func (p *Problem) Error() string { return p.Reason }

// Check says whether the pipeline can identify k's rows by its id column:
// nil, or a *Problem naming the fix. The id column must be carried by
// deletes (be in the replica identity, or the identity is FULL), never be
// NULL, and be unique on its own: the whole key, or a column with a unique
// index of its own (say the primary key, beside a wider replica identity
// index that a row filter needs).
func (k Key) Check() error {
	q := pgx.Identifier{k.Schema, k.Name}.Sanitize()
	switch {
	case k.Replident == 'n' || (k.Index == "" && k.Replident != 'f'):
		return &Problem{Reason: fmt.Sprintf("no usable replica identity: once published, UPDATE and DELETE on it fail at the source (add a primary key, or ALTER TABLE %s REPLICA IDENTITY FULL)", q)}
	case len(k.IDColumns) > 1:
		return k.checkColumns()
	case !k.IDExists:
		return &Problem{Field: "id_column", Reason: fmt.Sprintf("column %s does not exist in %s", k.IDColumn, k.table())}
	case k.IDNullable:
		return &Problem{Field: "id_column", Reason: fmt.Sprintf("column %s may be NULL, and a row without an id cannot be told apart from another (ALTER TABLE %s ALTER COLUMN %s SET NOT NULL)",
			k.IDColumn, q, pgx.Identifier{k.IDColumn}.Sanitize())}
	case k.Index == "":
		// REPLICA IDENTITY FULL without a key: the id column is the
		// operator's claim.
		return nil
	}
	what := "the replica identity index " + k.Index
	if k.Primary {
		what = "the primary key " + k.Index
	}
	if len(k.PartitionColumns) > 0 {
		what += ", beyond the partition key columns " + strings.Join(k.PartitionColumns, ", ")
	}
	key := "(" + strings.Join(k.Columns, ", ") + ")"
	fix := fmt.Sprintf("a row is identified by one column: give the table a NOT NULL column that is unique on its own, CREATE UNIQUE INDEX on it, ALTER TABLE %s REPLICA IDENTITY USING INDEX that index, and name the column in id_column", q)
	if len(k.Columns) > 1 {
		fix += fmt.Sprintf(`; or identify rows by the whole key: "id_columns": %s, "id_layout": "key"`, jsonList(k.Columns))
	}
	inKey := slices.Contains(k.Columns, k.IDColumn)
	switch {
	case !inKey && k.Replident != 'f':
		return &Problem{Field: "id_column", Reason: fmt.Sprintf("column %s is not in the replica identity %s (%s), so deletes would not say which row went; %s",
			k.IDColumn, key, what, fix)}
	case k.wholeKey() || k.IDUnique:
		return nil
	case inKey:
		return &Problem{Field: "id_column", Reason: fmt.Sprintf("column %s is part of the key %s (%s) and not unique on its own: rows that share %s but differ in the rest of the key would become one row in ClickHouse; %s",
			k.IDColumn, key, what, k.IDColumn, fix)}
	}
	return &Problem{Field: "id_column", Reason: fmt.Sprintf("column %s is not the key %s (%s) and not unique on its own: rows that share %s would become one row in ClickHouse; %s",
		k.IDColumn, key, what, k.IDColumn, fix)}
}

// KeyTypes are the PostgreSQL types a column of a key of several columns
// may have: those whose ClickHouse toString is their PostgreSQL text
// output, so that key texts built from either side are equal (lookups,
// the verifier). A character varying(n) counts as character varying.
var KeyTypes = []string{"smallint", "integer", "bigint", "uuid", "text", "character varying"}

// checkColumns is Check for several id columns: each exists, is NOT NULL
// and of one of KeyTypes, and together they are the key's columns in index
// order (so the key text is the same on every shard). Under REPLICA
// IDENTITY FULL without a key the list is the operator's claim.
func (k Key) checkColumns() error {
	q := pgx.Identifier{k.Schema, k.Name}.Sanitize()
	for _, c := range k.Facts {
		typ, _, _ := strings.Cut(c.Type, "(")
		switch {
		case !c.Exists:
			return &Problem{Field: "id_columns", Reason: fmt.Sprintf("column %s does not exist in %s", c.Name, k.table())}
		case c.Nullable:
			return &Problem{Field: "id_columns", Reason: fmt.Sprintf("key column %s may be NULL, and a row whose key has a NULL cannot be told apart from another (ALTER TABLE %s ALTER COLUMN %s SET NOT NULL)",
				c.Name, q, pgx.Identifier{c.Name}.Sanitize())}
		case !slices.Contains(KeyTypes, typ):
			return &Problem{Field: "id_columns", Reason: fmt.Sprintf("key column %s has type %s; a key of several columns takes only %s columns (their text is the same in PostgreSQL and ClickHouse, which lookups and the verifier compare); identify rows by one column instead (id_column)",
				c.Name, c.Type, strings.Join(KeyTypes, ", "))}
		}
	}
	if len(k.Facts) != len(k.IDColumns) {
		return &Problem{Field: "id_columns", Reason: fmt.Sprintf("read %d of the %d id columns of %s", len(k.Facts), len(k.IDColumns), k.table())}
	}
	if k.Index == "" || slices.Equal(k.IDColumns, k.Columns) {
		return nil
	}
	what := "the replica identity index " + k.Index
	if k.Primary {
		what = "the primary key " + k.Index
	}
	sorted, want := slices.Sorted(slices.Values(k.IDColumns)), slices.Sorted(slices.Values(k.Columns))
	if slices.Equal(sorted, want) {
		return &Problem{Field: "id_columns", Reason: fmt.Sprintf("id_columns %s name the key's columns out of order: %s orders them %s, and the key text follows the index (set \"id_columns\": %s)",
			jsonList(k.IDColumns), what, jsonList(k.Columns), jsonList(k.Columns))}
	}
	return &Problem{Field: "id_columns", Reason: fmt.Sprintf("id_columns %s are not the key of %s: %s is %s, and a row is identified by all of it, in index order (set \"id_columns\": %s)",
		jsonList(k.IDColumns), k.table(), what, jsonList(k.Columns), jsonList(k.Columns))}
}

// jsonList writes names as a JSON list, as the table config holds them.
func jsonList(names []string) string {
	return `["` + strings.Join(names, `", "`) + `"]`
}

// wholeKey says whether the id column is the whole key: the key's one
// column or, of a partitioned table, its one column besides partition key
// columns. The latter is the operator's claim that ids are unique across
// partitions, which PostgreSQL cannot enforce on a partitioned table; a
// row that moves to another partition keeps its id and stays one row.
func (k Key) wholeKey() bool {
	if !slices.Contains(k.Columns, k.IDColumn) {
		return false
	}
	for _, c := range k.Columns {
		if c != k.IDColumn && !slices.Contains(k.PartitionColumns, c) {
			return false
		}
	}
	return true
}

// table is the schema-qualified name, for messages.
func (k Key) table() string { return k.Schema + "." + k.Name }
