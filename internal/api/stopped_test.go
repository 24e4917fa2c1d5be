package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/query"
	"github.com/tributary/tributary/internal/tables"
)

// stoppedFleet is a server over two tables, healthy (topic t.healthy,
// shard 0 at 0/64) and frozen (topic t.frozen, shard 0 stuck at 0/A),
// frozen stopped by a loader. calls counts watermark readings.
func stoppedFleet(t *testing.T) (*Server, *atomic.Int64) {
	t.Helper()
	cfg, err := tables.Parse([]byte(`{"topic_prefix":"t.","tables":[
		{"name":"healthy","id_column":"id","id_layout":"seed000"},
		{"name":"frozen","id_column":"id","id_layout":"seed000"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Tables: cfg, DocumentsTable: "healthy", QueryTimeout: 5 * time.Second},
		query.New(nil, "tributary"), slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	at := map[string]envelope.LSN{"t.healthy": 100, "t.frozen": 10}
	var calls atomic.Int64
	s.watch = &watermarkWatch{timeout: time.Second, fetch: func(_ context.Context, topics []string) ([]query.ShardFreshness, error) {
		calls.Add(1)
		low := envelope.LSN(1 << 62)
		for _, topic := range topics {
			low = min(low, at[topic])
		}
		return []query.ShardFreshness{query.FreshnessAt(0, low, time.Now(), true)}, nil
	}}
	since := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	s.stopped = &stoppedWatch{timeout: time.Second, fetch: func(context.Context, time.Time) ([]query.StoppedTable, error) {
		return []query.StoppedTable{{Table: "frozen", Topic: "t.frozen", Reason: `column "kind": unmapped PostgreSQL type "mood"`,
			Since: since, Loaders: []string{"l1"}}}, nil
	}}
	return s, &calls
}

// TestShardsLeaveStoppedTablesOut: /v1/shards is the freshness of every
// table that is not stopped, and names the stopped one, why, and its own
// freshness.
func TestShardsLeaveStoppedTablesOut(t *testing.T) {
	s, _ := stoppedFleet(t)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/shards?after=0:0/50", nil))
	var ans struct {
		Shards  []map[string]any `json:"shards"`
		Stopped []struct {
			Table, Reason string
			Freshness     []map[string]any `json:"freshness"`
		} `json:"stopped_tables"`
	}
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &ans) != nil {
		t.Fatalf("/v1/shards with a stopped table: %d %s", rec.Code, rec.Body)
	}
	if len(ans.Shards) != 1 || ans.Shards[0]["commit_lsn"] != "0/64" || ans.Shards[0]["complete"] != true {
		t.Errorf("shards %v: want shard 0 complete at 0/64, the healthy table's watermark", ans.Shards)
	}
	if len(ans.Stopped) != 1 || ans.Stopped[0].Table != "frozen" || !strings.Contains(ans.Stopped[0].Reason, "unmapped") ||
		len(ans.Stopped[0].Freshness) != 1 || ans.Stopped[0].Freshness[0]["commit_lsn"] != "0/A" {
		t.Errorf("stopped_tables %s: want frozen, its reason and its freshness at 0/A", rec.Body)
	}
	if h := rec.Header().Get(stoppedHeader); h != "frozen" {
		t.Errorf("%s: %q, want frozen", stoppedHeader, h)
	}
}

// TestReadYourWritesBesideAStoppedTable: after= on the healthy table is
// answered; on the stopped one, past its watermarks, it is 503
// table_stopped at once (wait=5s notwithstanding) with the reason.
func TestReadYourWritesBesideAStoppedTable(t *testing.T) {
	s, calls := stoppedFleet(t)
	read := func(q, topic string) (*httptest.ResponseRecorder, []query.ShardFreshness, error) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/v1/tables/x/rows/1?"+q, nil)
		fresh, err := s.freshness(rec, req, []string{topic})
		return rec, fresh, err
	}
	if _, fresh, err := read("after=0:0/50&wait=5s", "t.healthy"); err != nil || len(fresh) != 1 || fresh[0].LSN() != 100 {
		t.Fatalf("after= on the healthy table: %v %v, want its freshness at 0/64", fresh, err)
	}
	calls.Store(0)
	rec, _, err := read("after=0:0/50&wait=5s", "t.frozen")
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusServiceUnavailable || e.Code != "table_stopped" || !strings.Contains(e.Message, "unmapped") {
		t.Fatalf("after= past the stopped table's watermarks: %v, want 503 table_stopped with the reason", err)
	}
	if n := calls.Load(); n > 3 {
		t.Errorf("%d watermark readings: the stopped table was waited for", n)
	}
	if rec.Header().Get(stoppedHeader) != "frozen" {
		t.Errorf("%s: %q", stoppedHeader, rec.Header().Get(stoppedHeader))
	}
	// Within the stopped table's watermarks: answered, marked stopped.
	if rec, fresh, err := read("after=0:0/5", "t.frozen"); err != nil || len(fresh) != 1 || rec.Header().Get(stoppedHeader) != "frozen" {
		t.Errorf("after= within the stopped table's watermarks: %v %v %v", fresh, err, rec.Header())
	}
}
