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

	"github.com/tributary/tributary/internal/query"
	"github.com/tributary/tributary/internal/tables"
)

// newTestServer builds the API without a ClickHouse connection: every case
// here must be answered before a query would run.
func newTestServer(t *testing.T) *Server {
	t.Helper()
	cfg, err := tables.Parse([]byte(`{"tables":[{"name":"documents","id_column":"id","id_layout":"seed000"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Tables: cfg, DocumentsTable: "documents", QueryTimeout: time.Second},
		query.New(nil, "tributary"), slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	s.stopped = &stoppedWatch{timeout: time.Second, fetch: func(context.Context, time.Time) ([]query.StoppedTable, error) { return nil, nil }}
	return s
}

func TestBadRequestsGetJSON4xx(t *testing.T) {
	s := newTestServer(t)
	for _, c := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/v1/documents/abc", 400, "bad_id"},
		{"GET", "/v1/documents/12345678901234567890123", 400, "bad_id"},
		{"GET", "/v1/documents/-", 400, "bad_id"},
		{"GET", "/v1/documents/1.5", 400, "bad_id"},
		{"GET", "/v1/documents/" + strings.Repeat("9", 70), 400, "bad_id"},
		{"GET", "/v1/documents/0190a4e2-zzzz-7000-8000-000000000000", 400, "bad_id"},
		{"GET", "/v1/tables/nope/rows/1", 404, "unknown_table"},
		{"GET", "/v1/nothing", 404, "unknown_route"},
		{"GET", "/index.html", 404, "unknown_route"}, // GET / is the status page (status_test.go)
		{"POST", "/v1/documents/1", 405, "method_not_allowed"},
		{"DELETE", "/v1/shards", 405, "method_not_allowed"},
		{"POST", "/v1/nothing", 404, "unknown_route"},
	} {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(c.method, c.path, nil))
		if rec.Code != c.status {
			t.Errorf("%s %s: status %d, want %d (body %s)", c.method, c.path, rec.Code, c.status, rec.Body)
			continue
		}
		var e Error
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Code != c.code || e.Message == "" {
			t.Errorf("%s %s: body %s, want error code %q with a message", c.method, c.path, rec.Body, c.code)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: content type %q", c.method, c.path, ct)
		}
	}
}

func TestParseID(t *testing.T) {
	for in, want := range map[string]any{
		"734197815705617408":                   int64(734197815705617408),
		"-5":                                   int64(-5),
		"0190A4E2-1C3B-7000-8000-000000000001": "0190a4e2-1c3b-7000-8000-000000000001",
	} {
		got, err := parseID(in)
		if err != nil || got != want {
			t.Errorf("parseID(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}

func FuzzParseID(f *testing.F) {
	for _, s := range []string{"1", "734197815705617408", "0190a4e2-1c3b-7000-8000-000000000001", "", "x", "9999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseID(s)
		if err != nil {
			var e *Error
			if !asError(err, &e) || e.Status != http.StatusBadRequest {
				t.Fatalf("parseID(%q): error %v is not a 400", s, err)
			}
			return
		}
		switch v.(type) {
		case int64, string:
		default:
			t.Fatalf("parseID(%q) = %T", s, v)
		}
	})
}

func asError(err error, target **Error) bool {
	e, ok := err.(*Error)
	if ok {
		*target = e
	}
	return ok
}
