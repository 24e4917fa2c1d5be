package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/query"
	"github.com/tributary/tributary/internal/tables"
)

// TestNotReadyWithoutClickHouse: an API started before ClickHouse answers
// serves, says 503 on /readyz and 200 on /healthz, instead of exiting.
func TestNotReadyWithoutClickHouse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q, err := query.Open(ctx, "tributary", chstore.DialOptions{Addr: addr})
	if !errors.Is(err, chstore.ErrNotReachable) || q == nil {
		t.Fatalf("query.Open with no server: %v, %v; want Queries and ErrNotReachable", q, err)
	}
	defer q.Close()
	cfg, err := tables.Parse([]byte(`{"tables":[{"name":"documents","id_column":"id","id_layout":"seed000"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Tables: cfg, DocumentsTable: "documents", QueryTimeout: time.Second}, q,
		slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	for path, want := range map[string]int{"/readyz": http.StatusServiceUnavailable, "/healthz": http.StatusOK} {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != want {
			t.Errorf("GET %s = %d %s, want %d", path, rec.Code, rec.Body, want)
		}
	}
}

// TestReadyDegradedWhenClickHouseLost: the order of a ClickHouse outage
// under a running API. Before ClickHouse ever answered /readyz is 503
// not_ready; once it answered, ready; when it stops answering, degraded
// with 200 (the API still answers: a by-id read says 503
// backend_unavailable, bad input still gets its 400, /healthz 200); when
// it answers again, ready.
func TestReadyDegradedWhenClickHouseLost(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there: every real query fails as in an outage
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q, err := query.Open(ctx, "tributary", chstore.DialOptions{Addr: addr})
	if !errors.Is(err, chstore.ErrNotReachable) || q == nil {
		t.Fatalf("query.Open with no server: %v, %v; want Queries and ErrNotReachable", q, err)
	}
	defer q.Close()
	cfg, err := tables.Parse([]byte(`{"tables":[{"name":"documents","id_column":"id","id_layout":"seed000"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Tables: cfg, DocumentsTable: "documents", QueryTimeout: time.Second}, q,
		slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	up := false
	s.ping = func(context.Context) error {
		if up {
			return nil
		}
		return errors.New("dial tcp: connection refused")
	}
	get := func(path string) (int, map[string]any) {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		var body map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("GET %s: %d %q is not JSON: %v", path, rec.Code, rec.Body, err)
		}
		return rec.Code, body
	}
	steps := []struct {
		what   string
		up     bool
		code   int
		status string // /readyz "status", or the error code
	}{
		{"before ClickHouse ever answered", false, http.StatusServiceUnavailable, "not_ready"},
		{"ClickHouse answers", true, http.StatusOK, "ready"},
		{"ClickHouse lost", false, http.StatusOK, "degraded"},
		{"ClickHouse back", true, http.StatusOK, "ready"},
	}
	for _, st := range steps {
		up = st.up
		code, body := get("/readyz")
		got := body["status"]
		if code != http.StatusOK {
			got = body["error"]
		}
		if code != st.code || got != st.status {
			t.Errorf("%s: /readyz = %d %v, want %d %s", st.what, code, body, st.code, st.status)
		}
		if st.status != "degraded" {
			continue
		}
		// Degraded, not down: what the API does now is what /readyz said.
		if code, body := get("/v1/documents/734197815705617408"); code != http.StatusServiceUnavailable || body["error"] != "backend_unavailable" {
			t.Errorf("%s: a by-id read = %d %v, want 503 backend_unavailable", st.what, code, body)
		}
		if code, body := get("/v1/documents/x"); code != http.StatusBadRequest {
			t.Errorf("%s: a malformed id = %d %v, want 400", st.what, code, body)
		}
		if code, _ := get("/healthz"); code != http.StatusOK {
			t.Errorf("%s: /healthz = %d, want 200", st.what, code)
		}
	}
}

// TestReadyDegradedWhileReplicaLost: in a ClickHouse cluster, /readyz
// checks every node. All answering: ready, each listed ok. One replica of
// a shard that has another gone: degraded (200), naming it, reads go on.
// A shard with no replica left: degraded, naming the shard. A replica
// that answers but is behind: degraded, naming it and why; a shard with
// none that keeps up, named too. The cluster's
// nodes unknown: degraded, saying why. One server (no cluster): no
// replicas in the answer.
func TestReadyDegradedWhileReplicaLost(t *testing.T) {
	cfg, err := tables.Parse([]byte(`{"tables":[{"name":"documents","id_column":"id","id_layout":"seed000"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Tables: cfg, DocumentsTable: "documents", QueryTimeout: time.Second}, query.New(nil, "tributary"),
		slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	s.ping = func(context.Context) error { return nil }
	down := errors.New("dial tcp 127.0.0.1:9001: connection refused")
	cluster := func(errs ...error) func(context.Context) ([]query.Replica, error) {
		return func(context.Context) ([]query.Replica, error) {
			return []query.Replica{{Shard: 1, Replica: 1, Addr: "127.0.0.1:9000", Err: errs[0]},
				{Shard: 1, Replica: 2, Addr: "127.0.0.1:9001", Err: errs[1]},
				{Shard: 2, Replica: 1, Addr: "127.0.0.1:9002", Err: errs[2]}}, nil
		}
	}
	const late = "its replication has not run since it started"
	lagging := func(behind ...string) func(context.Context) ([]query.Replica, error) {
		return func(ctx context.Context) ([]query.Replica, error) {
			r, _ := cluster(nil, nil, nil)(ctx)
			for i := range r {
				r[i].Behind = behind[i]
			}
			return r, nil
		}
	}
	steps := []struct {
		what     string
		replicas func(context.Context) ([]query.Replica, error)
		status   string
		states   []string // each replica's state, "" for none listed
		message  []string // what the message must name
	}{
		{"one server", func(context.Context) ([]query.Replica, error) { return nil, nil }, "ready", nil, nil},
		{"every node answers", cluster(nil, nil, nil), "ready", []string{"ok", "ok", "ok"}, nil},
		{"a replica of shard 1 lost", cluster(nil, down, nil), "degraded",
			[]string{"ok", "unreachable: " + down.Error(), "ok"}, []string{"shard 1 replica 2 (127.0.0.1:9001)", "other replicas"}},
		{"shard 2's only replica lost", cluster(nil, nil, down), "degraded",
			[]string{"ok", "ok", "unreachable: " + down.Error()}, []string{"shard 2 replica 1 (127.0.0.1:9002)", "shard(s) 2 have no replica", "503"}},
		{"a replica of shard 1 behind", lagging("", late, ""), "degraded",
			[]string{"ok", "behind: " + late, "ok"}, []string{"shard 1 replica 2 (127.0.0.1:9001): " + late, "other replicas"}},
		{"shard 2's only replica behind, shard 1's lost", func(ctx context.Context) ([]query.Replica, error) {
			r, _ := cluster(down, down, nil)(ctx)
			r[2].Behind = "its replicated tables are read-only (ZooKeeper lost)"
			return r, nil
		}, "degraded", []string{"unreachable: " + down.Error(), "unreachable: " + down.Error(), "behind: its replicated tables are read-only (ZooKeeper lost)"},
			[]string{"do not answer", "shard(s) 1 have no replica left", "shard(s) 2 have no replica that keeps up"}},
		{"the cluster's nodes unknown", func(context.Context) ([]query.Replica, error) {
			return nil, errors.New(`unknown clickhouse cluster "c"`)
		}, "degraded", nil, []string{`unknown clickhouse cluster "c"`}},
	}
	for _, st := range steps {
		s.replicas = st.replicas
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		var body struct {
			Status, Clickhouse, Message string
			Replicas                    []struct {
				Shard, Replica int
				Addr, State    string
			}
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != http.StatusOK {
			t.Fatalf("%s: /readyz = %d %s (%v), want 200 JSON", st.what, rec.Code, rec.Body, err)
		}
		if body.Status != st.status || body.Clickhouse != "ok" {
			t.Errorf("%s: /readyz status %q, clickhouse %q; want %s, ok (%s)", st.what, body.Status, body.Clickhouse, st.status, rec.Body)
		}
		var states []string
		for _, r := range body.Replicas {
			states = append(states, r.State)
		}
		if fmt.Sprint(states) != fmt.Sprint(st.states) {
			t.Errorf("%s: replica states %q, want %q", st.what, states, st.states)
		}
		for _, m := range st.message {
			if !strings.Contains(body.Message, m) {
				t.Errorf("%s: message %q does not name %q", st.what, body.Message, m)
			}
		}
		if st.message == nil && body.Message != "" {
			t.Errorf("%s: message %q, want none", st.what, body.Message)
		}
	}
}
