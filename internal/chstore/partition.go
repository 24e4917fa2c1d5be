package chstore

import (
	"context"
	"fmt"
	"strings"
)

// LiveKeyValues returns, for shard's live rows whose version is below
// before, the id and the text (toString) of each of cols: what a truncate
// of one partition at that version may remove, for the caller to match
// against the partition's bound.
func (s *Store) LiveKeyValues(ctx context.Context, t *Table, shard uint16, before uint64, cols []string) (ids []string, values [][]*string, err error) {
	sel := make([]string, 0, len(cols)+1)
	sel = append(sel, t.keyText())
	for _, c := range cols {
		if _, ok := t.byName[c]; !ok {
			return nil, nil, fmt.Errorf("live rows %s: partition key column %q is not a column of the table", t.Name, c)
		}
		// A NULL stays NULL: toString of a Nullable keeps it.
		sel = append(sel, "toString("+quote(c)+")")
	}
	q := fmt.Sprintf("SELECT %s FROM %s.%s FINAL WHERE _shard = ? AND _deleted = 0 AND _version < ?",
		strings.Join(sel, ", "), quote(s.db), quote(t.Name))
	rows, err := s.conn.Query(ctx, q, shard, before)
	if err != nil {
		return nil, nil, fmt.Errorf("live rows %s: %w", t.Name, err)
	}
	defer rows.Close()
	k := t.newKeyScan()
	for rows.Next() {
		vals := make([]*string, len(cols))
		dst := k.dest()
		for i := range vals {
			dst = append(dst, &vals[i])
		}
		if err := rows.Scan(dst...); err != nil {
			return nil, nil, fmt.Errorf("live rows %s: %w", t.Name, err)
		}
		ids, values = append(ids, k.text()), append(values, vals)
	}
	return ids, values, rows.Err()
}

// PGType returns the PostgreSQL type of column name ("" if there is none).
func (t *Table) PGType(name string) string {
	if i, ok := t.byName[name]; ok {
		return t.Columns[i].PGType
	}
	return ""
}
