package tests

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/api"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/query"
	"github.com/tributary/tributary/internal/tables"
)

// Tokens of the API servers these tests build.
const (
	apiDocsToken    = "e2e-docs-token-0123456789"
	apiRevenueToken = "e2e-revenue-token-0123456789"
	apiAdminToken   = "e2e-admin-token-0123456789"
)

// apiServer is an API over p's ClickHouse database whose documents table
// is searchable (title, created_at, workspace_id) and which requires the
// tokens above. The harness's own p.api is open and not searchable.
func apiServer(t *testing.T, p *pipeline) *httptest.Server {
	t.Helper()
	cfg := *p.tables
	cfg.Tables = slices.Clone(p.tables.Tables)
	cfg.Tables[0].Search = &tables.Search{TimeColumn: "created_at", TitleColumn: "title", WorkspaceColumn: "workspace_id"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	tokens, err := api.ParseTokens(strings.Join([]string{
		"support:" + apiDocsToken + ":documents:read",
		"finance:" + apiRevenueToken + ":revenue:read",
		"ops:" + apiAdminToken + ":admin",
	}, "\n"), false)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.New(api.Config{Tables: &cfg, DocumentsTable: p.table(), QueryTimeout: 15 * time.Second, Tokens: tokens, Shards: p.shards},
		query.New(p.store.Conn(), p.chDB), p.log, prometheus.NewRegistry()))
	t.Cleanup(srv.Close) // before the pipeline's cleanup (LIFO)
	return srv
}

// apiGet GETs base+path with token (none if empty) and returns the status,
// headers and body.
func apiGet(ctx context.Context, t *testing.T, base, path, token string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, resp.Header, b
}

// writeDoc runs sql (an INSERT/UPDATE/DELETE ... RETURNING id) on shard in
// its own transaction and returns the id and pg_current_wal_lsn() read on
// the same connection after the COMMIT: the read-your-writes position.
func (p *pipeline) writeDoc(ctx context.Context, shard int, sql string, args ...any) (int64, envelope.LSN) {
	p.t.Helper()
	conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[shard])
	if err != nil {
		p.t.Fatalf("connect shard %d: %v", shard, err)
	}
	defer conn.Close(ctx)
	var id int64
	if err := conn.QueryRow(ctx, sql, args...).Scan(&id); err != nil {
		p.t.Fatalf("shard %d: %s: %v", shard, sql, err)
	}
	var text string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&text); err != nil {
		p.t.Fatal(err)
	}
	lsn, err := envelope.ParseLSN(text)
	if err != nil {
		p.t.Fatal(err)
	}
	return id, lsn
}

// apiError is an error answer.
type apiError struct {
	Code    string `json:"error"`
	Message string `json:"message"`
	Detail  struct {
		Freshness []struct {
			Shard     int    `json:"shard"`
			CommitLSN string `json:"commit_lsn"`
		} `json:"freshness"`
	} `json:"detail"`
}

