package telemetry

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// get answers path from the endpoint's routes: the status and the body.
func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func TestProfilesOnlyWhenAsked(t *testing.T) {
	reg := NewRegistry()
	plain := newMux(reg, nil)
	if code, _ := get(t, plain, "/debug/pprof/heap"); code != http.StatusNotFound {
		t.Fatalf("without --pprof: /debug/pprof/heap answered %d, want 404", code)
	}
	if code, body := get(t, plain, "/metrics"); code != http.StatusOK || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("/metrics: %d, %.80q", code, body)
	}

	m := newMux(reg, Profiles())
	if code, body := get(t, m, "/debug/pprof/heap?debug=1"); code != http.StatusOK || !strings.Contains(body, "heap profile") {
		t.Fatalf("with --pprof: /debug/pprof/heap answered %d, %.80q", code, body)
	}
	if code, body := get(t, m, "/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Fatalf("with --pprof: the index answered %d, %.80q", code, body)
	}
	// The command line can hold a DSN's password: not served.
	if code, body := get(t, m, "/debug/pprof/cmdline"); code == http.StatusOK {
		t.Fatalf("/debug/pprof/cmdline answered 200: %.80q", body)
	}
	if code, _ := get(t, m, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz beside the profiles: %d", code)
	}
}

func TestPprofNeedsAnAddress(t *testing.T) {
	if err := (Metrics{Profiles: true}).Validate(); err == nil || !strings.Contains(err.Error(), "--metrics-addr") {
		t.Fatalf("--pprof without --metrics-addr: %v", err)
	}
	for _, m := range []Metrics{{}, {Addr: "127.0.0.1:0"}, {Addr: "127.0.0.1:0", Profiles: true}} {
		if err := m.Validate(); err != nil {
			t.Fatalf("%+v: %v", m, err)
		}
	}
}
