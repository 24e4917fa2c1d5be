package chstore

import (
	"context"
	"fmt"
	"strings"
)

// EachLiveRow calls fn, n rows at a time (the last call may have fewer),
// with shard's live rows whose version is below before: their ids and, per
// row, the text (toString; NULL stays nil) of each of cols — what a
// TRUNCATE at that version removes, or for a truncate of one partition
// what the caller matches against the partition's bound. It reads them as
// it goes: memory holds one batch, whatever the table's size. fn must not
// keep the slices; its error ends the read and is returned.
func (s *Store) EachLiveRow(ctx context.Context, t *Table, shard uint16, before uint64, cols []string, n int, fn func(ids []string, values [][]*string) error) error {
	sel := make([]string, 0, len(cols)+1)
	sel = append(sel, t.keyText())
	for _, c := range cols {
		if _, ok := t.byName[c]; !ok {
			return fmt.Errorf("live rows %s: partition key column %q is not a column of the table", t.Name, c)
		}
		sel = append(sel, "toString("+quote(c)+")")
	}
	q := fmt.Sprintf("SELECT %s FROM %s.%s FINAL WHERE _shard = ? AND _deleted = 0 AND _version < ?",
		strings.Join(sel, ", "), quote(s.db), quote(t.Name))
	rows, err := s.conn.Query(ctx, q, shard, before)
	if err != nil {
		return fmt.Errorf("live rows %s: %w", t.Name, err)
	}
	defer rows.Close()
	ids, values := make([]string, 0, n), make([][]*string, 0, n)
	k := t.newKeyScan()
	for rows.Next() {
		vals := make([]*string, len(cols))
		dst := k.dest()
		for i := range vals {
			dst = append(dst, &vals[i])
		}
		if err := rows.Scan(dst...); err != nil {
			return fmt.Errorf("live rows %s: %w", t.Name, err)
		}
		if ids, values = append(ids, k.text()), append(values, vals); len(ids) == n {
			if err := fn(ids, values); err != nil {
				return err
			}
			ids, values = ids[:0], values[:0]
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("live rows %s: %w", t.Name, err)
	}
	if len(ids) > 0 {
		return fn(ids, values)
	}
	return nil
}

// PGType returns the PostgreSQL type of column name ("" if there is none).
func (t *Table) PGType(name string) string {
	if i, ok := t.byName[name]; ok {
		return t.Columns[i].PGType
	}
	return ""
}
