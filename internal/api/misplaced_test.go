package api

import (
	"errors"
	"net/http"
	"reflect"
	"testing"

	"github.com/tributary/tributary/internal/query"
)

func TestParseMisplacedQuery(t *testing.T) {
	docs := query.PlacedTable{Name: "documents", IDColumn: "id", ShardKey: "workspace_id"}
	inv := query.PlacedTable{Name: "invoices", IDColumn: "id", ShardKey: "workspace_id"}
	all := []query.PlacedTable{docs, inv}
	next := cursor{kind: cursorMisplaced, filters: filterPrint("misplaced", "invoices"), table: "invoices", id: "42", shard: 3}.encode()
	for _, c := range []struct {
		query  string
		tables []query.PlacedTable
		limit  int
		after  *query.MisplacedKey
		code   string
	}{
		{query: "", tables: all, limit: 50},
		{query: "table=invoices&limit=500", tables: []query.PlacedTable{inv}, limit: 500},
		{query: "table=invoices&cursor=" + next, tables: []query.PlacedTable{inv}, limit: 50,
			after: &query.MisplacedKey{Table: "invoices", ID: "42", Shard: 3}},
		{query: "after=0:0/1&wait=1s", tables: all, limit: 50},
		{query: "table=accounts", code: "bad_table"}, // not placed by the ring map
		{query: "table=documents&table=invoices", code: "bad_table"},
		{query: "limit=0", code: "bad_limit"},
		{query: "limit=501", code: "bad_limit"},
		{query: "limit=ten", code: "bad_limit"},
		{query: "state=open", code: "unknown_parameter"},
		{query: "cursor=zzz", code: "bad_cursor"},
		{query: "cursor=" + next, code: "bad_cursor"}, // issued for table=invoices
		{query: "table=invoices&cursor=" + cursor{kind: cursorAnomalies, filters: filterPrint("misplaced", "invoices"), table: "invoices", id: "1"}.encode(), code: "bad_cursor"},
		{query: "cursor=" + cursor{kind: cursorMisplaced, filters: filterPrint("misplaced", ""), table: "other", id: "1"}.encode(), code: "bad_cursor"},
		{query: "cursor=" + cursor{kind: cursorMisplaced, filters: filterPrint("misplaced", ""), table: "invoices"}.encode(), code: "bad_cursor"},
		{query: "%zz", code: "bad_query"},
	} {
		req, _, err := parseMisplacedQuery(c.query, all)
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
		if !reflect.DeepEqual(req.Tables, c.tables) || req.Limit != c.limit ||
			(req.After == nil) != (c.after == nil) || (c.after != nil && *req.After != *c.after) {
			t.Errorf("%q: %+v, after %+v", c.query, req, req.After)
		}
	}
}