// TestAPIReadYourWrites: a read with after=S:<pg_current_wal_lsn() after
// the commit> answers with the write on its first try; a position that
// cannot be reached in time is 503 not_yet_visible; and the token scopes
// decide 401, 403 and 200.
func TestAPIReadYourWrites(t *testing.T) {
	p := newPipeline(t, []int{0, 1}, nil)
	srv := apiServer(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tbl := pgx.Identifier{p.table()}.Sanitize()

	// Let the pipeline come up (first watermarks) before timing anything:
	// until both shards have watermarks, after= naming one the API does
	// not know yet would be 400 unknown_shard.
	p.waitFor(ctx, 60*time.Second, "both shards' first watermarks", func() bool { return len(shardsOf(ctx, t, srv.URL)) == 2 })
	first, lsn0 := p.writeDoc(ctx, 0, "INSERT INTO "+tbl+" (workspace_id, title) VALUES (1, 'warm-up') RETURNING id")
	status, _, body := apiGet(ctx, t, srv.URL, fmt.Sprintf("/v1/documents/%d?after=0:%s&wait=30s", first, lsn0), apiDocsToken)
	if status != http.StatusOK {
		t.Fatalf("warm-up read: %d %s", status, body)
	}

	for i, shard := range []int{0, 1, 1, 0, 1} {
		title := fmt.Sprintf("ryw %d", i)
		start := time.Now()
		id, lsn := p.writeDoc(ctx, shard, "INSERT INTO "+tbl+" (workspace_id, title) VALUES (2, $1) RETURNING id", title)
		after := fmt.Sprintf("after=%d:%s", shard, lsn)

		// By id, through the open harness API and through the
		// authenticated one.
		status, _, body := apiGet(ctx, t, p.api.URL, fmt.Sprintf("/v1/documents/%d?%s&wait=10s", id, after), "")
		var doc struct {
			DecodedID struct {
				Kind   string `json:"kind"`
				Shard  *int   `json:"shard"`
				Global bool   `json:"global"`
			} `json:"decoded_id"`
			Copies []struct {
				Shard     int            `json:"shard"`
				CommitLSN string         `json:"commit_lsn"`
				Row       map[string]any `json:"row"`
			} `json:"copies"`
		}
		if status != http.StatusOK || json.Unmarshal(body, &doc) != nil || len(doc.Copies) != 1 ||
			doc.Copies[0].Row["title"] != title || doc.Copies[0].Shard != shard {
			t.Fatalf("write %d on shard %d at %s: read with %s answered %d %s", i, shard, lsn, after, status, body)
		}
		took := time.Since(start)
		if doc.DecodedID.Kind != "snowflake" || doc.DecodedID.Shard == nil || *doc.DecodedID.Shard != shard || !doc.DecodedID.Global {
			t.Errorf("decoded id %+v, want a global snowflake made on shard %d", doc.DecodedID, shard)
		}
		t.Logf("write on shard %d visible through after= in %v", shard, took.Round(time.Millisecond))

		// Search sees it too, on the first try.
		status, _, body = apiGet(ctx, t, srv.URL, "/v1/documents?workspace=2&title="+url.QueryEscape(title)+"&"+after, apiDocsToken)
		var page struct {
			Documents []struct {
				Row map[string]any `json:"row"`
			} `json:"documents"`
		}
		if status != http.StatusOK || json.Unmarshal(body, &page) != nil || len(page.Documents) != 1 || page.Documents[0].Row["id"] != strconv.FormatInt(id, 10) {
			t.Fatalf("search with %s: %d %s", after, status, body)
		}
	}

	// A position far in the future is not reached in 1 ms: 503 with
	// Retry-After and the named shard's freshness. On every read route.
	for _, path := range []string{
		fmt.Sprintf("/v1/documents/%d", first), "/v1/documents", "/v1/shards",
		"/v1/tables/" + p.table() + "/rows/1", "/v1/anomalies/duplicates",
	} {
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		status, hdr, body := apiGet(ctx, t, srv.URL, path+sep+"after=1:FFFFFFFF/0&wait=1ms", apiAdminToken)
		var e apiError
		if status != http.StatusServiceUnavailable || json.Unmarshal(body, &e) != nil || e.Code != "not_yet_visible" ||
			hdr.Get("Retry-After") == "" || len(e.Detail.Freshness) != 1 || e.Detail.Freshness[0].Shard != 1 {
			t.Errorf("%s with an unreachable position: %d %v %s", path, status, hdr, body)
		}
	}
	for _, bad := range []string{"after=1", "after=x:0/1", "after=1:0/1&wait=1h", "after=1:0/1/2"} {
		status, _, body := apiGet(ctx, t, srv.URL, "/v1/shards?"+bad, apiAdminToken)
		if status != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", bad, status, body)
		}
	}

	// Authentication: 401 without or with an unknown token, 403 with a
	// token lacking the scope, 200 with the scope; open routes stay open.
	docPath := fmt.Sprintf("/v1/documents/%d", first)
	for _, c := range []struct {
		path, token string
		want        int
	}{
		{docPath, "", http.StatusUnauthorized},
		{docPath, "not-a-token-of-this-server", http.StatusUnauthorized},
		{docPath, apiRevenueToken, http.StatusForbidden},
		{docPath, apiDocsToken, http.StatusOK},
		{docPath, apiAdminToken, http.StatusOK},
		{"/v1/documents?title=ryw", apiRevenueToken, http.StatusForbidden},
		{"/v1/documents?title=ryw", apiDocsToken, http.StatusOK},
		{"/v1/anomalies/duplicates", "", http.StatusUnauthorized},
		{"/v1/anomalies/duplicates", apiDocsToken, http.StatusOK},
		{"/v1/revenue?from=2026-11-01&to=2026-12-01", apiDocsToken, http.StatusForbidden},
		{"/v1/shards", "", http.StatusUnauthorized},
		{"/v1/shards", apiRevenueToken, http.StatusOK},
		{"/healthz", "", http.StatusOK},
		{"/readyz", "", http.StatusOK},
		{"/v1/openapi.json", "", http.StatusOK},
	} {
		status, hdr, body := apiGet(ctx, t, srv.URL, c.path, c.token)
		if status != c.want {
			t.Errorf("%s with token %q: %d %s, want %d", c.path, c.token, status, body, c.want)
		}
		if status == http.StatusUnauthorized && !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: 401 without WWW-Authenticate: Bearer", c.path)
		}
		if status >= 400 && hdr.Get("Content-Type") != "application/json" {
			t.Errorf("%s: error as %q", c.path, hdr.Get("Content-Type"))
		}
	}
	for base, want := range map[string]string{srv.URL: "on", p.api.URL: "off"} {
		_, _, body := apiGet(ctx, t, base, "/readyz", "")
		var r map[string]any // in cluster mode "replicas" is a list
		if json.Unmarshal(body, &r) != nil || r["auth"] != want {
			t.Errorf("readyz of %s: %s, want auth %s", base, body, want)
		}
	}
}

