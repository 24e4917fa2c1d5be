package api

// GET /v1/documents: search the documents table by workspace, title and a
// window of its configured time column, newest first, a page at a time.
// The table's `search` section (tables.Search) names the columns.

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/tributary/tributary/internal/query"
	"github.com/tributary/tributary/internal/rowkey"
	"github.com/tributary/tributary/internal/tables"
)

// Search limits.
const (
	defaultSearchLimit = 50
	maxSearchLimit     = query.MaxSearchLimit
	// maxSearchRange is the widest window; without from= the window is the
	// maxSearchRange before to= (or before now).
	maxSearchRange = 366 * 24 * time.Hour
	// maxTitleRunes bounds title=.
	maxTitleRunes = 200
)

// searchParams is a parsed and validated search.
type searchParams struct {
	req query.SearchRequest
	// filters fingerprints the filters as given (not the defaults), for
	// the cursor.
	filters [8]byte
	// openTo: no to= was given (the window has no upper bound).
	openTo bool
}

// parseSearchQuery validates a raw query string against the table's search
// configuration. now is the time a default window ends at. Every failure
// is a 400 *Error naming the parameter; empty values count as absent.
func parseSearchQuery(raw string, t *tables.Table, now time.Time) (searchParams, error) {
	var p searchParams
	v, err := url.ParseQuery(raw)
	if err != nil {
		return p, badRequest("bad_query", "the query string is malformed: %v", err)
	}
	if err := checkSearchParams(v); err != nil {
		return p, err
	}
	cfg := t.Search
	p.req = query.SearchRequest{Table: t.Name, IDColumn: t.IDColumn, TimeColumn: cfg.TimeColumn,
		IDColumns:       t.IDColumns,
		WorkspaceColumn: cfg.WorkspaceColumn, TitleColumn: cfg.TitleColumn, Limit: defaultSearchLimit}
	if err := searchFilters(v, cfg, &p.req); err != nil {
		return p, err
	}
	if err := searchWindow(v, t.Name, now, &p); err != nil {
		return p, err
	}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > maxSearchLimit {
			return p, badRequest("bad_limit", "limit %q is not a number in 1..%d", clip(l), maxSearchLimit)
		}
		p.req.Limit = n
	}
	return p, searchCursor(v.Get("cursor"), t, &p)
}

// checkSearchParams refuses parameters the search does not know, and any
// but after= given twice.
func checkSearchParams(v url.Values) error {
	known := map[string]bool{"workspace": true, "title": true, "from": true, "to": true, "limit": true,
		"cursor": true, "after": true, "wait": true}
	for k, vals := range v {
		if !known[k] {
			return badRequest("unknown_parameter", "unknown parameter %q; use workspace, title, from, to, limit, cursor, after, wait", k)
		}
		if k != "after" && len(vals) > 1 {
			return badRequest("bad_"+k, "%s may be given once", k)
		}
	}
	return nil
}

// searchFilters reads workspace= and title= into req; each needs its
// column in the table's search configuration.
func searchFilters(v url.Values, cfg *tables.Search, req *query.SearchRequest) error {
	if ws := v.Get("workspace"); ws != "" {
		if cfg.WorkspaceColumn == "" {
			return badRequest("bad_workspace", "the workspace filter needs workspace_column in the table's search configuration")
		}
		if !workspaceParam.MatchString(ws) {
			return badRequest("bad_workspace", "workspace %q is not an id (1 to 64 letters, digits, _ . : -)", clip(ws))
		}
		req.Workspace = normalizeWorkspace(ws)
	}
	if title := v.Get("title"); title != "" {
		if cfg.TitleColumn == "" {
			return badRequest("bad_title", "the title filter needs title_column in the table's search configuration")
		}
		if !utf8.ValidString(title) || utf8.RuneCountInString(title) > maxTitleRunes ||
			strings.ContainsFunc(title, unicode.IsControl) {
			return badRequest("bad_title", "title must be 1 to %d characters of UTF-8 text without control characters", maxTitleRunes)
		}
		req.Title = title
	}
	return nil
}

// searchWindow reads from= and to= into p's request and fingerprints the
// filters as given (p.filters: a default window start moves with now;
// the cursor carries the first page's). Without to= the window ends at
// now, without from= it starts maxSearchRange before its end.
func searchWindow(v url.Values, table string, now time.Time, p *searchParams) error {
	from, err := optionalInstant(v, "from")
	if err != nil {
		return err
	}
	to, err := optionalInstant(v, "to")
	if err != nil {
		return err
	}
	p.filters = filterPrint("search", table, p.req.Workspace, p.req.Title, instantText(from), instantText(to))
	end := to
	if to.IsZero() {
		p.openTo = true
		end = now.UTC().Truncate(time.Second)
	}
	if from.IsZero() {
		from = end.Add(-maxSearchRange)
	}
	switch {
	case !to.IsZero() && !from.Before(to):
		return badRequest("bad_range", "from (%s) must be before to (%s): the window is [from, to)",
			from.Format(time.RFC3339), to.Format(time.RFC3339))
	case end.Sub(from) > maxSearchRange:
		return badRequest("bad_range", "the window may span at most %d days (without to=, it ends now); narrow it",
			int(maxSearchRange/(24*time.Hour)))
	}
	p.req.From, p.req.To = from, to
	return nil
}

