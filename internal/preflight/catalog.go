package preflight

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/identity"
	"github.com/tributary/tributary/internal/tables"
)

// server checks what logical replication needs of the server and of the
// role; false when nothing further can be checked.
func (c *shardCheck) server(ctx context.Context) bool {
	var wal string
	var replication, heartbeat bool
	var freeSlots, freeSenders int
	ok := c.query(ctx, "read the server settings", `
		SELECT current_setting('wal_level'), current_user,
		       (SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user),
		       current_setting('max_replication_slots')::int - (SELECT count(*) FROM pg_replication_slots)
		         + (SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1)::int,
		       current_setting('max_wal_senders')::int - (SELECT count(*) FROM pg_stat_replication),
		       has_function_privilege('pg_logical_emit_message(boolean,text,text)', 'EXECUTE')`,
		[]any{fmt.Sprintf("tributary_shard_%d", c.shard.Number)}, &wal, &c.role, &replication, &freeSlots, &freeSenders, &heartbeat)
	if !ok {
		return false
	}
	if wal != "logical" {
		c.add("", "", "wal_level is %s; logical replication needs wal_level = logical (postgresql.conf, then restart)", wal)
	}
	if !replication {
		c.add("", "", "role %s has no REPLICATION attribute: it cannot create or read a replication slot (ALTER ROLE %s REPLICATION)",
			c.role, pgx.Identifier{c.role}.Sanitize())
	}
	if freeSlots < 1 { // the reader's own slot (cdc-reader's default name) counts as free
		c.add("", "", "no free replication slot (max_replication_slots is used up): raise it, or drop an unused slot")
	}
	if freeSenders < 1 {
		c.add("", "", "no free WAL sender (max_wal_senders is used up): raise it")
	}
	if !heartbeat {
		c.add("", "", "role %s may not call pg_logical_emit_message: the reader's heartbeats fail, and an idle shard retains WAL (GRANT EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text) TO %s, or --heartbeat-interval 0)",
			c.role, pgx.Identifier{c.role}.Sanitize())
	}
	return true
}

// table is what the catalog says about one configured table.
type table struct {
	oid      uint32
	name     string // schema-qualified, for messages
	columns  map[string]column
	readable bool // the role may SELECT it
	// partitioned: a partitioned table's root (declared PARTITION BY).
	partitioned bool
}

// column is one column: its type as format_type prints it (of the base
// type, for a domain) and whether that is an enum.
type column struct {
	typ  string
	enum bool
}

// columnsSQL reads a table's columns as the reader resolves their types
// (internal/reader/convert.go, catalogTypeSQL), so that the check agrees
// with what the loader will be sent: an array stands for its element
// type; a domain is replaced by its base type with the domain's modifier,
// repeatedly for a domain over a domain; and the result says whether that
// base type is an enum.
const columnsSQL = `
WITH RECURSIVE cols(attnum, attname, oid, typmod, is_array, depth) AS (
    SELECT a.attnum, a.attname,
           CASE WHEN t.typcategory = 'A' AND t.typelem <> 0 THEN t.typelem ELSE t.oid END,
           a.atttypmod, t.typcategory = 'A' AND t.typelem <> 0, 0
    FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
    WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
    UNION ALL
    SELECT c.attnum, c.attname, t.typbasetype, t.typtypmod, c.is_array, c.depth + 1
    FROM cols c JOIN pg_type t ON t.oid = c.oid
    WHERE t.typtype = 'd' AND c.depth < 64
)
SELECT DISTINCT ON (c.attnum) c.attname::text,
       format_type(c.oid, c.typmod) || CASE WHEN c.is_array THEN '[]' ELSE '' END,
       t.typtype = 'e'
FROM cols c JOIN pg_type t ON t.oid = c.oid
ORDER BY c.attnum, c.depth DESC`

