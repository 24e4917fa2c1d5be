package reader

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/tables"
)

// A table's column list and row filter (tables.Table.Columns,
// ExcludeColumns, RowFilter) go into the publication itself, so excluded
// columns and filtered-out rows never leave the shard. PostgreSQL 15 then
// sends an UPDATE that makes a row stop matching the filter as a DELETE,
// and one that makes it match as an INSERT, so the loader needs nothing
// of its own. The initial copy reads the same columns and rows
// (tableSelection).
//
// PostgreSQL refuses UPDATE and DELETE on a published table whose column
// list misses a replica identity column, or whose row filter reads a
// column outside the replica identity. Such a publication would break the
// application's writes, so the reader makes every publication change in
// one transaction with a probe of exactly that check (EXPLAIN UPDATE and
// EXPLAIN DELETE start the executor, which runs it, and touch no row nor
// fire any trigger), and rolls it all back with PostgreSQL's reason if the
// probe fails.

// pgQuerier is what the publication checks need of a connection or a
// transaction.
type pgQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// publishedColumns returns the columns of t that are replicated, in table
// order, or nil when all are (no column list). A listed column the table
// does not have is an error.
func publishedColumns(ctx context.Context, conn pgQuerier, t tables.Table) ([]string, error) {
	if !t.HasColumnList() {
		return nil, nil
	}
	rows, err := conn.Query(ctx, `SELECT a.attname::text FROM pg_attribute a
		WHERE a.attrelid = format('%I.%I', $1::text, $2::text)::regclass AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY a.attnum`, t.Schema, t.Name)
	if err != nil {
		return nil, fmt.Errorf("columns of %s.%s: %w", t.Schema, t.Name, err)
	}
	all, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("columns of %s.%s: %w", t.Schema, t.Name, err)
	}
	var unknown []string
	for _, c := range append(slices.Clone(t.Columns), t.ExcludeColumns...) {
		if !slices.Contains(all, c) {
			unknown = append(unknown, c)
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("table %s.%s has no columns %v (named in its columns or exclude_columns)", t.Schema, t.Name, unknown)
	}
	var out []string
	for _, c := range all {
		if t.Replicates(c) {
			out = append(out, c)
		}
	}
	return out, nil
}

// tableSpec is t as a publication names it: `"s"."t" ("a", "b") WHERE (f)`.
func tableSpec(t tables.Table, cols []string) string {
	spec := pgx.Identifier{t.Schema, t.Name}.Sanitize()
	if cols != nil {
		q := make([]string, len(cols))
		for i, c := range cols {
			q[i] = pgx.Identifier{c}.Sanitize()
		}
		spec += " (" + strings.Join(q, ", ") + ")"
	}
	if t.RowFilter != "" {
		spec += " WHERE (" + t.RowFilter + ")"
	}
	return spec
}

// publishedAs is how a publication publishes one table.
type publishedAs struct {
	columns []string
	filter  *string
}

// readPublished reads how publication pub publishes t (ok false: not at all).
func readPublished(ctx context.Context, conn pgQuerier, pub string, t tables.Table) (publishedAs, bool, error) {
	var p publishedAs
	err := conn.QueryRow(ctx, `SELECT attnames::text[], rowfilter FROM pg_publication_tables
		WHERE pubname = $1 AND schemaname = $2 AND tablename = $3`, pub, t.Schema, t.Name).Scan(&p.columns, &p.filter)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, false, nil
	}
	if err != nil {
		return p, false, fmt.Errorf("check publication %s for %s.%s: %w", pub, t.Schema, t.Name, err)
	}
	return p, true, nil
}

// wantPublished is how a publication made from spec publishes t, in
// PostgreSQL's own normal form: a scratch publication created and rolled
// back in a savepoint.
func wantPublished(ctx context.Context, tx pgx.Tx, t tables.Table, spec string) (publishedAs, error) {
	const scratch = "tributary_scratch_publication"
	if _, err := tx.Exec(ctx, "SAVEPOINT tributary_scratch"); err != nil {
		return publishedAs{}, fmt.Errorf("check publication of %s.%s: %w", t.Schema, t.Name, err)
	}
	defer tx.Exec(ctx, "ROLLBACK TO SAVEPOINT tributary_scratch") //nolint:errcheck // the transaction fails anyway
	if _, err := tx.Exec(ctx, "CREATE PUBLICATION "+scratch+" FOR TABLE "+spec); err != nil {
		return publishedAs{}, fmt.Errorf("table %s.%s: columns or row_filter rejected by PostgreSQL (FOR TABLE %s): %w", t.Schema, t.Name, spec, err)
	}
	p, _, err := readPublished(ctx, tx, scratch, t)
	return p, err
}

// ErrBreaksWrites is returned when a column list or row filter would make
// PostgreSQL refuse UPDATE or DELETE on the source table.
var ErrBreaksWrites = errors.New("the publication would break UPDATE or DELETE on the source")

// probeWrites fails when PostgreSQL would refuse UPDATE or DELETE on t as
// published now (in tx): the replica identity check runs when the executor
// starts, which EXPLAIN does without touching a row.
func probeWrites(ctx context.Context, tx pgx.Tx, t tables.Table) error {
	if !t.HasColumnList() && t.RowFilter == "" {
		return nil // checkTables covers a table published whole
	}
	name := pgx.Identifier{t.Schema, t.Name}.Sanitize()
	id := pgx.Identifier{t.Key()[0]}.Sanitize()
	for _, q := range []string{
		// DEFAULT: an identity or generated column can be set to nothing else.
		"EXPLAIN UPDATE " + name + " SET " + id + " = DEFAULT WHERE false",
		"EXPLAIN DELETE FROM " + name + " WHERE false",
	} {
		if _, err := tx.Exec(ctx, q); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "42501" {
				return nil // no UPDATE/DELETE privilege: PostgreSQL checks it at the application's writes
			}
			detail := ""
			if errors.As(err, &pe) && pe.Detail != "" {
				detail = " (" + pe.Detail + ")"
			}
			return fmt.Errorf("%w: %s.%s: %v%s: keep the replica identity columns in columns (not in exclude_columns), and use only them in row_filter, or change the table's replica identity",
				ErrBreaksWrites, t.Schema, t.Name, err, detail)
		}
	}
	return nil
}

// selection is what the copy of a table reads: from is the SELECT of the
// replicated columns (all: *), filter the row filter (or "").
type selection struct {
	from, filter string
}

// tableSelection is the selection of t with columns cols (as the copy
// describes them).
func tableSelection(t tables.Table, cols []envelope.Column) selection {
	sel := selection{from: "SELECT * FROM " + pgx.Identifier{t.Schema, t.Name}.Sanitize()}
	if t.HasColumnList() {
		q := make([]string, len(cols))
		for i, c := range cols {
			q[i] = pgx.Identifier{c.Name}.Sanitize()
		}
		sel.from = "SELECT " + strings.Join(q, ", ") + " FROM " + pgx.Identifier{t.Schema, t.Name}.Sanitize()
	}
	if t.RowFilter != "" {
		sel.filter = "(" + t.RowFilter + ")"
	}
	return sel
}
