package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tributary/tributary/internal/query"
	"github.com/tributary/tributary/internal/tables"
)

func searchTable(t *testing.T, s *tables.Search) *tables.Table {
	t.Helper()
	return &tables.Table{Name: "documents", IDColumn: "id", IDLayout: "seed000", Search: s}
}

var fullSearch = &tables.Search{TimeColumn: "created_at", TitleColumn: "title", WorkspaceColumn: "workspace_id"}

func TestParseSearchQuery(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 500, time.UTC)
	nowS := now.Truncate(time.Second)
	nov := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	dec := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	tbl := searchTable(t, fullSearch)
	for _, c := range []struct {
		query     string
		workspace string
		title     string
		from, to  time.Time
		limit     int
	}{
		{query: "", from: nowS.Add(-maxSearchRange), limit: 50},
		{query: "workspace=007&title=Invoice%20%25_&limit=500", workspace: "7", title: "Invoice %_", from: nowS.Add(-maxSearchRange), limit: 500},
		{query: "workspace=0190A4E2-1C3B-7000-8000-000000000001", workspace: "0190a4e2-1c3b-7000-8000-000000000001", from: nowS.Add(-maxSearchRange), limit: 50},
		{query: "title=%C3%A9t%C3%A9&limit=1", title: "été", from: nowS.Add(-maxSearchRange), limit: 1},
		{query: "from=2026-11-01&to=2026-12-01", from: nov, to: dec, limit: 50},
		{query: "to=2026-12-01", from: dec.Add(-maxSearchRange), to: dec, limit: 50},
		{query: "from=2026-11-01", from: nov, limit: 50},
		{query: "from=2026-11-01T01:00:00%2B01:00&to=2026-12-01T00:00:00Z", from: nov, to: dec, limit: 50},
		{query: "workspace=&title=&from=&to=&limit=&cursor=", from: nowS.Add(-maxSearchRange), limit: 50},
		{query: "after=0:0/1&after=1:0/2&wait=1s", from: nowS.Add(-maxSearchRange), limit: 50},
	} {
		p, err := parseSearchQuery(c.query, tbl, now)
		if err != nil {
			t.Errorf("%q: %v", c.query, err)
			continue
		}
		r := p.req
		if r.Workspace != c.workspace || r.Title != c.title || !r.From.Equal(c.from) || !r.To.Equal(c.to) || r.Limit != c.limit ||
			r.After != nil || r.Table != "documents" || r.TimeColumn != "created_at" || p.openTo != c.to.IsZero() {
			t.Errorf("%q: %+v", c.query, r)
		}
	}
}

