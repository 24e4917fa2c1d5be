package reader

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tributary/tributary/internal/tables"
)

// Partitioned tables are configured by their root (the table declared
// PARTITION BY). The publication publishes them with
// publish_via_partition_root = true, so every change of any partition,
// including one that moves a row between partitions, arrives under the
// root's name and relation id, and the initial copy reads the root (all its
// partitions) like any other table.
//
// PostgreSQL does not publish through the root what happens to one
// partition as a whole: a TRUNCATE of a partition, DETACH PARTITION and
// DROP of a partition send nothing. leaf.go turns each into a truncate
// scoped to that partition's bound (schema/postgres/20_partitions.sql
// emits a message for them in the same transaction).

// ErrPartition is returned at start-up for a configuration that names a
// partition instead of its partitioned root, or a publication that would
// publish a partitioned table's changes under its partitions' names.
var ErrPartition = errors.New("partitioned table")

// checkPartitions refuses configured tables that are partitions (the root
// must be named) and returns the configured tables that are partitioned
// roots, by index in cfg.Tables.
func checkPartitions(ctx context.Context, conn *pgx.Conn, cfg *tables.Config) (map[int]bool, error) {
	roots := map[int]bool{}
	var errs []error
	for i, t := range cfg.Tables {
		var kind string
		var root *string
		err := conn.QueryRow(ctx, `
			SELECT c.relkind::text,
			       CASE WHEN c.relispartition THEN (SELECT format('%I.%I', rn.nspname, rc.relname) FROM pg_partition_ancestors(c.oid) r
			                                        JOIN pg_class rc ON rc.oid = r.relid JOIN pg_namespace rn ON rn.oid = rc.relnamespace
			                                        WHERE NOT rc.relispartition) END
			FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname = $2`, t.Schema, t.Name).Scan(&kind, &root)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // checkTables reports it
		}
		if err != nil {
			return nil, fmt.Errorf("check partitioning of %s.%s: %w", t.Schema, t.Name, err)
		}
		if root != nil {
			errs = append(errs, fmt.Errorf("%w: %s.%s is a partition of %s: name the partitioned table %s in the table config instead (its changes, and every other partition's, arrive under it)",
				ErrPartition, t.Schema, t.Name, *root, *root))
			continue
		}
		if kind == "p" {
			roots[i] = true
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return roots, nil
}

// checkLeafIdentity verifies that every partition of a partitioned root has
// a replica identity: PostgreSQL checks each partition's own, and refuses
// UPDATE and DELETE on a published partition that has none.
func checkLeafIdentity(ctx context.Context, conn *pgx.Conn, t tables.Table) error {
	rows, err := conn.Query(ctx, `
		SELECT p.relid::regclass::text
		FROM pg_partition_tree(format('%I.%I', $1::text, $2::text)::regclass) p
		JOIN pg_class c ON c.oid = p.relid
		WHERE p.isleaf AND (c.relreplident = 'n'
		      OR (c.relreplident = 'd' AND NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary))
		      OR (c.relreplident = 'i' AND NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisreplident)))`,
		t.Schema, t.Name)
	if err != nil {
		return fmt.Errorf("check partitions of %s.%s: %w", t.Schema, t.Name, err)
	}
	bad, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("check partitions of %s.%s: %w", t.Schema, t.Name, err)
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: partitions %v of %s.%s have none (add the primary key on the partitioned table, or ALTER TABLE <partition> REPLICA IDENTITY FULL on each)",
			ErrReplicaIdentity, bad, t.Schema, t.Name)
	}
	return nil
}

// checkViaRoot refuses an existing publication that publishes partitioned
// tables under their partitions' names: their changes would arrive under
// relations no configured table names and be skipped.
func checkViaRoot(ctx context.Context, conn pgQuerier, pub string) error {
	var viaRoot bool
	if err := conn.QueryRow(ctx, "SELECT pubviaroot FROM pg_publication WHERE pubname = $1", pub).Scan(&viaRoot); err != nil {
		return fmt.Errorf("check publication %s: %w", pub, err)
	}
	if !viaRoot {
		return fmt.Errorf("%w: publication %s publishes partitioned tables under their partitions' names, so their changes would be skipped: run ALTER PUBLICATION %s SET (publish_via_partition_root = true)",
			ErrPartition, pub, pgx.Identifier{pub}.Sanitize())
	}
	return nil
}

