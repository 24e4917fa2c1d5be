package api

import (
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/tributary/tributary/internal/query"
)

func TestParseDuplicatesQuery(t *testing.T) {
	all := []string{"documents", "invoices"}
	openDocs := filterPrint("duplicates", "documents", "open")
	next := cursor{kind: cursorAnomalies, filters: openDocs, time: 1790000000, table: "documents", id: "42"}.encode()
	for _, c := range []struct {
		query  string
		tables []string
		state  query.AnomalyState
		limit  int
		after  *query.AnomalyKey
		code   string
	}{
		{query: "", tables: all, state: "open", limit: 50},
		{query: "table=documents&state=alerting&limit=500", tables: []string{"documents"}, state: "alerting", limit: 500},
		{query: "state=all&limit=1", tables: all, state: "all", limit: 1},
		{query: "table=documents&cursor=" + next, tables: []string{"documents"}, state: "open", limit: 50,
			after: &query.AnomalyKey{FirstSeen: time.Unix(1790000000, 0).UTC(), Table: "documents", ID: "42"}},
		{query: "table=documents&state=open&after=0:0/1&wait=1s", tables: []string{"documents"}, state: "open", limit: 50},
		{query: "table=nope", code: "bad_table"},
		{query: "table=documents&table=invoices", code: "bad_table"},
		{query: "state=closed", code: "bad_state"},
		{query: "limit=0", code: "bad_limit"},
		{query: "limit=501", code: "bad_limit"},
		{query: "kind=duplicate", code: "unknown_parameter"},
		{query: "cursor=zzz", code: "bad_cursor"},
		{query: "table=documents&state=all&cursor=" + next, code: "bad_cursor"},
		{query: "cursor=" + cursor{kind: cursorAnomalies, filters: filterPrint("duplicates", "", "open"), table: "other", id: "1"}.encode(), code: "bad_cursor"},
		{query: "cursor=" + cursor{kind: cursorAnomalies, filters: filterPrint("duplicates", "", "open"), table: "documents"}.encode(), code: "bad_cursor"},
		{query: "%zz", code: "bad_query"},
	} {
		req, _, err := parseDuplicatesQuery(c.query, all)
		if c.code != "" {
			var e *Error
			if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Code != c.code {
				t.Errorf("%q: error %v, want 400 %s", c.query, err, c.code)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.query, err)
			continue
		}
		if !slices.Equal(req.Tables, c.tables) || req.State != c.state || req.Limit != c.limit ||
			(req.After == nil) != (c.after == nil) || (c.after != nil && *req.After != *c.after) {
			t.Errorf("%q: %+v, after %+v", c.query, req, req.After)
		}
	}
}