// table checks t: it exists, the role may read it, its columns map, its
// id column is its whole identity. ok is false when it does not exist.
func (c *shardCheck) table(ctx context.Context, t *tables.Table) (*table, bool) {
	tab := &table{name: t.Schema + "." + t.Name, columns: map[string]column{}}
	var schemaUsage bool
	var root *string
	err := c.conn.QueryRow(ctx, `
		SELECT c.oid, has_schema_privilege(n.oid, 'USAGE'), has_table_privilege(c.oid, 'SELECT'), c.relkind = 'p',
		       CASE WHEN c.relispartition THEN pg_partition_root(c.oid)::regclass::text END
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`, t.Schema, t.Name).
		Scan(&tab.oid, &schemaUsage, &tab.readable, &tab.partitioned, &root)
	if errors.Is(err, pgx.ErrNoRows) {
		c.add(t.Name, "", "table %s does not exist on this shard (check schema and name in the table config)", tab.name)
		return nil, false
	}
	if err != nil {
		c.add(t.Name, "", "read the catalog: %v", err)
		return nil, false
	}
	if root != nil {
		// As the reader refuses it (internal/reader/partitions.go).
		c.add(t.Name, "", "%s is a partition of %s: name the partitioned table %s in the table config instead (its changes, and every other partition's, arrive under it)",
			tab.name, *root, *root)
	}
	if !schemaUsage {
		c.add(t.Name, "schema", "role %s has no USAGE on schema %s (GRANT USAGE ON SCHEMA %s TO %s)", c.role, t.Schema,
			pgx.Identifier{t.Schema}.Sanitize(), pgx.Identifier{c.role}.Sanitize())
	}
	if !tab.readable {
		c.add(t.Name, "", "role %s may not SELECT %s: the initial copy reads it (GRANT SELECT ON %s TO %s)", c.role, tab.name,
			pgx.Identifier{t.Schema, t.Name}.Sanitize(), pgx.Identifier{c.role}.Sanitize())
	}
	rows, err := c.conn.Query(ctx, columnsSQL, tab.oid)
	if err != nil {
		c.add(t.Name, "", "read the columns: %v", err)
		return tab, true
	}
	for rows.Next() {
		var name, typ string
		var enum bool
		if err := rows.Scan(&name, &typ, &enum); err != nil {
			c.add(t.Name, "", "read the columns: %v", err)
			break
		}
		col := column{typ: typ, enum: enum}
		chosen := t.ColumnTypes[name]
		switch err := chstore.CheckColumn(t.Name, envelope.Column{Name: name, Type: typ, Enum: enum}, chosen); {
		case err == nil:
			if p, s, ok := chstore.ParseDecimalType(chosen); ok {
				// Stored as that decimal: a revenue amount, say, may be an
				// unconstrained numeric given one.
				col.typ = fmt.Sprintf("numeric(%d,%d)", p, s)
			}
		case chosen != "":
			c.add(t.Name, "column_types", "%v", err)
		default:
			c.add(t.Name, "", "column %s: %v: the loader would stop this table (store its PostgreSQL text with \"column_types\": {%q: \"String\"} on this table, change the column's type, or leave the table out)",
				name, chstore.CheckType(typ), name)
		}
		tab.columns[name] = col
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		c.add(t.Name, "", "read the columns: %v", err)
	}
	if t.Composite() {
		// identity.Key.Check says more (nullability, types, order).
		for _, id := range t.Key() {
			c.requireColumn(t.Name, tab, "id_columns", id, nil)
		}
	} else {
		c.requireColumn(t.Name, tab, "id_column", t.IDColumn, idKinds(t.IDLayout))
	}
	if t.ShardKey != "" {
		c.requireColumn(t.Name, tab, "shard_key", t.ShardKey, nil)
	}
	c.replicaIdentity(ctx, t)
	return tab, true
}

// replicaIdentity checks, as the reader does at start, that the id column
// is the table's whole identity (see internal/identity).
func (c *shardCheck) replicaIdentity(ctx context.Context, t *tables.Table) {
	key, err := identity.Read(ctx, c.conn, t.Schema, t.Name, t.Key())
	if err != nil {
		c.add(t.Name, "", "read the replica identity: %v", err)
		return
	}
	var p *identity.Problem
	switch err := key.Check(); {
	case errors.As(err, &p) && (p.Field == "id_column" && !key.IDExists || p.Field == "id_columns" && strings.Contains(p.Reason, "does not exist")):
		// requireColumn has said so already.
	case errors.As(err, &p):
		c.add(t.Name, p.Field, "%s", p.Reason)
	case err != nil:
		c.add(t.Name, "", "%v", err)
	}
}

