package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tributary/tributary/internal/query"
	"github.com/tributary/tributary/internal/tables"
)

// readerMetricsFixture is what a cdc-reader of shard 5 exports, in part:
// a snapshot half done and a slot that retains 3 MiB.
const readerMetricsFixture = `# TYPE tributary_reader_lag_bytes gauge
tributary_reader_lag_bytes{shard="5"} 2048
# TYPE tributary_reader_slot_retained_wal_bytes gauge
tributary_reader_slot_retained_wal_bytes{shard="5"} 3.145728e+06
# TYPE tributary_reader_slot_wal_status gauge
tributary_reader_slot_wal_status{shard="5",status="reserved"} 1
tributary_reader_slot_wal_status{shard="5",status="lost"} 0
# TYPE tributary_reader_snapshot_progress_ratio gauge
tributary_reader_snapshot_progress_ratio{shard="5",table="orders"} 0.5
`

// loaderMetricsFixture is a loader's: lag on one partition, two stages,
// dead letters of two reasons.
const loaderMetricsFixture = `# TYPE tributary_loader_records_total counter
tributary_loader_records_total{kind="change",topic="t.orders"} 10
# TYPE tributary_loader_consumer_lag_records gauge
tributary_loader_consumer_lag_records{partition="2",topic="t.orders"} 17
# TYPE tributary_loader_stage_seconds_total counter
tributary_loader_stage_seconds_total{stage="insert"} 3
tributary_loader_stage_seconds_total{stage="poll"} 1
# TYPE tributary_loader_dlq_records_total counter
tributary_loader_dlq_records_total{reason="decode",topic="t.orders"} 4
tributary_loader_dlq_records_total{reason="unmapped_type",topic="t.orders"} 1
`

