// Package chstore is Tributary's ClickHouse side: it creates one table per
// replicated source table from the columns the change envelope describes,
// writes rows idempotently (ReplacingMergeTree keyed by (id, _shard) with the
// source version), and keeps the per-partition freshness watermarks.
//
// Every statement here must run on ClickHouse 18.16 (Debian's package) and on
// current ClickHouse; see schema/clickhouse.md for the rules that follow
// from that and for which query patterns are exact.
//
// A replicated table has the source columns (all Nullable except the replica
// identity key; a timestamp column followed by its MicrosColumn) plus these
// metadata columns:
//
//	_shard      UInt16   source shard
//	_version    UInt64   LSN of the change record: per row, increases in commit order
//	_deleted    UInt8    1 for a delete tombstone
//	_commit_lsn UInt64   commit LSN of the source transaction
//	_commit_ts  DateTime commit time (UTC, seconds)
//	_loaded_at  DateTime when the loader wrote it
//
// Exact reads use FINAL with a plain WHERE and filter _deleted = 0. Never
// PREWHERE, except on the id column alone: every version of a row carries
// the same id, so FINAL still sees all of them (Store.Current, the API's
// by-id read).
package chstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tributary/tributary/internal/envelope"
)

// ErrIncompatibleSchema is returned when a source table changed in a way the
// ClickHouse table cannot follow (a column's type changed, the id column
// vanished). The loader stops that table loudly.
var ErrIncompatibleSchema = errors.New("incompatible schema change")

// metaColumns are appended to every replicated table, in this order.
var metaColumns = []struct{ name, typ string }{
	{"_shard", "UInt16"},
	{"_version", "UInt64"},
	{"_deleted", "UInt8"},
	{"_commit_lsn", "UInt64"},
	{"_commit_ts", "DateTime('UTC')"},
	{"_loaded_at", "DateTime('UTC')"},
}

// Options configures a Store.
type Options struct {
	Addr     string
	Database string
	Username string
	Password string
	// TLS wraps the connections in TLS (DialOptions.TLS).
	TLS TLSOptions
	// Cluster, when set, is the ClickHouse cluster (remote_servers) the
	// tables are spread over: cluster mode (cluster.go). Addr is then any
	// node of it, which lists the others, each dialled where NodeAddrs
	// says (DialOptions.ForNode).
	Cluster   string
	NodeAddrs string
}

// Store owns a clickhouse-go connection pool and the known table layouts.
type Store struct {
	conn driver.Conn
	db   string
	// cluster and nodes are set by Open in cluster mode and never change.
	cluster string
	nodes   []Node

	mu     sync.Mutex
	tables map[string]*Table // by ClickHouse table name
	// chosen are the column types the table config chooses
	// (SetColumnTypes); read under mu.
	chosen ColumnTypes
}

// SetColumnTypes sets the ClickHouse types the table config chooses for
// columns (tables.Config.ColumnTypes). Tables are created and checked with
// them from then on.
func (s *Store) SetColumnTypes(ct ColumnTypes) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.chosen = ct
}