// searchCursor continues p after the page cursor raw ended at (none when
// empty); a cursor of other filters, or not one this API returned, is
// refused.
func searchCursor(raw string, t *tables.Table, p *searchParams) error {
	c, err := cursorParam(raw, cursorSearch, p.filters)
	if err != nil || c == nil {
		return err
	}
	okID := idText.MatchString(c.id)
	if t.Composite() {
		_, err := rowkey.Parse(c.id, len(t.Key()))
		okID = err == nil && len(c.id) <= maxKeyLen
	}
	if !okID || c.table != "" {
		return badRequest("bad_cursor", "cursor is not one this API returned; start again without it")
	}
	// The first page fixed the window's start (it moves with now).
	p.req.From = time.Unix(c.from, 0).UTC()
	p.req.After = &query.SearchKey{Time: time.Unix(c.time, 0).UTC(), ID: c.id, Shard: c.shard}
	return nil
}

// idText is the text form of an id column (toString of an integer or uuid).
var idText = regexp.MustCompile(`^(-?[0-9]{1,20}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$`)

// optionalInstant reads an optional RFC 3339 time or YYYY-MM-DD date
// (midnight UTC); zero when absent.
func optionalInstant(v url.Values, name string) (time.Time, error) {
	if v.Get(name) == "" {
		return time.Time{}, nil
	}
	return parseInstant(url.Values{name: {v.Get(name)}}, name)
}

// instantText formats a bound for a fingerprint ("" when absent).
func instantText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return strconv.FormatInt(t.Unix(), 10)
}

// normalizeWorkspace gives a workspace id the text form ClickHouse's
// toString gives the column: decimal integers without leading zeros,
// lower-case UUIDs, other ids as given.
func normalizeWorkspace(ws string) string {
	if n, err := strconv.ParseInt(ws, 10, 64); err == nil {
		return strconv.FormatInt(n, 10)
	}
	if u, err := uuid.Parse(ws); err == nil && strings.Count(ws, "-") == 4 {
		return u.String()
	}
	return ws
}

// searchResponse is the answer of GET /v1/documents.
type searchResponse struct {
	Table string `json:"table"`
	// From and To are the effective window (To null when open).
	From      string                 `json:"from"`
	To        *string                `json:"to"`
	Limit     int                    `json:"limit"`
	Documents []query.Copy           `json:"documents"`
	Next      string                 `json:"next_cursor,omitempty"`
	Freshness []query.ShardFreshness `json:"freshness"`
	// Stopped: the table is stopped by the loader (stopped.go).
	Stopped []query.StoppedTable `json:"stopped_tables,omitempty"`
}

func (s *Server) search(w http.ResponseWriter, r *http.Request) error {
	t, ok := s.cfg.Tables.ByName(s.cfg.DocumentsTable)
	if !ok || t.Search == nil {
		return &Error{Status: http.StatusNotFound, Code: "search_not_configured",
			Message: fmt.Sprintf("the documents table %q has no search section in the table configuration", s.cfg.DocumentsTable)}
	}
	p, err := parseSearchQuery(r.URL.RawQuery, t, time.Now())
	if err != nil {
		return err
	}
	// Freshness first: the page includes at least everything up to it.
	fresh, err := s.freshness(w, r, []string{t.Topic})
	if err != nil {
		return err
	}
	stopped, err := s.stoppedIn(r.Context(), []string{t.Topic})
	if err != nil {
		return err
	}
	page, err := s.q.Search(r.Context(), p.req)
	switch {
	case errors.Is(err, query.ErrUnknownTable):
		page = &query.SearchPage{} // nothing loaded yet
	case err != nil:
		return err
	}
	resp := searchResponse{Table: t.Name, From: p.req.From.Format(time.RFC3339), Limit: p.req.Limit,
		Documents: page.Rows, Freshness: fresh, Stopped: stopped}
	if resp.Documents == nil {
		resp.Documents = []query.Copy{}
	}
	if !p.openTo {
		to := p.req.To.Format(time.RFC3339)
		resp.To = &to
	}
	if page.More && len(page.Keys) > 0 {
		k := page.Keys[len(page.Keys)-1]
		resp.Next = cursor{kind: cursorSearch, filters: p.filters, time: k.Time.Unix(), from: p.req.From.Unix(),
			shard: k.Shard, id: k.ID}.encode()
	}
	return writeJSON(w, http.StatusOK, resp)
}
