// Package tables is the per-table configuration shared by the reader, the
// loader and the API: which source tables are replicated, which column holds
// the row's id, which id layout that id uses, and which column is the shard
// key; optionally, which table and columns GET /v1/revenue reads (the
// `revenue` section, see Revenue) and how GET /v1/documents searches a
// table (a table's `search` section, see Search); optionally, which table
// is the move log of a saga moving rows between shards (the `moves`
// section, see Moves). It is loaded from a JSON file the
// operators publish (see deploy/local/tables.json for the demo) and
// validated before anything connects.
package tables

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/tributary/tributary/internal/ids"
)

// Table is the configuration of one replicated table.
type Table struct {
	// Schema and Name identify the source table (Schema defaults to "public").
	Schema string `json:"schema"`
	Name   string `json:"name"`
	// IDColumns are the columns that identify a row, in the order of the
	// table's primary key or replica identity index (internal/identity
	// checks them against the catalogue): its whole key. IDColumn is the
	// one-column shorthand; exactly one of the two is set in the file.
	// After Validate, IDColumns always holds the key and IDColumn is its
	// column when the key has one column, "" when it has several: code
	// that only works with one id column (moves, the pre-aggregator's id
	// blocks) reads IDColumn and is refused for composite keys.
	IDColumn  string   `json:"id_column,omitempty"`
	IDColumns []string `json:"id_columns,omitempty"`
	// IDLayout names the id layout (see schema/ids.md), e.g. "seed000",
	// "uuidv7", "serial". "serial" ids are per-shard: collisions across
	// shards are expected and reported, never merged. A table with several
	// id columns has the layout "key" (KeyLayout): nothing is decoded.
	IDLayout string `json:"id_layout"`
	// ShardKey is the column the ring map routes by (e.g. workspace_id);
	// empty if the table is not placed by the ring map.
	ShardKey string `json:"shard_key,omitempty"`
	// Topic overrides the Kafka topic name (default: TopicPrefix + Name).
	Topic string `json:"topic,omitempty"`
	// Search configures GET /v1/documents over this table (see Search); nil
	// when the table is not searchable.
	Search *Search `json:"search,omitempty"`
	// Columns, when set, are the only columns replicated; ExcludeColumns are
	// columns never replicated (at most one of the two). Both go into the
	// publication's column list, so other columns never leave the shard
	// (replicate.go).
	Columns        []string `json:"columns,omitempty"`
	ExcludeColumns []string `json:"exclude_columns,omitempty"`
	// RowFilter, when set, is a PostgreSQL boolean expression over the
	// table's columns: only rows that satisfy it are replicated (the
	// publication's WHERE), and a row that stops satisfying it is deleted
	// downstream (replicate.go).
	RowFilter string `json:"row_filter,omitempty"`
	// ColumnTypes chooses the ClickHouse type of columns, by column name,
	// where the default mapping (schema/clickhouse.md) is not wanted or
	// there is none: "String" stores any column's PostgreSQL text exactly;
	// "Decimal(P, S)" (1 <= P <= 38, 0 <= S <= P) stores a numeric column
	// as a decimal, refusing (dead-lettering) values it cannot hold exactly.
	ColumnTypes map[string]string `json:"column_types,omitempty"`
}

// KeyLayout is the id layout of a table identified by several columns: a
// composite key carries no time or shard, so nothing is decoded from it;
// ownership comes only from shard_key.
const KeyLayout = "key"

// Key returns the columns that identify t's rows, in key order (IDColumns,
// or IDColumn alone before Validate filled IDColumns).
func (t *Table) Key() []string {
	if len(t.IDColumns) > 0 {
		return t.IDColumns
	}
	return []string{t.IDColumn}
}

// Composite says whether t's rows are identified by several columns.
func (t *Table) Composite() bool { return len(t.Key()) > 1 }

// KeyForm is how a key of t is written, for messages: "(id)" or
// "(tenant_id, line_no)".
func (t *Table) KeyForm() string { return "(" + strings.Join(t.Key(), ", ") + ")" }