// checkPartitionKeys refuses partitioning whose bounds the loader cannot
// match against stored rows exactly (internal/loader/partition.go), so that
// a partition truncated, detached or dropped later cannot stop the table:
// a key that is an expression, hash partitioning other than on one bigint,
// integer, smallint or uuid column, and range partitioning on a text
// column in a collation other than C (the loader compares text byte-wise).
func checkPartitionKeys(ctx context.Context, conn *pgx.Conn, t tables.Table) error {
	rows, err := conn.Query(ctx, `
		SELECT pt.partrelid::regclass::text, pt.partstrat::text, k.attnum::int,
		       coalesce(format_type(a.atttypid, a.atttypmod), ''),
		       coalesce((SELECT collname FROM pg_collation WHERE oid = coalesce(nullif(pt.partcollation[k.ord - 1], 0), a.attcollation)), ''),
		       array_length(pt.partattrs::int2[], 1)
		FROM pg_partition_tree(format('%I.%I', $1::text, $2::text)::regclass) p
		JOIN pg_partitioned_table pt ON pt.partrelid = p.relid
		CROSS JOIN LATERAL unnest(pt.partattrs::int2[]) WITH ORDINALITY k(attnum, ord)
		LEFT JOIN pg_attribute a ON a.attrelid = pt.partrelid AND a.attnum = k.attnum`, t.Schema, t.Name)
	if err != nil {
		return fmt.Errorf("check partition keys of %s.%s: %w", t.Schema, t.Name, err)
	}
	defer rows.Close()
	var errs []error
	for rows.Next() {
		var rel, strat, typ, coll string
		var attnum, ncols int
		if err := rows.Scan(&rel, &strat, &attnum, &typ, &coll, &ncols); err != nil {
			return fmt.Errorf("check partition keys of %s.%s: %w", t.Schema, t.Name, err)
		}
		switch {
		case attnum == 0:
			errs = append(errs, fmt.Errorf("%w: %s is partitioned by an expression: partition it by columns, so that the rows of a partition truncated, detached or dropped can be told from the stored rows", ErrPartition, rel))
		case strat == "h" && (ncols != 1 || !slices.Contains([]string{"smallint", "integer", "bigint", "uuid"}, typ)):
			errs = append(errs, fmt.Errorf("%w: %s is hash-partitioned on %d column(s) of type %s: only hash partitioning on one bigint, integer, smallint or uuid column is supported", ErrPartition, rel, ncols, typ))
		case (strat == "r" || strat == "l") && !matchable(typ, strat):
			errs = append(errs, fmt.Errorf("%w: %s is partitioned by %s on a %s column: supported are integer, numeric, date, timestamp, uuid and text columns (and boolean for list partitioning)", ErrPartition, rel, map[string]string{"r": "range", "l": "list"}[strat], typ))
		case strat == "r" && isText(typ) && coll != "C" && coll != "POSIX":
			errs = append(errs, fmt.Errorf("%w: %s is range-partitioned on a %s column in collation %q: text ranges are supported in collation C only (the rows of a partition are matched byte-wise)", ErrPartition, rel, typ, coll))
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("check partition keys of %s.%s: %w", t.Schema, t.Name, err)
	}
	// ClickHouse keeps timestamps in whole seconds: a range bound with a
	// fraction of one cannot be matched against stored rows.
	var fractional []string
	frows, err := conn.Query(ctx, `SELECT p.relid::regclass::text
		FROM pg_partition_tree(format('%I.%I', $1::text, $2::text)::regclass) p
		JOIN pg_class c ON c.oid = p.relid
		JOIN pg_partitioned_table pt ON pt.partrelid = p.parentrelid AND pt.partstrat = 'r'
		WHERE p.level > 0 AND pg_get_expr(c.relpartbound, c.oid) ~ '[0-9]:[0-9]{2}\.[0-9]'`, t.Schema, t.Name)
	if err != nil {
		return fmt.Errorf("check partition bounds of %s.%s: %w", t.Schema, t.Name, err)
	}
	if fractional, err = pgx.CollectRows(frows, pgx.RowTo[string]); err != nil {
		return fmt.Errorf("check partition bounds of %s.%s: %w", t.Schema, t.Name, err)
	}
	if len(fractional) > 0 {
		errs = append(errs, fmt.Errorf("%w: partitions %v of %s.%s have range bounds with a fraction of a second, which ClickHouse (whole seconds) cannot tell apart: use bounds in whole seconds",
			ErrPartition, fractional, t.Schema, t.Name))
	}
	return errors.Join(errs...)
}

// matchable says whether the loader compares values of PostgreSQL type typ
// as PostgreSQL orders (range) or equates (list) them.
func matchable(typ, strategy string) bool {
	base := typ
	if i := strings.IndexByte(base, '('); i >= 0 {
		base = base[:i]
	}
	switch base {
	case "smallint", "integer", "bigint", "numeric", "date", "timestamp with time zone", "timestamp without time zone", "uuid":
		return true
	case "boolean":
		return strategy == "l"
	}
	return isText(base)
}

func isText(typ string) bool {
	return typ == "text" || strings.HasPrefix(typ, "character") || typ == "citext"
}
