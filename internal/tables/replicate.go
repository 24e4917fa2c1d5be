package tables

import (
	"fmt"
	"slices"
	"strings"
)

// What of a table is replicated: a column list (Columns, or every column
// but ExcludeColumns) and a row filter (RowFilter). The reader carries both
// into the shard's publication (PostgreSQL 15 publication column lists and
// row filters), so excluded columns and filtered-out rows never leave the
// shard, and checks them against the table's replica identity: PostgreSQL
// refuses UPDATE and DELETE on a published table whose column list misses
// a replica identity column or whose filter reads a column outside it.

// validateReplicated checks the column list and row filter settings.
func (t *Table) validateReplicated() []error {
	var errs []error
	if len(t.Columns) > 0 && len(t.ExcludeColumns) > 0 {
		errs = append(errs, fmt.Errorf("table %s: columns and exclude_columns are exclusive (list the columns to keep, or those to leave out)", t.Name))
	}
	for _, list := range []struct {
		what string
		cols []string
	}{{"columns", t.Columns}, {"exclude_columns", t.ExcludeColumns}} {
		seen := map[string]bool{}
		for _, c := range list.cols {
			if !identifier.MatchString(c) {
				errs = append(errs, fmt.Errorf("table %s: %s: %q is not a plain identifier", t.Name, list.what, c))
			}
			if seen[c] {
				errs = append(errs, fmt.Errorf("table %s: %s: %q listed twice", t.Name, list.what, c))
			}
			seen[c] = true
		}
	}
	for _, id := range t.Key() {
		if len(t.Columns) > 0 && !slices.Contains(t.Columns, id) {
			errs = append(errs, fmt.Errorf("table %s: columns must include the id column %q", t.Name, id))
		}
		if slices.Contains(t.ExcludeColumns, id) {
			errs = append(errs, fmt.Errorf("table %s: exclude_columns cannot hold the id column %q", t.Name, id))
		}
	}
	if t.ShardKey != "" && (slices.Contains(t.ExcludeColumns, t.ShardKey) || (len(t.Columns) > 0 && !slices.Contains(t.Columns, t.ShardKey))) {
		errs = append(errs, fmt.Errorf("table %s: the shard_key column %q must be replicated", t.Name, t.ShardKey))
	}
	if t.RowFilter != "" && strings.TrimSpace(t.RowFilter) == "" {
		errs = append(errs, fmt.Errorf("table %s: row_filter is blank", t.Name))
	}
	return errs
}

// Replicates reports whether column is replicated (by the column lists;
// the row filter aside).
func (t *Table) Replicates(column string) bool {
	if len(t.Columns) > 0 {
		return slices.Contains(t.Columns, column)
	}
	return !slices.Contains(t.ExcludeColumns, column)
}

// HasColumnList reports whether only some columns are replicated.
func (t *Table) HasColumnList() bool { return len(t.Columns) > 0 || len(t.ExcludeColumns) > 0 }