// publication checks that the readers' publication covers every table,
// or that the role can create it.
func (c *shardCheck) publication(ctx context.Context, tabs map[string]*table) {
	pub := c.cfg.Publication
	var exists, canCreate bool
	if !c.query(ctx, "read the publication", `
		SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1),
		       has_database_privilege(current_database(), 'CREATE')`, []any{pub}, &exists, &canCreate) {
		return
	}
	if exists {
		var viaRoot bool
		if !c.query(ctx, "read the publication", "SELECT pubviaroot FROM pg_publication WHERE pubname = $1", []any{pub}, &viaRoot) {
			return
		}
		for _, t := range c.cfg.Tables.Tables {
			if tab := tabs[t.Name]; tab != nil && tab.partitioned && !viaRoot {
				// As the reader refuses it (internal/reader/partitions.go).
				c.add(t.Name, "", "publication %s publishes partitioned tables under their partitions' names, so the changes of %s would be skipped: run ALTER PUBLICATION %s SET (publish_via_partition_root = true)",
					pub, tab.name, pgx.Identifier{pub}.Sanitize())
			}
		}
	}
	var missing, notOwned []string
	for _, t := range c.cfg.Tables.Tables {
		tab := tabs[t.Name]
		if tab == nil {
			continue
		}
		var in, owner bool
		if !c.query(ctx, "read the publication's tables", `
			SELECT EXISTS (SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3),
			       pg_has_role((SELECT relowner FROM pg_class WHERE oid = $4), 'USAGE')`,
			[]any{pub, t.Schema, t.Name, tab.oid}, &in, &owner) {
			return
		}
		if !in {
			missing = append(missing, pgx.Identifier{t.Schema, t.Name}.Sanitize())
			if !owner {
				notOwned = append(notOwned, t.Name)
			}
		}
	}
	if len(missing) == 0 {
		return
	}
	p := pgx.Identifier{pub}.Sanitize()
	switch {
	case !exists && (!canCreate || len(notOwned) > 0):
		c.add("", "", "publication %s does not exist, and role %s cannot create it (it needs CREATE on the database and to own %s): as the tables' owner, run CREATE PUBLICATION %s FOR TABLE %s",
			pub, c.role, strings.Join(notOwned, ", "), p, strings.Join(missing, ", "))
	case exists && len(notOwned) > 0:
		c.add("", "", "publication %s lacks %s, and role %s may not add them: as the tables' owner, run ALTER PUBLICATION %s ADD TABLE %s",
			pub, strings.Join(missing, ", "), c.role, p, strings.Join(missing, ", "))
	}
	// Otherwise the reader creates the publication, or adds the tables, itself.
}

// kinds are type families a feature accepts; nil accepts any mapped type.
type kinds []string

var (
	kindInteger = kinds{"smallint", "integer", "bigint"}
	kindNumeric = kinds{"numeric("}
	kindTime    = kinds{"timestamp with time zone", "timestamp without time zone", "date"}
	kindText    = kinds{"text", "character varying", "character"}
	// kindLabel is text or an enum, compared by its label.
	kindLabel     = append(append(kinds{}, kindText...), "enum")
	kindUUID      = kinds{"uuid"}
	kindIntOrUUID = append(append(kinds{}, kindInteger...), kindUUID...)
)

// accepts reports whether col is of one of the kinds ("enum": any enum).
func (k kinds) accepts(col column) bool {
	typ := col.typ
	for _, p := range k {
		if (p == "enum" && col.enum) || typ == p || strings.HasPrefix(typ, p+"(") || (strings.HasSuffix(p, "(") && strings.HasPrefix(typ, p)) {
			return true
		}
	}
	return false
}

func (k kinds) String() string { return strings.TrimSuffix(strings.Join(k, ", "), "(") }

// requireColumn reports a column a setting names that is missing, or of a
// type the feature cannot use.
func (c *shardCheck) requireColumn(table string, tab *table, field, name string, want kinds) (column, bool) {
	col, ok := tab.columns[name]
	if !ok {
		c.add(table, field, "column %q does not exist in %s", name, tab.name)
		return col, false
	}
	if want != nil && !want.accepts(col) {
		c.add(table, field, "column %s is %s; this setting needs one of: %s", name, col.typ, want)
		return col, false
	}
	return col, true
}

// idKinds are the column types an id layout decodes.
func idKinds(layout string) kinds {
	switch base, _, _ := strings.Cut(layout, ":"); base {
	case "uuidv7", "uuidv4", "pgdog-hash-uuid":
		return kindUUID
	case "serial":
		return kindInteger
	}
	return kinds{"bigint"}
}