// newStatusServer is the API over fakes: watermarks of shards 3 and 5,
// no stopped table, and ClickHouse absent for everything else (those
// sections must show their failure).
func newStatusServer(t *testing.T, tokens *Tokens, metrics []string) *Server {
	t.Helper()
	cfg, err := tables.Parse([]byte(`{"tables":[{"name":"orders","id_column":"id","id_layout":"seed000"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Tables: cfg, DocumentsTable: "orders", QueryTimeout: 5 * time.Second, Tokens: tokens, ComponentMetrics: metrics},
		query.New(nil, "tributary"), slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	s.stopped = &stoppedWatch{timeout: time.Second, fetch: func(context.Context, time.Time) ([]query.StoppedTable, error) { return nil, nil }}
	s.watch.fetch = func(context.Context, []string) ([]query.ShardFreshness, error) {
		return []query.ShardFreshness{{Shard: 3, CommitLSN: "0/10", Complete: true}, {Shard: 5, CommitLSN: "0/20", Complete: true}}, nil
	}
	return s
}

func getStatus(t *testing.T, s *Server, token string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Errorf("content type %q, want HTML", ct)
	}
	return rec.Code, rec.Body.String()
}

func TestStatusPageShowsComponentsAndFailures(t *testing.T) {
	serve := func(body string) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, body) }))
		t.Cleanup(srv.Close)
		return srv
	}
	readerSrv, loaderSrv, garbage := serve(readerMetricsFixture), serve(loaderMetricsFixture), serve("{not metrics")
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close() // nothing listens there any more

	s := newStatusServer(t, nil, []string{readerSrv.URL, loaderSrv.URL, garbage.URL, dead.URL})
	code, body := getStatus(t, s, "")
	if code != http.StatusOK {
		t.Fatalf("status %d, want 200:\n%s", code, body)
	}
	for _, want := range []string{
		`data-shard="3"`, `data-shard="5"`, // every shard with a watermark
		"snapshotting 50%", "3.0 MiB", "reserved", // shard 5's reader
		"no reader metrics for this shard: <span class=\"bad\">2 metrics endpoint(s) failed", // shard 3 has none
		"t.orders", ">17<", // lag per partition
		"insert", "75%", // stage shares
		`id="dlq-total">5<`, "unmapped_type", "decode",
		garbage.URL + "</code>: <span class=\"err\">failed: not Prometheus text format",
		dead.URL + "</code>: <span class=\"err\">failed:",
		"#tributaryduplicateids", "/v1/anomalies/duplicates?state=open", "#tributarymovesstuck", "#tributarymisplacedrows",
		"Serial collisions", "Lost moves",
		"404 revenue_not_configured", // no revenue section in the table config
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	// The duplicates listing failed (no ClickHouse here) and there is no
	// move log: each section says so, and the page is still a 200.
	if n := strings.Count(body, "500 query_failed"); n != 2 {
		t.Errorf("%d sections show the duplicates listing's 500, want 2 (duplicates, serial collisions)", n)
	}
	if n := strings.Count(body, "404 no_move_log"); n != 2 {
		t.Errorf("%d sections show the moves listing's 404, want 2 (stuck, lost)", n)
	}
}

func TestStatusPageWithoutMetricsSaysSo(t *testing.T) {
	code, body := getStatus(t, newStatusServer(t, nil, nil), "")
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	if !strings.Contains(body, "No component metrics endpoints are configured") || !strings.Contains(body, `data-shard="5"`) {
		t.Errorf("page without --component-metrics:\n%s", body)
	}
}

func TestStatusPageHonoursTokens(t *testing.T) {
	tokens, err := ParseTokens("oncall:oncall-token-0123456789:revenue:read\nreader:reader-token-0123456789:documents:read", false)
	if err != nil {
		t.Fatal(err)
	}
	s := newStatusServer(t, tokens, nil)
	code, body := getStatus(t, s, "")
	if code != http.StatusUnauthorized || !strings.Contains(body, "This page needs a token") || !strings.Contains(body, `id="token-form"`) {
		t.Errorf("no token: %d\n%s", code, body)
	}
	if strings.Contains(body, `data-shard=`) {
		t.Error("the page without a token shows shards")
	}
	code, body = getStatus(t, s, "wrong-token-0123456789")
	if code != http.StatusUnauthorized || !strings.Contains(body, "the bearer token is not valid") {
		t.Errorf("unknown token: %d\n%s", code, body)
	}
	// A token without documents:read sees freshness but not anomalies.
	code, body = getStatus(t, s, "oncall-token-0123456789")
	if code != http.StatusOK || !strings.Contains(body, `data-shard="3"`) || !strings.Contains(body, "auth: token oncall") {
		t.Errorf("revenue token: %d\n%s", code, body)
	}
	if !strings.Contains(body, "403 forbidden: token &#34;oncall&#34; lacks the anomalies:read scope this route needs (documents:read or admin also grant it)") {
		t.Errorf("the anomaly sections do not say they need anomalies:read:\n%s", body)
	}
}

// TestStatusJSON: GET /v1/status carries the page's sections as JSON —
// shard 5's reader beside its freshness, the loader's lag and dead
// letters, a failed endpoint, each anomaly listing's failure — and no
// token is a 401 when tokens are configured.
func TestStatusJSON(t *testing.T) {
	readerSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, readerMetricsFixture) }))
	defer readerSrv.Close()
	loaderSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, loaderMetricsFixture) }))
	defer loaderSrv.Close()
	s := newStatusServer(t, nil, []string{readerSrv.URL, loaderSrv.URL})
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/status", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var got struct {
		Shards []struct {
			Shard     int `json:"shard"`
			Freshness *struct {
				CommitLSN string `json:"commit_lsn"`
			} `json:"freshness"`
			Reader *struct {
				State    string  `json:"state"`
				Progress float64 `json:"snapshot_progress"`
				Retained float64 `json:"retained_wal_bytes"`
			} `json:"reader"`
		} `json:"shards"`
		Components struct {
			Lag []struct {
				Topic   string  `json:"topic"`
				Records float64 `json:"records"`
			} `json:"loader_lag"`
			DLQTotal float64 `json:"dead_letters_total"`
		} `json:"components"`
		Anomalies []struct {
			Title string `json:"title"`
			Err   string `json:"error"`
		} `json:"anomalies"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, rec.Body)
	}
	if len(got.Shards) != 2 || got.Shards[1].Shard != 5 || got.Shards[1].Freshness == nil || got.Shards[1].Freshness.CommitLSN != "0/20" ||
		got.Shards[1].Reader == nil || got.Shards[1].Reader.State != "snapshotting" || got.Shards[1].Reader.Progress != 0.5 || got.Shards[1].Reader.Retained != 3<<20 {
		t.Errorf("shards = %s", rec.Body)
	}
	if got.Shards[0].Reader != nil {
		t.Errorf("shard 3 has no reader metrics, got %+v", got.Shards[0].Reader)
	}
	if len(got.Components.Lag) != 1 || got.Components.Lag[0].Records != 17 || got.Components.DLQTotal != 5 {
		t.Errorf("components = %+v", got.Components)
	}
	if len(got.Anomalies) == 0 || !strings.Contains(got.Anomalies[0].Err, "500 query_failed") {
		t.Errorf("anomalies = %+v, want the duplicates listing's failure first", got.Anomalies)
	}
	if strings.Contains(rec.Body.String(), "svg") || strings.Contains(rec.Body.String(), "Refresh") {
		t.Errorf("the JSON carries page-only fields: %s", rec.Body)
	}

	tokens, err := ParseTokens("oncall:oncall-token-0123456789:revenue:read", false)
	if err != nil {
		t.Fatal(err)
	}
	tok := newStatusServer(t, tokens, nil)
	rec = httptest.NewRecorder()
	tok.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/status", nil))
	if rec.Code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", rec.Code)
	}
}