// validateKey checks id_column / id_columns and id_layout, and fills
// IDColumns (and IDColumn for a one-column key).
func (t *Table) validateKey(i int) []error {
	var errs []error
	switch {
	case t.IDColumn != "" && slices.Equal(t.IDColumns, []string{t.IDColumn}):
		// Validated before (Validate may run again on a copy), or both
		// spelt alike: the same one-column key.
	case t.IDColumn != "" && len(t.IDColumns) > 0:
		return []error{fmt.Errorf("table %s: set id_column (one column) or id_columns (the whole key, in key order), not both", t.Name)}
	case t.IDColumn == "" && len(t.IDColumns) == 0:
		return []error{fmt.Errorf("table %d (%s): id_column or id_columns is required: the column(s) of its primary key or replica identity index, in index order", i, t.Name)}
	case t.IDColumn != "":
		t.IDColumns = []string{t.IDColumn}
	}
	seen := map[string]bool{}
	for _, c := range t.IDColumns {
		if !identifier.MatchString(c) {
			errs = append(errs, fmt.Errorf("table %d: id_column %q is not a plain identifier", i, c))
		}
		if seen[c] {
			errs = append(errs, fmt.Errorf("table %s: id_columns names %s twice", t.Name, c))
		}
		seen[c] = true
	}
	if len(t.IDColumns) == 1 {
		t.IDColumn = t.IDColumns[0]
	}
	switch {
	case t.IDLayout == "":
		errs = append(errs, fmt.Errorf("table %s: id_layout is required (one of %s; schema/ids.md)", t.Name, strings.Join(append(ids.Names(), KeyLayout), ", ")))
	case len(t.IDColumns) > 1 && t.IDLayout != KeyLayout:
		errs = append(errs, fmt.Errorf("table %s: id_layout %q decodes one id column, and the table is identified by %d columns %s: set id_layout to %q",
			t.Name, t.IDLayout, len(t.IDColumns), t.KeyForm(), KeyLayout))
	case len(t.IDColumns) == 1 && t.IDLayout == KeyLayout:
		errs = append(errs, fmt.Errorf("table %s: id_layout %q is for tables identified by several columns (id_columns); a one-column id has a layout of its own (one of %s; schema/ids.md)",
			t.Name, KeyLayout, strings.Join(ids.Names(), ", ")))
	case t.IDLayout == KeyLayout:
	default:
		if _, err := ids.Lookup(t.IDLayout); err != nil {
			errs = append(errs, fmt.Errorf("table %s: id_layout: %w", t.Name, err))
		}
	}
	return errs
}

// chosenType is what ColumnTypes accepts; internal/chstore checks the
// bounds and that a Decimal is for a numeric column.
var chosenType = regexp.MustCompile(`^(String|Decimal\( *[0-9]{1,2} *, *[0-9]{1,2} *\))$`)

// ColumnTypes returns every table's ColumnTypes by table name (the
// ClickHouse table), for the loader's store.
func (c *Config) ColumnTypes() map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, t := range c.Tables {
		if len(t.ColumnTypes) > 0 {
			out[t.Name] = t.ColumnTypes
		}
	}
	return out
}

// Config is the whole table configuration file.
type Config struct {
	// TopicPrefix prefixes default topic names (default "tributary.").
	TopicPrefix string  `json:"topic_prefix"`
	Tables      []Table `json:"tables"`
	// Revenue configures GET /v1/revenue; nil when the API serves no
	// revenue report.
	Revenue *Revenue `json:"revenue,omitempty"`
	// Moves names the move log of a saga that moves rows between shards
	// (see Moves); nil when there is none.
	Moves *Moves `json:"moves,omitempty"`
}

