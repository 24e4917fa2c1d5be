package query

import (
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// checkExact asserts the invariants of an exact read: FINAL with a plain
// WHERE, tombstones dropped (for row tables), one argument per placeholder.
func checkExact(t *testing.T, sql string, args []any, tombstones bool) {
	t.Helper()
	if !strings.Contains(sql, " FINAL WHERE ") || strings.Contains(strings.ToUpper(sql), "PREWHERE") {
		t.Errorf("not FINAL + plain WHERE:\n%s", sql)
	}
	if tombstones && !strings.Contains(sql, " FINAL WHERE _deleted = 0") {
		t.Errorf("tombstones not dropped:\n%s", sql)
	}
	if n := strings.Count(sql, "?"); n != len(args) {
		t.Errorf("%d placeholders, %d args:\n%s", n, len(args), sql)
	}
}

func TestPlanSearch(t *testing.T) {
	from := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	to := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	base := SearchRequest{Table: "docs", IDColumn: "id", TimeColumn: "created_at", WorkspaceColumn: "workspace_id",
		TitleColumn: "title", From: from, Limit: 50}
	for _, c := range []struct {
		name     string
		req      func(SearchRequest) SearchRequest
		contains []string
		absent   []string
		args     int
	}{{
		name: "no filters, open window",
		req:  func(r SearchRequest) SearchRequest { return r },
		contains: []string{"FROM `db`.`docs` FINAL WHERE _deleted = 0 AND toDateTime(`created_at`, 'UTC') >= ?",
			"ORDER BY __search_time DESC, __search_id DESC, _shard DESC LIMIT 51", "toString(`id`) AS __search_id"},
		absent: []string{"< ?", "position", "workspace_id"},
		args:   1,
	}, {
		name: "every filter and a cursor",
		req: func(r SearchRequest) SearchRequest {
			r.To, r.Workspace, r.Title, r.Limit = to, "7", "Inv%_'oice", 500
			r.After = &SearchKey{Time: to.Add(-time.Hour), ID: "42", Shard: 3}
			return r
		},
		contains: []string{"toDateTime(`created_at`, 'UTC') < ?", "toString(`workspace_id`) = ?",
			"positionCaseInsensitiveUTF8(`title`, ?) > 0", "_shard < ?", "LIMIT 501"},
		absent: []string{"Inv", "LIKE"},
		args:   2 + 1 + 1 + 5,
	}, {
		name: "a composite key and a cursor",
		req: func(r SearchRequest) SearchRequest {
			r.IDColumns = []string{"tenant_id", "line_no"}
			r.After = &SearchKey{Time: to.Add(-time.Hour), ID: `acme\, inc,7`, Shard: 3}
			return r
		},
		contains: []string{"toString(`tenant_id`) AS __search_id, toString(`line_no`) AS __search_id1",
			"ORDER BY __search_time DESC, __search_id DESC, __search_id1 DESC, _shard DESC LIMIT 51",
			"toString(`tenant_id`) = ? AND toString(`line_no`) < ?"},
		absent: []string{"toString(`id`)", "acme"},
		// from; then (t<), (t=, k0<), (t=, k0=, k1<), (t=, k0=, k1=, shard<)
		args: 1 + 1 + 2 + 3 + 4,
	}, {
		name:     "limit clamped",
		req:      func(r SearchRequest) SearchRequest { r.Limit = 100000; return r },
		contains: []string{"LIMIT 501"},
		args:     1,
	}} {
		req := c.req(base)
		sql, args := planSearch("db", req)
		checkExact(t, sql, args, true)
		if len(args) != c.args {
			t.Errorf("%s: %d args, want %d", c.name, len(args), c.args)
		}
		for _, s := range c.contains {
			if !strings.Contains(sql, s) {
				t.Errorf("%s: SQL lacks %q:\n%s", c.name, s, sql)
			}
		}
		for _, s := range c.absent {
			if strings.Contains(sql, s) {
				t.Errorf("%s: SQL has %q:\n%s", c.name, s, sql)
			}
		}
		// Request values are bound, never spliced.
		for _, a := range args {
			if s, ok := a.(string); ok && strings.Contains(sql, s) && s != "" {
				t.Errorf("%s: value %q in the SQL text", c.name, s)
			}
		}
	}
}

func TestPlanDuplicates(t *testing.T) {
	for _, c := range []struct {
		req      DuplicatesRequest
		contains []string
		absent   []string
	}{
		{DuplicatesRequest{Tables: []string{"documents"}, State: StateOpen, Limit: 10},
			[]string{"FROM `db`._anomalies FINAL WHERE source_table IN ? AND resolved = 0", "LIMIT 11"}, []string{"alerted = 1"}},
		{DuplicatesRequest{Tables: []string{"a", "b"}, State: StateAlerting, Limit: 500},
			[]string{"resolved = 0 AND alerted = 1", "ORDER BY first_seen DESC, source_table DESC, id DESC LIMIT 501"}, nil},
		{DuplicatesRequest{Tables: []string{"a"}, State: StateAll, Limit: 1,
			After: &AnomalyKey{FirstSeen: time.Unix(1790000000, 0), Table: "a", ID: "x' OR 1=1"}},
			[]string{"first_seen < ?", "id < ?"}, []string{"resolved = 0", "x' OR"}},
	} {
		sql, args := planDuplicates("db", c.req)
		checkExact(t, sql, args, false)
		gs, ok := args[0].(clickhouse.GroupSet)
		if !ok || len(gs.Value) != len(c.req.Tables) {
			t.Errorf("tables bound as %#v", args[0])
		}
		for _, s := range c.contains {
			if !strings.Contains(sql, s) {
				t.Errorf("SQL lacks %q:\n%s", s, sql)
			}
		}
		for _, s := range c.absent {
			if strings.Contains(sql, s) {
				t.Errorf("SQL has %q:\n%s", s, sql)
			}
		}
	}
}