// TestStatusPageShardDownInMultiShardReader: one reader process serving
// shards 3 and 5 (one metrics endpoint) whose shard 3 failed four times
// and waits to retry: shard 3's row says so, shard 5's still streams.
func TestStatusPageShardDownInMultiShardReader(t *testing.T) {
	const fixture = `# TYPE tributary_reader_up gauge
tributary_reader_up{shard="3"} 0
tributary_reader_up{shard="5"} 1
# TYPE tributary_reader_restarts_total counter
tributary_reader_restarts_total{shard="3"} 4
tributary_reader_restarts_total{shard="5"} 0
# TYPE tributary_reader_lag_bytes gauge
tributary_reader_lag_bytes{shard="3"} 0
tributary_reader_lag_bytes{shard="5"} 0
`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, fixture) }))
	t.Cleanup(srv.Close)
	code, body := getStatus(t, newStatusServer(t, nil, []string{srv.URL}), "")
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	if n := strings.Count(body, "error: down, retrying (4 failed runs)"); n != 1 {
		t.Errorf("page shows shard 3 down %d times, want once:\n%s", n, body)
	}
	if !strings.Contains(body, "streaming") {
		t.Errorf("page lacks shard 5 streaming:\n%s", body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(fixture))
	if err != nil {
		t.Fatal(err)
	}
	v := readComponents([]endpointResult{{URL: srv.URL, families: fams}})
	if !v.Readers[3].Down || v.Readers[5].Down || v.Readers[5].State != "streaming" {
		t.Errorf("readers %+v %+v: want 3 down, 5 streaming", *v.Readers[3], *v.Readers[5])
	}
}

