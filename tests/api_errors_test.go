package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestAPICallerMistakesAre4xx: through the real API over a two-shard
// pipeline, every mistake of the caller's is a 400 that says what is
// wrong — a UUID looked up on a table whose id_layout makes bigints, an id
// longer than any layout, after= naming a shard the fleet does not have
// (at once, though wait= allows 30 s) — and odd but valid parameters of
// every route are answered, never a 5xx. Only with ClickHouse really down
// is the answer 503 (with Retry-After).
func TestAPICallerMistakesAre4xx(t *testing.T) {
	p := newPipeline(t, []int{0, 1}, nil)
	srv := apiServer(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tbl := pgx.Identifier{p.table()}.Sanitize()

	// Both shards are known (their first watermarks are in) and a row is
	// there to look up.
	id, lsn := p.writeDoc(ctx, 1, "INSERT INTO "+tbl+" (workspace_id, title) VALUES (5, 'probe') RETURNING id")
	p.waitFor(ctx, 60*time.Second, "both shards in /v1/shards and the row visible", func() bool {
		s, _, b := apiGet(ctx, t, srv.URL, fmt.Sprintf("/v1/documents/%d?after=1:%s&wait=1s", id, lsn), apiDocsToken)
		return s == http.StatusOK && len(shardsOf(ctx, t, srv.URL)) == 2 && len(b) > 0
	})

	const aUUID = "0190a4e2-1c3b-7000-8000-000000000001"
	for _, c := range []struct {
		path, code, mention string
	}{
		{"/v1/documents/" + aUUID, "wrong_id_kind", `id_layout "seed000"`},
		{"/v1/tables/" + p.table() + "/rows/" + aUUID, "wrong_id_kind", `id_layout "seed000"`},
		{"/v1/documents/" + strings.Repeat("7", 40), "bad_id", "longer than any id layout"},
		{"/v1/tables/" + p.table() + "/rows/" + strings.Repeat("a", 37), "bad_id", "longer than any id layout"},
		{"/v1/documents/99999999999999999999", "bad_id", "beyond the range of a bigint"},
		// wait=30s: a 400, not a 503 after the wait, is "at once".
		{"/v1/shards?after=99:0/0&wait=30s", "unknown_shard", "shard 99"},
		{fmt.Sprintf("/v1/documents/%d?after=1:0/1,99:0/0&wait=30s", id), "unknown_shard", "the shards are 0, 1"},
		{"/v1/documents?title=x&after=99:0/0&wait=30s", "unknown_shard", "shard 99"},
	} {
		start := time.Now()
		status, _, body := apiGet(ctx, t, srv.URL, c.path, apiAdminToken)
		var e apiError
		if status != http.StatusBadRequest || json.Unmarshal(body, &e) != nil || e.Code != c.code || !strings.Contains(e.Message, c.mention) {
			t.Errorf("GET %s: %d %s; want 400 %s mentioning %q", c.path, status, body, c.code, c.mention)
		}
		t.Logf("GET %s: %d %s in %v", c.path, status, e.Code, time.Since(start).Round(time.Millisecond))
	}

	// Odd but well-formed parameters of every route: never a 5xx (each
	// either answers or is a 4xx naming the parameter).
	for _, path := range []string{
		"/v1/documents/0", "/v1/documents/-9223372036854775808", "/v1/documents/9223372036854775807",
		"/v1/tables/" + p.table() + "/rows/-1",
		"/v1/documents?workspace=not-a-number", "/v1/documents?workspace=" + aUUID,
		"/v1/documents?title=" + url.QueryEscape(`%_\'"`), "/v1/documents?to=1970-01-02",
		"/v1/documents?from=1970-01-01&to=1970-01-02", "/v1/documents?from=2105-12-01&to=2106-01-01",
		"/v1/documents?from=1969-12-31", "/v1/documents?to=9999-12-31",
		"/v1/documents?limit=500&cursor=AAAA",
		"/v1/anomalies/duplicates?table=" + p.table() + "&state=all&limit=1",
		"/v1/anomalies/duplicates?cursor=zz", "/v1/anomalies/misplaced", "/v1/anomalies/moves",
		"/v1/shards?after=0:FFFFFFFF/FFFFFFFF&wait=0s",
	} {
		status, _, body := apiGet(ctx, t, srv.URL, path, apiAdminToken)
		if status >= 500 && !(status == http.StatusServiceUnavailable && strings.Contains(string(body), "not_yet_visible")) {
			t.Errorf("GET %s: %d %s; want an answer or a 4xx", path, status, body)
		}
		t.Logf("GET %s: %d", path, status)
	}

	// ClickHouse really down: 503 backend_unavailable with Retry-After,
	// and /readyz says not ready. ClickHouse comes back afterwards.
	home := p.stack.Env["TRIBUTARY_HOME"]
	b, err := os.ReadFile(filepath.Join(home, "clickhouse", "clickhouse-server.pid"))
	if err != nil {
		t.Fatalf("ClickHouse pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("ClickHouse pid %q: %v", b, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill ClickHouse: %v", err)
	}
	defer func() {
		up := exec.CommandContext(ctx, "../deploy/local/stack.sh", "up")
		up.Env = append(os.Environ(), "TRIBUTARY_HOME="+home, "TRIBUTARY_KAFKA="+p.stack.Env["TRIBUTARY_KAFKA_KIND"],
			"TRIBUTARY_SHARDS="+p.stack.Env["TRIBUTARY_SHARDS"])
		if out, err := up.CombinedOutput(); err != nil {
			t.Errorf("stack.sh up after killing ClickHouse: %v\n%s", err, out)
		}
	}()
	p.waitFor(ctx, 30*time.Second, "ClickHouse gone", func() bool {
		s, _, _ := apiGet(ctx, t, srv.URL, "/readyz", "")
		return s == http.StatusServiceUnavailable
	})
	time.Sleep(1100 * time.Millisecond) // older than any shared watermark reading
	for _, path := range []string{fmt.Sprintf("/v1/documents/%d", id), "/v1/documents?title=probe", "/v1/shards"} {
		status, hdr, body := apiGet(ctx, t, srv.URL, path, apiAdminToken)
		var e apiError
		if status != http.StatusServiceUnavailable || json.Unmarshal(body, &e) != nil || e.Code != "backend_unavailable" || hdr.Get("Retry-After") == "" {
			t.Errorf("GET %s with ClickHouse down: %d %v %s; want 503 backend_unavailable with Retry-After", path, status, hdr, body)
		}
	}
}

// shardsOf lists the shards /v1/shards reports.
func shardsOf(ctx context.Context, t *testing.T, base string) []int {
	t.Helper()
	status, _, body := apiGet(ctx, t, base, "/v1/shards", apiAdminToken)
	var ans struct {
		Shards []struct {
			Shard int `json:"shard"`
		} `json:"shards"`
	}
	if status != http.StatusOK || json.Unmarshal(body, &ans) != nil {
		return nil
	}
	out := make([]int, len(ans.Shards))
	for i, s := range ans.Shards {
		out[i] = s.Shard
	}
	return out
}

// TestAPIRevenueOddParameters: odd but well-formed revenue requests — a
// uuid workspace on a bigint column, bounds at the ends of ClickHouse's
// DateTime, unconfigured statuses, lower-case currencies, the same group
// twice — are answered or are a 4xx naming the parameter, never a 5xx.
func TestAPIRevenueOddParameters(t *testing.T) {
	p, _ := newRevenuePipeline(t, []int{0})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p.exec(ctx, 0, fmt.Sprintf("INSERT INTO %s (account_id, total, currency_code, state, placed_at) VALUES (1, 10.50, 'EUR', 'paid', '2026-11-02')",
		pgx.Identifier{p.table()}.Sanitize()))
	p.waitFor(ctx, 60*time.Second, "the order counted", func() bool {
		s, b := p.getRevenue(ctx, url.Values{"from": {"2026-11-01"}, "to": {"2026-12-01"}}, "application/json")
		return s == http.StatusOK && strings.Contains(string(b), "10.5")
	})
	for _, q := range []string{
		"from=2026-11-01&to=2026-12-01&workspace=0190a4e2-1c3b-7000-8000-000000000001",
		"from=2026-11-01&to=2026-12-01&workspace=not-a-number&group_by=workspace",
		"from=2026-11-01&to=2026-12-01&workspace=-9223372036854775808",
		"from=1970-01-01&to=2106-01-01",
		"from=1970-01-01T00:00:00Z&to=1970-01-01T00:00:01Z&group_by=day",
		"from=2105-12-31&to=2106-01-01&group_by=week",
		"from=1969-12-31&to=2026-01-01",
		"from=2026-11-01&to=2026-12-01&status=nope",
		"from=2026-11-01&to=2026-12-01&currency=eur,usd&group_by=month,month",
		"from=2026-11-01&to=2026-12-01&group_by=shard,workspace,day",
		"from=2026-11-01&to=2026-12-01&format=csv",
	} {
		req, err := url.ParseQuery(q)
		if err != nil {
			t.Fatal(err)
		}
		status, body := p.getRevenue(ctx, req, "")
		if status >= 500 {
			t.Errorf("GET /v1/revenue?%s: %d %s; want an answer or a 4xx", q, status, body)
		}
		t.Logf("GET /v1/revenue?%s: %d", q, status)
	}
}
