package api

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/query"
)

// TestRateLimit: past its burst a token is answered 429 with Retry-After,
// counted by token name; another token is not affected.
func TestRateLimit(t *testing.T) {
	tk, err := ParseTokens(testTokens, false)
	if err != nil {
		t.Fatal(err)
	}
	base := newAuthServer(t, tk)
	s := New(Config{Tables: base.cfg.Tables, DocumentsTable: "documents", QueryTimeout: time.Second, Tokens: tk,
		RateLimit: RateLimit{PerSecond: 0.001, Burst: 2}}, query.New(nil, "tributary"),
		slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	get := func(token string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/v1/documents/abc", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		s.ServeHTTP(rec, req)
		return rec
	}
	for i := range 2 {
		if rec := get(docsToken); rec.Code != 400 {
			t.Fatalf("request %d within the burst: %d, want 400 (authorized)", i+1, rec.Code)
		}
	}
	rec := get(docsToken)
	if rec.Code != 429 {
		t.Fatalf("past the burst: %d %s, want 429", rec.Code, rec.Body)
	}
	if ra, err := strconv.Atoi(rec.Header().Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("Retry-After %q, want whole seconds >= 1", rec.Header().Get("Retry-After"))
	}
	if rec := get(adminToken); rec.Code != 400 {
		t.Errorf("another token: %d, want 400 (its own bucket)", rec.Code)
	}
	if got := counterValue(t, s.limiter.refused.WithLabelValues("support")); got != 1 {
		t.Errorf("refusals of support: %v, want 1", got)
	}
	// Off by default.
	if ok, _ := base.limiter.allow("support", time.Now()); !ok {
		t.Error("the zero RateLimit limited a request")
	}
}