// Revenue says which replicated table holds money and how to read it. Every
// name is a column of Table; nothing about a particular schema is assumed,
// so an `orders` table with `total` and `placed_at` works as well as the
// demo's `invoices` with `amount` and `issued_at`.
//
// Definition (the report states it too; see internal/query/revenue.go):
// over live rows whose TimeColumn is in [from, to),
//   - gross   = sum(amount) of rows whose status is in CountStatuses or RefundStatuses,
//   - refunds = sum(amount) of rows whose status is in RefundStatuses
//     (with RefundedAmountColumn: the sum of each counted row's refund, see
//     there — partial refunds),
//   - net     = gross - refunds (= sum(amount) of rows in CountStatuses
//     when every refund is whole).
//
// A row only has its current status, so a refunded invoice is one that was
// collected and given back: it counts in gross and in refunds, and not in
// net. Subtracting it from the paid rows alone would take it away twice.
// Rows in any other status (issued, void...) do not count at all.
type Revenue struct {
	// Table is the name of a configured table.
	Table string `json:"table"`
	// AmountColumn must be numeric(p,s) at the source (Decimal in
	// ClickHouse): sums of floats are not exact and are refused at query time.
	AmountColumn string `json:"amount_column"`
	// CurrencyColumn holds an ISO 4217 code per row. When the table has no
	// such column, Currency names the single currency of every row instead.
	// Exactly one of the two is set.
	CurrencyColumn string `json:"currency_column,omitempty"`
	Currency       string `json:"currency,omitempty"`
	// TimeColumn buckets rows (timestamp, timestamptz or date at the source).
	TimeColumn string `json:"time_column"`
	// StatusColumn, with CountStatuses and RefundStatuses, selects the rows
	// that count. Without a StatusColumn every live row counts and there are
	// no refunds.
	StatusColumn   string   `json:"status_column,omitempty"`
	CountStatuses  []string `json:"count_statuses,omitempty"`
	RefundStatuses []string `json:"refund_statuses,omitempty"`
	// WorkspaceColumn enables group_by=workspace and the workspace filter.
	WorkspaceColumn string `json:"workspace_column,omitempty"`
	// RefundedAmountColumn, optional, holds the part of a row's amount
	// given back (partial refunds; numeric with the amount's scale). With
	// it, a row's refund is this column when set, else its whole amount if
	// its status is a refund status, else nothing.
	RefundedAmountColumn string `json:"refunded_amount_column,omitempty"`
}

// currencyCode is an ISO 4217 alphabetic code.
var currencyCode = regexp.MustCompile(`^[A-Z]{3}$`)

// validate checks r against the configured tables.
func (r *Revenue) validate(c *Config) error {
	var errs []error
	if _, ok := c.ByName(r.Table); !ok {
		errs = append(errs, fmt.Errorf("revenue: table %q is not a configured table", r.Table))
	}
	cols := []struct{ what, v string }{
		{"amount_column", r.AmountColumn}, {"time_column", r.TimeColumn},
		{"currency_column", r.CurrencyColumn}, {"status_column", r.StatusColumn},
		{"workspace_column", r.WorkspaceColumn}, {"refunded_amount_column", r.RefundedAmountColumn},
	}
	for i, col := range cols {
		optional := i >= 2
		if col.v == "" && optional {
			continue
		}
		if !identifier.MatchString(col.v) {
			errs = append(errs, fmt.Errorf("revenue: %s %q is not a plain identifier", col.what, col.v))
		}
	}
	switch {
	case r.CurrencyColumn == "" && r.Currency == "":
		errs = append(errs, errors.New("revenue: set currency_column, or currency for a single-currency table"))
	case r.CurrencyColumn != "" && r.Currency != "":
		errs = append(errs, errors.New("revenue: set currency_column or currency, not both"))
	case r.Currency != "" && !currencyCode.MatchString(r.Currency):
		errs = append(errs, fmt.Errorf("revenue: currency %q is not an upper-case ISO 4217 code", r.Currency))
	}
	if r.StatusColumn == "" {
		if len(r.CountStatuses)+len(r.RefundStatuses) > 0 {
			errs = append(errs, errors.New("revenue: count_statuses and refund_statuses need a status_column"))
		}
		return errors.Join(errs...)
	}
	if len(r.CountStatuses) == 0 {
		errs = append(errs, errors.New("revenue: count_statuses is required with a status_column"))
	}
	seen := map[string]string{}
	for _, l := range []struct {
		what string
		list []string
	}{{"count_statuses", r.CountStatuses}, {"refund_statuses", r.RefundStatuses}} {
		what := l.what
		for _, st := range l.list {
			if st == "" || len(st) > 64 {
				errs = append(errs, fmt.Errorf("revenue: %s: status %q must be 1 to 64 bytes", what, st))
			}
			if prev, dup := seen[st]; dup {
				errs = append(errs, fmt.Errorf("revenue: status %q is listed twice (%s and %s)", st, prev, what))
			}
			seen[st] = what
		}
	}
	return errors.Join(errs...)
}

