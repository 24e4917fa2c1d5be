package chstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/ext"
	"github.com/ClickHouse/clickhouse-go/v2/lib/column"

	"github.com/tributary/tributary/internal/rowkey"
)

// A table's identity is its Key: one column, or several (a composite
// key). Rows are sorted by (Key..., _shard); a key travels as its key
// text (internal/rowkey), built here from each key column's toString —
// never in SQL, so that no escaping function has to behave the same on
// 18.16 and current ClickHouse. Key columns are integers, UUIDs or
// strings (internal/identity refuses others for composite keys), whose
// toString is their PostgreSQL text.

// keyKinds are the column kinds a key of several columns may have.
var keyKinds = map[kind]bool{kindInt16: true, kindInt32: true, kindInt64: true, kindUUID: true, kindString: true}

// keyList is the key columns, quoted and comma-separated: the start of
// ORDER BY, a GROUP BY.
func (t *Table) keyList() string {
	q := make([]string, len(t.Key))
	for i, c := range t.Key {
		q[i] = quote(c)
	}
	return strings.Join(q, ", ")
}

// keyTuple is the left side of `IN _ids`: the key column, or the tuple
// of the key columns.
func (t *Table) keyTuple() string {
	if len(t.Key) == 1 {
		return quote(t.Key[0])
	}
	return "(" + t.keyList() + ")"
}

// keyText is the select list of the key as text: one toString per key
// column. A query selecting it scans into a keyScan.
func (t *Table) keyText() string {
	q := make([]string, len(t.Key))
	for i, c := range t.Key {
		q[i] = "toString(" + quote(c) + ")"
	}
	return strings.Join(q, ", ")
}

// keyScan receives the columns of keyText.
type keyScan struct{ parts []string }

func (t *Table) newKeyScan() *keyScan { return &keyScan{parts: make([]string, len(t.Key))} }

// dest are the scan destinations, in keyText's order.
func (k *keyScan) dest() []any {
	d := make([]any, len(k.parts))
	for i := range k.parts {
		d[i] = &k.parts[i]
	}
	return d
}

// text is the scanned key's key text.
func (k *keyScan) text() string { return rowkey.Encode(k.parts) }

// KeyValues converts a key text of t into the typed values of its key
// columns, in key order. A text that does not split into the key's
// columns, or a part that does not convert to its column's type, is a
// *ConvertError naming the column.
func (t *Table) KeyValues(id string) ([]any, error) {
	parts, err := rowkey.Parse(id, len(t.Key))
	if err != nil {
		return nil, &ConvertError{Table: t.Name, Column: strings.Join(t.Key, ", "), Value: id, Err: err}
	}
	vals := make([]any, len(parts))
	for i, p := range parts {
		c := t.Columns[t.byName[t.Key[i]]]
		if vals[i], err = c.typ.convert(p); err != nil {
			return nil, &ConvertError{Table: t.Name, Column: c.Name, Value: p, Err: err}
		}
	}
	return vals, nil
}

// idTable is ids, distinct, as the external table _ids of t's key
// columns (one typed column each; `id` for a one-column key): a whole
// batch of keys in one query, whatever max_query_size says. Tuple IN
// over it works on 18.16 and current ClickHouse.
func idTable(t *Table, ids []string) (*ext.Table, error) {
	cols := make([]func(*ext.Table) error, len(t.Key))
	for i, k := range t.Key {
		name := "id"
		if len(t.Key) > 1 {
			name = fmt.Sprintf("k%d", i)
		}
		cols[i] = ext.Column(name, column.Type(t.Columns[t.byName[k]].typ.ch))
	}
	tbl, err := ext.NewTable("_ids", cols...)
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		vals, err := t.KeyValues(id)
		if err != nil {
			return nil, err
		}
		if err := tbl.Append(vals...); err != nil {
			return nil, fmt.Errorf("ids of %s: %w", t.Name, err)
		}
	}
	return tbl, nil
}

// errNoSortKey is sortKey's answer for a table that is not Tributary's.
var errNoSortKey = errors.New("no sort key ending in _shard")

// sortKey reads the stored table's sort key without its final _shard: the
// key it was created with. nil when the table does not exist.
func (s *Store) sortKey(ctx context.Context, name string) ([]string, error) {
	var sk string
	err := s.conn.QueryRow(ctx, "SELECT sorting_key FROM system.tables WHERE database = ? AND name = ?", s.db, name).Scan(&sk)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, nil
		}
		return nil, fmt.Errorf("sort key of %s: %w", name, err)
	}
	var key []string
	for _, c := range strings.Split(sk, ",") {
		key = append(key, strings.Trim(strings.TrimSpace(c), "`\""))
	}
	if len(key) < 2 || key[len(key)-1] != "_shard" {
		return nil, fmt.Errorf("sort key of %s is (%s): %w", name, sk, errNoSortKey)
	}
	return key[:len(key)-1], nil
}
