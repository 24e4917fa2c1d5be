// Package identity reads from a shard's catalogue which columns identify
// a source table's rows, and checks the table config against it. Both the
// reader (at start, before it publishes or streams anything) and preflight
// use it, so they refuse the same tables with the same words.
//
// A table's identity is its replica identity index under REPLICA IDENTITY
// USING INDEX, else its primary key: all of its columns. The pipeline
// identifies a row by the configured id column alone (ClickHouse sorts and
// replaces by it, the loader's versions and duplicate check key by it), so
// that column must be the whole identity, or a column of it with a unique
// index of its own. An id column that is only part of a composite key would
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
}

// ErrNoTable is returned by Read for a table the shard does not have.
var ErrNoTable = errors.New("table does not exist on this shard")

// Read reads the identity of schema.name from conn's catalogue, and what it
// says about idColumn.
func Read(ctx context.Context, conn *pgx.Conn, schema, name, idColumn string) (Key, error) {
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
