package api

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
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
