package tables

import (
	"errors"
	"fmt"
)

// Search says how GET /v1/documents searches a table: which column orders
// the results (newest first) and bounds the from/to window, and which
// columns the title and workspace filters read. Only TimeColumn is
// required; a filter whose column is not configured is refused by the API.
type Search struct {
	// TimeColumn orders results and is what from/to bound (a timestamp,
	// timestamptz or date at the source, e.g. created_at or updated_at).
	TimeColumn string `json:"time_column"`
	// TitleColumn enables title= (a case-insensitive substring match).
	TitleColumn string `json:"title_column,omitempty"`
	// WorkspaceColumn enables workspace= (an exact match on the column's
	// text form).
	WorkspaceColumn string `json:"workspace_column,omitempty"`
}

// validate checks the column names of s, the search section of table.
func (s *Search) validate(table string) error {
	var errs []error
	if !identifier.MatchString(s.TimeColumn) {
		errs = append(errs, fmt.Errorf("table %s: search: time_column %q is not a plain identifier", table, s.TimeColumn))
	}
	for _, col := range []struct{ what, v string }{{"title_column", s.TitleColumn}, {"workspace_column", s.WorkspaceColumn}} {
		if col.v != "" && !identifier.MatchString(col.v) {
			errs = append(errs, fmt.Errorf("table %s: search: %s %q is not a plain identifier", table, col.what, col.v))
		}
	}
	return errors.Join(errs...)
}