func TestParseSearchQueryRejects(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	timeOnly := &tables.Search{TimeColumn: "created_at"}
	otherFilters := cursor{kind: cursorSearch, filters: filterPrint("search", "documents", "8", "", "", ""), id: "1"}.encode()
	for _, c := range []struct {
		name, query, code string
		search            *tables.Search
	}{
		{"unknown parameter", "q=x", "unknown_parameter", nil},
		{"malformed", "title=%zz", "bad_query", nil},
		{"workspace twice", "workspace=1&workspace=2", "bad_workspace", nil},
		{"limit twice", "limit=1&limit=2", "bad_limit", nil},
		{"bad workspace", "workspace=a%20b", "bad_workspace", nil},
		{"long workspace", "workspace=" + strings.Repeat("1", 65), "bad_workspace", nil},
		{"workspace not configured", "workspace=1", "bad_workspace", timeOnly},
		{"title not configured", "title=x", "bad_title", timeOnly},
		{"long title", "title=" + strings.Repeat("é", maxTitleRunes+1), "bad_title", nil},
		{"control character", "title=a%00b", "bad_title", nil},
		{"newline", "title=a%0Ab", "bad_title", nil},
		{"invalid UTF-8", "title=%FF", "bad_title", nil},
		{"garbage from", "from=yesterday", "bad_from", nil},
		{"sub-second to", "to=2026-11-01T00:00:00.5Z", "bad_to", nil},
		{"from after to", "from=2026-12-01&to=2026-11-01", "bad_range", nil},
		{"empty window", "from=2026-12-01&to=2026-12-01", "bad_range", nil},
		{"over a year", "from=2025-01-01&to=2026-01-03", "bad_range", nil},
		{"open window too wide", "from=2020-01-01", "bad_range", nil},
		{"limit zero", "limit=0", "bad_limit", nil},
		{"limit too big", "limit=501", "bad_limit", nil},
		{"limit not a number", "limit=ten", "bad_limit", nil},
		{"bad cursor", "cursor=xyz", "bad_cursor", nil},
		{"cursor of other filters", "workspace=7&cursor=" + otherFilters, "bad_cursor", nil},
		{"cursor of anomalies", "cursor=" + cursor{kind: cursorAnomalies, table: "documents", id: "1"}.encode(), "bad_cursor", nil},
		{"cursor with a table", "cursor=" + cursor{kind: cursorSearch, filters: filterPrint("search", "documents", "", "", "", ""), table: "x", id: "1"}.encode(), "bad_cursor", nil},
		{"cursor with a hostile id", "cursor=" + cursor{kind: cursorSearch, filters: filterPrint("search", "documents", "", "", "", ""), id: "1' OR 1=1"}.encode(), "bad_cursor", nil},
		{"bad after", "after=1", "bad_after", nil},
	} {
		s := c.search
		if s == nil {
			s = fullSearch
		}
		_, err := parseSearchQuery(c.query, searchTable(t, s), now)
		if c.code == "bad_after" {
			// after= is checked with the freshness, not here.
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		var e *Error
		if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Code != c.code || e.Message == "" {
			t.Errorf("%s: %q: error %v, want 400 %s", c.name, c.query, err, c.code)
		}
	}
}

// TestSearchCursorKeepsWindow: the next page resumes after the cursor's
// row, in the first page's window, whatever now has become; the same
// bounds spelled differently are the same filters.
func TestSearchCursorKeepsWindow(t *testing.T) {
	tbl := searchTable(t, fullSearch)
	first, err := parseSearchQuery("title=x&to=2026-12-01", tbl, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c := cursor{kind: cursorSearch, filters: first.filters, time: 1795000000, from: first.req.From.Unix(), shard: 3, id: "42"}
	next, err := parseSearchQuery("title=x&to=2026-12-01T00:00:00Z&limit=7&cursor="+c.encode(), tbl, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	want := query.SearchKey{Time: time.Unix(1795000000, 0).UTC(), ID: "42", Shard: 3}
	if next.req.After == nil || *next.req.After != want || !next.req.From.Equal(first.req.From) || next.req.Limit != 7 {
		t.Fatalf("next page %+v after %+v", next.req, next.req.After)
	}
}

func TestSearchRouteNotConfigured(t *testing.T) {
	rec := httptest.NewRecorder()
	newTestServer(t).ServeHTTP(rec, httptest.NewRequest("GET", "/v1/documents?title=x", nil))
	var e Error
	if rec.Code != 404 || json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Code != "search_not_configured" {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
}

// FuzzParseSearchQuery: any query string is a 400 *Error or a request the
// query layer can trust.
func FuzzParseSearchQuery(f *testing.F) {
	for _, s := range []string{"", "workspace=7&title=a%25b_c&from=2026-11-01&to=2026-12-01&limit=500",
		"title=" + url.QueryEscape("ünïcödé"), "from=2020-01-01", "cursor=AQ", "limit=-1"} {
		f.Add(s)
	}
	tbl := &tables.Table{Name: "documents", IDColumn: "id", Search: fullSearch}
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, raw string) {
		p, err := parseSearchQuery(raw, tbl, now)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Code == "" {
				t.Fatalf("%q: %v", raw, err)
			}
			return
		}
		r := p.req
		end := r.To
		if end.IsZero() {
			end = now
		}
		if r.Limit < 1 || r.Limit > maxSearchLimit || r.From.Nanosecond() != 0 || r.To.Nanosecond() != 0 ||
			(p.req.After == nil && end.Sub(r.From) > maxSearchRange) || (!r.To.IsZero() && !r.From.Before(r.To)) {
			t.Fatalf("%q: %+v", raw, r)
		}
		if r.Workspace != "" && !workspaceParam.MatchString(r.Workspace) {
			t.Fatalf("%q: workspace %q", raw, r.Workspace)
		}
		if r.After != nil && !idText.MatchString(r.After.ID) {
			t.Fatalf("%q: cursor id %q", raw, r.After.ID)
		}
	})
}