// TestStatusShowsResnapshot: a reader whose initial snapshot is done and
// that copies one table again shows as resnapshotting, with that table's
// progress and estimate, on the page, in /v1/status and not as a snapshot.
func TestStatusShowsResnapshot(t *testing.T) {
	const fixture = `# TYPE tributary_reader_snapshot_progress_ratio gauge
tributary_reader_snapshot_progress_ratio{shard="5",table="orders"} 0.25
tributary_reader_snapshot_progress_ratio{shard="5",table="lines"} 1
# TYPE tributary_reader_snapshot_estimated_rows gauge
tributary_reader_snapshot_estimated_rows{shard="5",table="orders"} 1200
# TYPE tributary_reader_resnapshot_active gauge
tributary_reader_resnapshot_active{shard="5",table="orders"} 1
tributary_reader_resnapshot_active{shard="5",table="lines"} 0
`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, fixture) }))
	t.Cleanup(srv.Close)
	s := newStatusServer(t, nil, []string{srv.URL})
	code, body := getStatus(t, s, "")
	if code != http.StatusOK || !strings.Contains(body, "resnapshotting") || !strings.Contains(body, "orders 25% of ~1200 rows") {
		t.Errorf("status %d; the page does not show the resnapshot of orders at 25%% of ~1200 rows:\n%s", code, body)
	}
	req := httptest.NewRequest(http.MethodGet, "/v1/status", nil)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	var got struct {
		Shards []struct {
			Shard  int `json:"shard"`
			Reader *struct {
				State      string  `json:"state"`
				Progress   float64 `json:"snapshot_progress"`
				Resnapshot *struct {
					Table         string  `json:"table"`
					Progress      float64 `json:"progress"`
					EstimatedRows float64 `json:"estimated_rows"`
				} `json:"resnapshot"`
			} `json:"reader"`
		} `json:"shards"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("/v1/status: %v\n%s", err, rec.Body)
	}
	for _, sh := range got.Shards {
		if sh.Shard != 5 {
			continue
		}
		r := sh.Reader
		if r == nil || r.State != "resnapshotting" || r.Progress != 1 || r.Resnapshot == nil ||
			r.Resnapshot.Table != "orders" || r.Resnapshot.Progress != 0.25 || r.Resnapshot.EstimatedRows != 1200 {
			t.Errorf("/v1/status shard 5: want resnapshotting orders at 0.25 of 1200, initial snapshot done:\n%s", rec.Body)
		}
		return
	}
	t.Errorf("/v1/status has no shard 5:\n%s", rec.Body)
}

// TestStatusShowsResnapshotsAtOnce: a reader copying two tables again at
// once shows both, and one whose copy is done but whose sweep is not as
// "copied, sweep pending", on the page and in /v1/status.
func TestStatusShowsResnapshotsAtOnce(t *testing.T) {
	const fixture = `# TYPE tributary_reader_snapshot_progress_ratio gauge
tributary_reader_snapshot_progress_ratio{shard="5",table="orders"} 0.25
tributary_reader_snapshot_progress_ratio{shard="5",table="lines"} 1
# TYPE tributary_reader_resnapshot_active gauge
tributary_reader_resnapshot_active{shard="5",table="orders"} 1
tributary_reader_resnapshot_active{shard="5",table="lines"} 1
# TYPE tributary_reader_resnapshot_sweep_pending gauge
tributary_reader_resnapshot_sweep_pending{shard="5",table="lines"} 1
tributary_reader_resnapshot_sweep_pending{shard="5",table="orders"} 0
`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, fixture) }))
	t.Cleanup(srv.Close)
	s := newStatusServer(t, nil, []string{srv.URL})
	code, body := getStatus(t, s, "")
	if code != http.StatusOK || !strings.Contains(body, "lines copied, sweep pending") || !strings.Contains(body, "orders 25%") {
		t.Errorf("status %d; the page does not show both resnapshots, lines' sweep pending:\n%s", code, body)
	}
	req := httptest.NewRequest(http.MethodGet, "/v1/status", nil)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	var got struct {
		Shards []struct {
			Shard  int `json:"shard"`
			Reader *struct {
				Resnapshots []struct {
					Table        string `json:"table"`
					SweepPending bool   `json:"sweep_pending"`
				} `json:"resnapshots"`
			} `json:"reader"`
		} `json:"shards"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("/v1/status: %v\n%s", err, rec.Body)
	}
	for _, sh := range got.Shards {
		if sh.Shard != 5 || sh.Reader == nil {
			continue
		}
		rs := sh.Reader.Resnapshots
		if len(rs) != 2 || rs[0].Table != "lines" || !rs[0].SweepPending || rs[1].Table != "orders" || rs[1].SweepPending {
			t.Errorf("/v1/status shard 5: want lines (sweep pending) and orders:\n%s", rec.Body)
		}
		return
	}
	t.Errorf("/v1/status has no shard 5:\n%s", rec.Body)
}