// RevenueTable returns the revenue configuration and the table it reads.
func (c *Config) RevenueTable() (*Revenue, *Table, bool) {
	if c.Revenue == nil {
		return nil, nil, false
	}
	t, ok := c.ByName(c.Revenue.Table)
	return c.Revenue, t, ok
}

// identifier is what we accept as a table or column name: it ends up quoted
// in PostgreSQL and ClickHouse DDL, but refusing anything exotic keeps error
// messages and topic names sane.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// Validate checks the configuration and fills per-table defaults.
func (c *Config) Validate() error {
	if len(c.Tables) == 0 {
		return errors.New("table config: no tables configured")
	}
	seen := map[string]bool{}
	var errs []error
	for i := range c.Tables {
		t := &c.Tables[i]
		if t.Schema == "" {
			t.Schema = "public"
		}
		if t.Topic == "" {
			t.Topic = c.TopicPrefix + t.Name
		}
		for what, v := range map[string]string{"schema": t.Schema, "name": t.Name} {
			if !identifier.MatchString(v) {
				errs = append(errs, fmt.Errorf("table %d: %s %q is not a plain identifier", i, what, v))
			}
		}
		if t.ShardKey != "" && !identifier.MatchString(t.ShardKey) {
			errs = append(errs, fmt.Errorf("table %s: shard_key %q is not a plain identifier", t.Name, t.ShardKey))
		}
		errs = append(errs, t.validateKey(i)...)
		errs = append(errs, t.validateReplicated()...)
		for _, col := range slices.Sorted(maps.Keys(t.ColumnTypes)) {
			typ := t.ColumnTypes[col]
			if !identifier.MatchString(col) {
				errs = append(errs, fmt.Errorf("table %s: column_types: column %q is not a plain identifier", t.Name, col))
			}
			if !chosenType.MatchString(typ) {
				errs = append(errs, fmt.Errorf(`table %s: column_types: %s: %q is not "String" or "Decimal(P, S)"`, t.Name, col, typ))
			}
		}
		if t.Search != nil {
			if err := t.Search.validate(t.Name); err != nil {
				errs = append(errs, err)
			}
		}
		if seen[t.Name] {
			errs = append(errs, fmt.Errorf("table %s: configured twice (table names must be unique across schemas)", t.Name))
		}
		seen[t.Name] = true
	}
	if c.Revenue != nil {
		if err := c.Revenue.validate(c); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Moves != nil {
		if err := c.Moves.validate(c); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ByName returns the table with the given (unqualified) name.
func (c *Config) ByName(name string) (*Table, bool) {
	for i := range c.Tables {
		if c.Tables[i].Name == name {
			return &c.Tables[i], true
		}
	}
	return nil, false
}

// BySource returns the table for a source relation.
func (c *Config) BySource(schema, name string) (*Table, bool) {
	for i := range c.Tables {
		if c.Tables[i].Schema == schema && c.Tables[i].Name == name {
			return &c.Tables[i], true
		}
	}
	return nil, false
}

// Topics lists the Kafka topics of all tables.
func (c *Config) Topics() []string {
	out := make([]string, len(c.Tables))
	for i, t := range c.Tables {
		out[i] = t.Topic
	}
	return out
}

// ByTopic returns the table written to topic.
func (c *Config) ByTopic(topic string) (*Table, bool) {
	for i := range c.Tables {
		if c.Tables[i].Topic == topic {
			return &c.Tables[i], true
		}
	}
	return nil, false
}
