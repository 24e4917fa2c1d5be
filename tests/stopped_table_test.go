package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/api"
	"github.com/tributary/tributary/internal/query"
)

// TestStoppedTableStopsOnlyItself: one table is stopped by an
// incompatible type change while another keeps streaming. Read-your-writes
// on the healthy table still answers, /v1/shards stays complete and
// current and names the stopped table and why, and the stopped table's own
// answers say it is stopped (after= past its watermarks: 503
// table_stopped at once).
func TestStoppedTableStopsOnlyItself(t *testing.T) {
	p := newMeteredPipeline(t, []int{0}, true)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// An API over both tables (the harness's knows the first only).
	srv := httptest.NewServer(api.New(api.Config{Tables: p.tables, DocumentsTable: p.table(), QueryTimeout: 15 * time.Second},
		query.New(p.store.Conn(), p.chDB), p.log, prometheus.NewRegistry()))
	defer srv.Close()
	stoppedTbl, otherTbl := pgx.Identifier{p.table()}.Sanitize(), pgx.Identifier{p.other}.Sanitize()

	a, lsnA := p.writeDoc(ctx, 0, "INSERT INTO "+stoppedTbl+" (workspace_id, title) VALUES (1, 'before') RETURNING id")
	o1, lsnO := p.writeDoc(ctx, 0, "INSERT INTO "+otherTbl+" (workspace_id, title) VALUES (1, 'other before') RETURNING id")
	for _, c := range []struct {
		table string
		id    int64
	}{{p.table(), a}, {p.other, o1}} {
		path := fmt.Sprintf("/v1/tables/%s/rows/%d?after=0:%s&wait=10s", c.table, c.id, max(lsnA, lsnO))
		p.waitFor(ctx, 60*time.Second, "the rows before the change", func() bool {
			s, _, _ := apiGet(ctx, t, srv.URL, path, "")
			return s == http.StatusOK
		})
	}

	// The incompatible change: bigint becomes text. The table stops.
	p.exec(ctx, 0, fmt.Sprintf("ALTER TABLE %s ALTER COLUMN workspace_id TYPE text", stoppedTbl))
	_, lsnStop := p.writeDoc(ctx, 0, "INSERT INTO "+stoppedTbl+" (workspace_id, title) VALUES ('ws-d', 'after') RETURNING id")
	p.waitFor(ctx, 60*time.Second, "tributary_loader_table_stopped = 1", func() bool {
		v, _ := p.metric("tributary_loader_table_stopped", map[string]string{"table": p.table()})
		return v == 1
	})

	// The other table keeps streaming, and read-your-writes on it answers
	// with the write, on the first try.
	for i := range 3 {
		title := fmt.Sprintf("other after %d", i)
		o, lsn := p.writeDoc(ctx, 0, "INSERT INTO "+otherTbl+" (workspace_id, title) VALUES (2, $1) RETURNING id", title)
		start := time.Now()
		status, hdr, body := apiGet(ctx, t, srv.URL, fmt.Sprintf("/v1/tables/%s/rows/%d?after=0:%s&wait=20s", p.other, o, lsn), "")
		t.Logf("read-your-writes on %s beside the stopped table: %d in %v", p.other, status, time.Since(start).Round(time.Millisecond))
		var row struct {
			Copies []struct {
				Row map[string]any `json:"row"`
			} `json:"copies"`
			Stopped []any `json:"stopped_tables"`
		}
		if status != http.StatusOK || json.Unmarshal(body, &row) != nil || len(row.Copies) != 1 || row.Copies[0].Row["title"] != title {
			t.Fatalf("read-your-writes on %s while %s is stopped: %d %s", p.other, p.table(), status, body)
		}
		if len(row.Stopped) != 0 || hdr.Get("Tributary-Stopped-Tables") != "" {
			t.Errorf("the healthy table's answer says a table is stopped: %v %s", hdr, body)
		}

		// /v1/shards: complete and current (at or past the write), and it
		// names the stopped table and why.
		status, hdr, body = apiGet(ctx, t, srv.URL, fmt.Sprintf("/v1/shards?after=0:%s&wait=20s", lsn), "")
		var sh struct {
			Shards []struct {
				Shard     int    `json:"shard"`
				CommitLSN string `json:"commit_lsn"`
				Complete  bool   `json:"complete"`
			} `json:"shards"`
			Stopped []struct {
				Table     string `json:"table"`
				Reason    string `json:"reason"`
				Freshness []struct {
					CommitLSN string `json:"commit_lsn"`
				} `json:"freshness"`
			} `json:"stopped_tables"`
		}
		if status != http.StatusOK || json.Unmarshal(body, &sh) != nil || len(sh.Shards) != 1 || !sh.Shards[0].Complete {
			t.Fatalf("/v1/shards while %s is stopped: %d %s; want shard 0 complete", p.table(), status, body)
		}
		if len(sh.Stopped) != 1 || sh.Stopped[0].Table != p.table() || !strings.Contains(sh.Stopped[0].Reason, "workspace_id") ||
			len(sh.Stopped[0].Freshness) != 1 || hdr.Get("Tributary-Stopped-Tables") != p.table() {
			t.Errorf("/v1/shards: %v %s; want stopped_tables naming %s, the column workspace_id, and its freshness", hdr, body, p.table())
		}
	}

	// The stopped table's own answers: as of its watermarks, saying so.
	status, hdr, body := apiGet(ctx, t, srv.URL, fmt.Sprintf("/v1/tables/%s/rows/%d", p.table(), a), "")
	if status != http.StatusOK || !strings.Contains(string(body), `"stopped_tables"`) || hdr.Get("Tributary-Stopped-Tables") != p.table() {
		t.Errorf("a row of the stopped table: %d %v %s; want it, marked stopped", status, hdr, body)
	}
	start := time.Now()
	status, _, body = apiGet(ctx, t, srv.URL, fmt.Sprintf("/v1/tables/%s/rows/%d?after=0:%s&wait=20s", p.table(), a, lsnStop), "")
	t.Logf("after= past the stopped table's watermarks: %d in %v", status, time.Since(start).Round(time.Millisecond))
	var e apiError
	if status != http.StatusServiceUnavailable || json.Unmarshal(body, &e) != nil || e.Code != "table_stopped" || !strings.Contains(e.Message, "workspace_id") {
		t.Errorf("after= past the stopped table's watermarks: %d %s; want 503 table_stopped with the reason", status, body)
	}
	if err := p.failed(); err != nil {
		t.Fatalf("a component failed: %v", err)
	}
}