// searchDoc is a document as the test expects it in search results.
type searchDoc struct {
	id      int64
	shard   int
	created time.Time
}

// TestAPISearchAndDuplicates: paging through a search returns every
// matching live row exactly once, newest first, whatever the page size —
// with updates, deletes, ties on the time column and one id live on two
// shards; the duplicate is listed by /v1/anomalies/duplicates.
func TestAPISearchAndDuplicates(t *testing.T) {
	p := newPipeline(t, []int{0, 1}, nil)
	srv := apiServer(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tbl := pgx.Identifier{p.table()}.Sanitize()
	insert := "INSERT INTO " + tbl + " (workspace_id, title, created_at) VALUES ($1, $2, $3) RETURNING id"

	base := time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC)
	const ws = 77
	var want []searchDoc
	last := map[int]envelope.LSN{}
	titles := []string{"Needle report", "the NEEDLE", "a neeDle here", "50% off_needle"}
	for i := range 60 {
		shard := i % 2
		created := base.Add(time.Duration(i/4) * time.Hour) // four rows per second: ties
		id, lsn := p.writeDoc(ctx, shard, insert, ws, titles[i%len(titles)], created)
		last[shard] = lsn
		want = append(want, searchDoc{id, shard, created})
	}
	// Rows that must not match: another workspace, another title, outside
	// the window.
	p.writeDoc(ctx, 0, insert, ws+1, "Needle elsewhere", base)
	p.writeDoc(ctx, 1, insert, ws, "haystack", base)
	_, last[1] = p.writeDoc(ctx, 1, insert, ws, "late needle", base.Add(60*24*time.Hour))
	// Updates and deletes: a renamed row leaves the results, a deleted
	// one too, a moved one changes place.
	rename, del, move := want[5], want[10], want[20]
	_, last[rename.shard] = p.writeDoc(ctx, rename.shard, "UPDATE "+tbl+" SET title = 'renamed' WHERE id = $1 RETURNING id", rename.id)
	_, last[del.shard] = p.writeDoc(ctx, del.shard, "DELETE FROM "+tbl+" WHERE id = $1 RETURNING id", del.id)
	moved := base.Add(-time.Hour)
	_, last[move.shard] = p.writeDoc(ctx, move.shard, "UPDATE "+tbl+" SET created_at = $2 WHERE id = $1 RETURNING id", move.id, moved)
	want = slices.DeleteFunc(want, func(d searchDoc) bool { return d.id == rename.id || d.id == del.id })
	for i := range want {
		if want[i].id == move.id {
			want[i].created = moved
		}
	}
	// One id live on two shards (a half-done move): listed once per shard.
	dup := want[0]
	other := 1 - dup.shard
	_, last[other] = p.writeDoc(ctx, other, "INSERT INTO "+tbl+" (id, workspace_id, title, created_at) VALUES ($1, $2, 'needle copy', $3) RETURNING id",
		dup.id, ws, dup.created)
	want = append(want, searchDoc{dup.id, other, dup.created})

	// Newest first: time, then id text, then shard, all descending.
	slices.SortFunc(want, func(a, b searchDoc) int {
		return cmp.Or(b.created.Compare(a.created), cmp.Compare(strconv.FormatInt(b.id, 10), strconv.FormatInt(a.id, 10)), cmp.Compare(b.shard, a.shard))
	})
	after := fmt.Sprintf("after=0:%s&after=1:%s&wait=30s", last[0], last[1])
	filters := url.Values{"workspace": {strconv.Itoa(ws)}, "title": {"needle"}, "from": {"2026-09-30"}, "to": {"2026-11-01"}}

	for _, limit := range []int{7, 1, 500} {
		var got []searchDoc
		cursor := ""
		for pages := 0; ; pages++ {
			if pages > len(want)+2 {
				t.Fatalf("limit %d: pagination does not end", limit)
			}
			q := url.Values{}
			for k, v := range filters {
				q[k] = v
			}
			q.Set("limit", strconv.Itoa(limit))
			if cursor != "" {
				q.Set("cursor", cursor)
			}
			status, _, body := apiGet(ctx, t, srv.URL, "/v1/documents?"+q.Encode()+"&"+after, apiDocsToken)
			var page struct {
				Documents []struct {
					Shard int            `json:"shard"`
					Row   map[string]any `json:"row"`
				} `json:"documents"`
				Next string `json:"next_cursor"`
			}
			if status != http.StatusOK || json.Unmarshal(body, &page) != nil {
				t.Fatalf("limit %d page %d: %d %s", limit, pages, status, body)
			}
			if len(page.Documents) > limit {
				t.Fatalf("limit %d: page of %d", limit, len(page.Documents))
			}
			for _, d := range page.Documents {
				id, _ := strconv.ParseInt(fmt.Sprint(d.Row["id"]), 10, 64)
				created, _ := time.Parse(time.RFC3339, fmt.Sprint(d.Row["created_at"]))
				got = append(got, searchDoc{id, d.Shard, created})
			}
			if page.Next == "" {
				break
			}
			cursor = page.Next
		}
		if !slices.EqualFunc(got, want, func(a, b searchDoc) bool {
			return a.id == b.id && a.shard == b.shard && a.created.Equal(b.created)
		}) {
			t.Fatalf("limit %d: got %d rows\n%v\nwant %d\n%v", limit, len(got), got, len(want), want)
		}
	}

	// `%` and `_` are plain characters; the match ignores case.
	status, _, body := apiGet(ctx, t, srv.URL, "/v1/documents?workspace=77&title="+url.QueryEscape("50% OFF_")+"&"+after, apiDocsToken)
	var page struct {
		Documents []map[string]any `json:"documents"`
	}
	if status != http.StatusOK || json.Unmarshal(body, &page) != nil || len(page.Documents) != 15 {
		t.Errorf("title with %% and _: %d, %d documents, want 15", status, len(page.Documents))
	}
	// A cursor is tied to its filters, and refused when altered.
	status, _, body = apiGet(ctx, t, srv.URL, "/v1/documents?workspace=77&limit=1", apiDocsToken)
	var first struct {
		Next string `json:"next_cursor"`
	}
	if status != http.StatusOK || json.Unmarshal(body, &first) != nil || first.Next == "" {
		t.Fatalf("first page: %d %s", status, body)
	}
	for _, q := range []string{"workspace=78&cursor=" + first.Next, "workspace=77&cursor=" + first.Next[:len(first.Next)-2] + "AA",
		"workspace=77&cursor=" + first.Next + "A"} {
		if status, _, body := apiGet(ctx, t, srv.URL, "/v1/documents?"+q, apiDocsToken); status != http.StatusBadRequest ||
			!strings.Contains(string(body), "bad_cursor") {
			t.Errorf("%s: %d %s, want 400 bad_cursor", q, status, body)
		}
	}

	// The duplicate is an open anomaly on shards 0 and 1, then alerting
	// (the harness loader's grace period is 3 s).
	dupID := strconv.FormatInt(dup.id, 10)
	for _, state := range []string{"open", "alerting"} {
		deadline := time.Now().Add(30 * time.Second)
		for {
			status, _, body := apiGet(ctx, t, srv.URL, "/v1/anomalies/duplicates?table="+p.table()+"&state="+state, apiDocsToken)
			var list struct {
				Anomalies []query.Anomaly `json:"anomalies"`
			}
			if status != http.StatusOK || json.Unmarshal(body, &list) != nil {
				t.Fatalf("anomalies: %d %s", status, body)
			}
			i := slices.IndexFunc(list.Anomalies, func(a query.Anomaly) bool { return a.ID == dupID })
			if i >= 0 {
				a := list.Anomalies[i]
				if a.Kind != "duplicate" || !slices.Equal(a.Shards, []uint16{0, 1}) || a.Resolved || a.Table != p.table() ||
					a.FirstSeen.IsZero() || a.LastSeen.Before(a.FirstSeen) || (state == "alerting" && !a.Alerted) {
					t.Fatalf("anomaly %+v", a)
				}
				break
			}
			if err := p.failed(); err != nil || time.Now().After(deadline) {
				t.Fatalf("no %s duplicate %s listed (last %s; %v)", state, dupID, body, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// More duplicates, listed one per page, each exactly once.
	dups := []string{dupID}
	for _, d := range want[3:5] {
		if d.id == dup.id {
			continue
		}
		p.writeDoc(ctx, 1-d.shard, "INSERT INTO "+tbl+" (id, workspace_id, title, created_at) VALUES ($1, 1, 'copy', $2) RETURNING id", d.id, d.created)
		dups = append(dups, strconv.FormatInt(d.id, 10))
	}
	slices.Sort(dups)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var listed []string
		cursor := ""
		for {
			path := "/v1/anomalies/duplicates?state=open&limit=1&table=" + p.table()
			if cursor != "" {
				path += "&cursor=" + cursor
			}
			status, _, body := apiGet(ctx, t, srv.URL, path, apiDocsToken)
			var list struct {
				Anomalies []query.Anomaly `json:"anomalies"`
				Next      string          `json:"next_cursor"`
			}
			if status != http.StatusOK || json.Unmarshal(body, &list) != nil || len(list.Anomalies) > 1 {
				t.Fatalf("anomalies page: %d %s", status, body)
			}
			for _, a := range list.Anomalies {
				listed = append(listed, a.ID)
			}
			if cursor = list.Next; cursor == "" {
				break
			}
		}
		slices.Sort(listed)
		if slices.Equal(listed, dups) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("paged anomalies %v, want %v", listed, dups)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