// Open connects and checks the server answers. It creates the database if it
// does not exist.
func Open(ctx context.Context, o Options) (*Store, error) {
	if o.Database == "" {
		o.Database = "tributary"
	}
	do := DialOptions{Addr: o.Addr, Username: o.Username, Password: o.Password, MaxOpenConns: 8, TLS: o.TLS}
	if o.Cluster != "" {
		do.Settings = clusterSettings
	}
	conn, err := Dial(ctx, do)
	if err != nil {
		return nil, err
	}
	s := &Store{conn: conn, db: o.Database, tables: map[string]*Table{}}
	if o.Cluster != "" {
		if err := s.openCluster(ctx, o); err != nil {
			conn.Close()
			return nil, err
		}
	}
	if err := s.ExecDDL(ctx, "CREATE DATABASE IF NOT EXISTS "+quote(o.Database)); err != nil {
		s.Close()
		return nil, fmt.Errorf("create database: %w", err)
	}
	if err := s.ensureWatermarks(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.ensureAnomalies(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.ensureOwnership(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Close releases the connections.
func (s *Store) Close() error {
	closeNodes(s.nodes)
	return s.conn.Close()
}

// Conn exposes the connection for read-side packages.
func (s *Store) Conn() driver.Conn { return s.conn }

// Database is the ClickHouse database the store writes to.
func (s *Store) Database() string { return s.db }

// Table is the ClickHouse layout of one replicated table.
type Table struct {
	Name string
	// Key are the columns that identify a row, in key order: the sort key
	// before _shard. IDColumn is Key's column when there is one, "" for a
	// composite key (what only works with one id column reads it).
	Key      []string
	IDColumn string
	// Columns are the source columns in ClickHouse order.
	Columns []Column
	byName  map[string]int
}

// Column is one source column as stored in ClickHouse.
type Column struct {
	Name     string
	PGType   string
	Key      bool
	Nullable bool
	typ      colType
	// missing, when not nil, is the typed value of this column in source
	// rows written before it was added (envelope.Column.Missing). It is
	// the ClickHouse column's DEFAULT, which rows stored before the column
	// existed read, and Block.Set writes it for changes whose column list
	// predates the column.
	missing any
	// of, for a MicrosColumn, is the timestamp column whose source text
	// it is converted from; "" for a source column.
	of string
}

// source is the source column whose text the column is converted from.
func (c Column) source() string {
	if c.of != "" {
		return c.of
	}
	return c.Name
}

// columnDDL is the column's definition in CREATE TABLE and ADD COLUMN.
func (c Column) columnDDL() (string, error) {
	d := quote(c.Name) + " " + c.CHType()
	if c.missing == nil {
		return d, nil
	}
	lit, err := c.typ.literal(c.missing)
	if err != nil {
		return "", fmt.Errorf("default of column %s: %w", c.Name, err)
	}
	return d + " DEFAULT " + lit, nil
}

// CHType is the full ClickHouse type of the column.
func (c Column) CHType() string {
	if c.Nullable {
		return "Nullable(" + c.typ.ch + ")"
	}
	return c.typ.ch
}

// EnsureTable makes the ClickHouse table for a source relation exist and
// match cols: it is created if absent, columns the source added are added,
// columns the source dropped are kept (old rows keep their values; new rows
// store NULL). A changed type is ErrIncompatibleSchema.
func (s *Store) EnsureTable(ctx context.Context, name string, key []string, cols []envelope.Column) (*Table, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	want, err := layout(name, key, cols, s.chosen[name])
	if err != nil {
		return nil, err
	}
	have, ok := s.tables[name]
	if !ok {
		have, err = s.describe(ctx, name, key)
		if err != nil {
			return nil, err
		}
	}
	if have == nil {
		if err := s.create(ctx, want); err != nil {
			return nil, err
		}
		s.tables[name] = want
		return want, nil
	}
	merged, added, err := merge(have, want)
	if err != nil {
		return nil, err
	}
	for _, c := range added {
		// No IF NOT EXISTS: ClickHouse 18.16 rejects it. Another loader may
		// have added the column first; that is success.
		def, err := c.columnDDL()
		if err != nil {
			return nil, fmt.Errorf("%w: table %s: %w", ErrIncompatibleSchema, name, err)
		}
		if err := s.addColumn(ctx, name, c.Name, def); err != nil {
			now, derr := s.describe(ctx, name, key)
			if derr != nil || now == nil {
				return nil, fmt.Errorf("add column %s.%s: %w", name, c.Name, err)
			}
			if _, ok := now.byName[c.Name]; !ok {
				return nil, fmt.Errorf("add column %s.%s: %w", name, c.Name, err)
			}
		}
	}
	s.tables[name] = merged
	return merged, nil
}

// Layout is the table a source relation maps to, as EnsureTable would
// create it, without a server: for tests and tools that fill Blocks.
func Layout(name string, key []string, cols []envelope.Column) (*Table, error) {
	return layout(name, key, cols, nil)
}

// newTable is an empty layout of the table name identified by key.
func newTable(name string, key []string) *Table {
	t := &Table{Name: name, Key: key, byName: map[string]int{}}
	if len(key) == 1 {
		t.IDColumn = key[0]
	}
	return t
}

// layout maps cols; chosen are the table config's types for its columns.
func layout(name string, key []string, cols []envelope.Column, chosen map[string]string) (*Table, error) {
	if len(key) == 0 {
		return nil, fmt.Errorf("%w: table %s: no id column", ErrIncompatibleSchema, name)
	}
	t := newTable(name, key)
	for _, c := range cols {
		ct, err := mapColumn(name, c, chosen[c.Name])
		if err != nil {
			return nil, err
		}
		isKey := c.Key || slices.Contains(key, c.Name)
		col := Column{Name: c.Name, PGType: c.Type, Key: isKey, Nullable: !isKey, typ: ct}
		if c.Missing != nil {
			if col.missing, err = ct.convert(*c.Missing); err != nil {
				return nil, fmt.Errorf("%w: table %s column %s: value %q of rows older than the column: %w",
					ErrIncompatibleSchema, name, c.Name, *c.Missing, err)
			}
		}
		t.byName[c.Name] = len(t.Columns)
		t.Columns = append(t.Columns, col)
		if ct.kind == kindDateTime {
			us := Column{Name: MicrosColumn(c.Name), Nullable: true, typ: microsType, of: c.Name}
			if col.missing != nil {
				us.missing = uint32(col.missing.(time.Time).Nanosecond() / 1000)
			}
			t.byName[us.Name] = len(t.Columns)
			t.Columns = append(t.Columns, us)
		}
	}
	for _, c := range cols {
		if of, ok := MicrosOf(c.Name); ok && t.Index(of) >= 0 && t.Columns[t.Index(of)].typ.kind == kindDateTime {
			return nil, fmt.Errorf("%w: table %s: column %s has the name of the column that holds %s's microseconds; rename one of them",
				ErrIncompatibleSchema, name, c.Name, of)
		}
	}
	for _, id := range key {
		i, ok := t.byName[id]
		if !ok {
			return nil, fmt.Errorf("%w: table %s has no id column %q", ErrIncompatibleSchema, name, id)
		}
		if len(key) > 1 && !keyKinds[t.Columns[i].typ.kind] {
			return nil, fmt.Errorf("%w: table %s: key column %s is %s; a key of several columns takes integer, uuid and text columns only",
				ErrIncompatibleSchema, name, id, t.Columns[i].typ.ch)
		}
	}
	return t, nil
}

// merge reconciles the stored layout with the source's current one.
func merge(have, want *Table) (*Table, []Column, error) {
	if !slices.Equal(have.Key, want.Key) {
		return nil, nil, fmt.Errorf("%w: table %s is sorted by (%s) in ClickHouse, and the table config identifies its rows by (%s): rows merged under the stored key cannot be split again; drop the ClickHouse table (DROP TABLE %s) and copy the table again from the shards (a new initial snapshot)",
			ErrIncompatibleSchema, have.Name, strings.Join(have.Key, ", "), strings.Join(want.Key, ", "), quote(have.Name))
	}
	out := newTable(have.Name, have.Key)
	for _, c := range have.Columns {
		out.byName[c.Name] = len(out.Columns)
		out.Columns = append(out.Columns, c)
	}
	var added []Column
	for _, c := range want.Columns {
		i, ok := out.byName[c.Name]
		if !ok {
			c.Nullable = true // existing rows have no value
			out.byName[c.Name] = len(out.Columns)
			out.Columns = append(out.Columns, c)
			added = append(added, c)
			continue
		}
		// A real stored as Float64 by an older version keeps its column:
		// every float4 is a float8.
		if got := out.Columns[i]; got.typ.ch != c.typ.ch && !(got.typ.kind == kindFloat64 && c.typ.kind == kindFloat32) {
			return nil, nil, fmt.Errorf("%w: %s.%s changed from %s to %s", ErrIncompatibleSchema,
				have.Name, c.Name, got.typ.ch, c.typ.ch)
		}
		// A layout read back from ClickHouse (describe) has no PostgreSQL
		// types: the source's are the ones to keep.
		out.Columns[i].PGType = c.PGType
	}
	return out, added, nil
}

func (s *Store) create(ctx context.Context, t *Table) error {
	var b strings.Builder
	for _, c := range t.Columns {
		def, err := c.columnDDL()
		if err != nil {
			return fmt.Errorf("%w: create table %s: %w", ErrIncompatibleSchema, t.Name, err)
		}
		b.WriteString(def + ", ")
	}
	for i, m := range metaColumns {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s", m.name, m.typ)
	}
	// index_granularity 1024 (default 8192): a by-id lookup reads one
	// granule of every column, large bodies included; smaller granules cut
	// that eightfold at the price of a larger (still small) primary index.
	engine := "ReplacingMergeTree(_version)"
	tail := fmt.Sprintf("ORDER BY (%s, _shard) SETTINGS index_granularity = 1024", t.keyList())
	if s.cluster != "" {
		return s.createSharded(ctx, t, b.String(), engine, tail)
	}
	q := fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s.%s (%s) ENGINE = %s %s", quote(s.db), quote(t.Name), b.String(), engine, tail)
	if err := s.conn.Exec(ctx, q); err != nil {
		return fmt.Errorf("create table %s: %w", t.Name, err)
	}
	return nil
}

// describe reads an existing table's layout from system.columns, or returns
// nil if the table does not exist. The PostgreSQL type of a column is not
// stored in ClickHouse; comparisons use the ClickHouse type.
func (s *Store) describe(ctx context.Context, name string, key []string) (*Table, error) {
	rows, err := s.conn.Query(ctx,
		"SELECT name, type, default_kind, default_expression FROM system.columns WHERE database = ? AND table = ?", s.db, name)
	if err != nil {
		return nil, fmt.Errorf("describe %s: %w", name, err)
	}
	defer rows.Close()
	t := newTable(name, key)
	found := false
	defaults := map[string]string{} // column -> DEFAULT expression
	for rows.Next() {
		var cn, ct, dk, de string
		if err := rows.Scan(&cn, &ct, &dk, &de); err != nil {
			return nil, fmt.Errorf("describe %s: %w", name, err)
		}
		if dk == "DEFAULT" {
			defaults[cn] = de
		}
		found = true
		if strings.HasPrefix(cn, "_") && isMeta(cn) {
			continue
		}
		nullable := strings.HasPrefix(ct, "Nullable(")
		inner := strings.TrimSuffix(strings.TrimPrefix(ct, "Nullable("), ")")
		if !nullable {
			inner = ct
		}
		typ, err := typeFromCH(inner)
		if err != nil {
			return nil, fmt.Errorf("describe %s.%s: %w", name, cn, err)
		}
		col := Column{Name: cn, Key: !nullable, Nullable: nullable, typ: typ}
		if of, ok := MicrosOf(cn); ok && inner == "UInt32" {
			col.typ, col.of = microsType, of
		}
		t.byName[cn] = len(t.Columns)
		t.Columns = append(t.Columns, col)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("describe %s: %w", name, err)
	}
	if !found {
		return nil, nil
	}
	rows.Close()
	if err := s.readDefaults(ctx, t, defaults); err != nil {
		return nil, err
	}
	// In cluster mode name is the Distributed table, which has no sort
	// key: the key is its local table's.
	stored, err := s.sortKey(ctx, s.LocalTable(name))
	if err != nil {
		return nil, err
	}
	if stored != nil {
		// merge compares it with the configured key.
		t.Key, t.IDColumn = stored, ""
		if len(stored) == 1 {
			t.IDColumn = stored[0]
		}
	}
	return t, nil
}

// readDefaults gives the columns of t with a DEFAULT (the value of rows
// older than the column; see Column.missing) their typed value, evaluated
// by ClickHouse from the expression Tributary wrote.
func (s *Store) readDefaults(ctx context.Context, t *Table, defaults map[string]string) error {
	var names, exprs []string
	for name, expr := range defaults {
		if _, ok := t.byName[name]; ok {
			names = append(names, name)
			// ClickHouse's text form of the value; fromCHText parses it.
			exprs = append(exprs, "toString(assumeNotNull("+expr+"))")
		}
	}
	if len(names) == 0 {
		return nil
	}
	vals := make([]string, len(names))
	dest := make([]any, len(names))
	for i := range vals {
		dest[i] = &vals[i]
	}
	if err := s.conn.QueryRow(ctx, "SELECT "+strings.Join(exprs, ", ")).Scan(dest...); err != nil {
		return fmt.Errorf("describe %s: column defaults: %w", t.Name, err)
	}
	for i, name := range names {
		c := &t.Columns[t.byName[name]]
		v, err := c.typ.fromCHText(vals[i])
		if err != nil {
			return fmt.Errorf("describe %s.%s: default %q: %w", t.Name, name, vals[i], err)
		}
		c.missing = v
	}
	return nil
}

func isMeta(name string) bool {
	for _, m := range metaColumns {
		if m.name == name {
			return true
		}
	}
	return false
}

// typeFromCH inverts mapType for tables that already exist.
func typeFromCH(ch string) (colType, error) {
	norm := strings.ReplaceAll(ch, " ", "")
	switch {
	case norm == "Int16":
		return colType{kind: kindInt16, ch: "Int16"}, nil
	case norm == "Int32":
		return colType{kind: kindInt32, ch: "Int32"}, nil
	case norm == "Int64":
		return colType{kind: kindInt64, ch: "Int64"}, nil
	case norm == "Float64":
		return colType{kind: kindFloat64, ch: "Float64"}, nil
	case norm == "Float32":
		return colType{kind: kindFloat32, ch: "Float32"}, nil
	case strings.HasPrefix(norm, "Decimal("):
		p, sc, ok := ParseDecimalType(norm)
		if !ok {
			return colType{}, fmt.Errorf("decimal type %q", ch)
		}
		return decimalType(p, sc), nil
	case norm == "UInt8":
		return colType{kind: kindBool, ch: "UInt8"}, nil
	case norm == "UInt32":
		return microsType, nil
	case norm == "Date":
		return colType{kind: kindDate, ch: "Date"}, nil
	case strings.HasPrefix(norm, "DateTime"):
		return colType{kind: kindDateTime, ch: "DateTime('UTC')"}, nil
	case norm == "UUID":
		return colType{kind: kindUUID, ch: "UUID"}, nil
	case norm == "String":
		return colType{kind: kindString, ch: "String"}, nil
	}
	return colType{}, fmt.Errorf("unexpected ClickHouse type %q in a Tributary table", ch)
}

// quote is Quote, short for the many DDL strings here.
func quote(id string) string { return Quote(id) }

// Index is the position of a column in Columns (and in a converted row), or
// -1 if the table has no such column.
func (t *Table) Index(name string) int {
	if i, ok := t.byName[name]; ok {
		return i
	}
	return -1
}

// Lookup returns the layout of an existing table (nil if it does not
// exist), from the cache or ClickHouse.
func (s *Store) Lookup(ctx context.Context, name string, key []string) (*Table, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.tables[name]; ok {
		return t, nil
	}
	t, err := s.describe(ctx, name, key)
	if err != nil || t == nil {
		return nil, err
	}
	if !slices.Equal(t.Key, key) {
		return nil, fmt.Errorf("%w: table %s is sorted by (%s) in ClickHouse, and the table config identifies its rows by (%s): rows merged under the stored key cannot be split again; drop the ClickHouse table and copy the table again from the shards (a new initial snapshot)",
			ErrIncompatibleSchema, name, strings.Join(t.Key, ", "), strings.Join(key, ", "))
	}
	s.tables[name] = t
	return t, nil
}
