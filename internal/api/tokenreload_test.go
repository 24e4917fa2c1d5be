package api

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func writeTokens(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// codeWith is the status of GET /v1/documents/abc (a 400 once authorized)
// with token.
func codeWith(s *Server, token string) int {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/v1/documents/abc", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	s.ServeHTTP(rec, req)
	return rec.Code
}

// TestTokenReload: a reload puts the file's new tokens in force in the
// running server; a malformed file is refused, counted, and the tokens in
// force keep working.
func TestTokenReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	writeTokens(t, path, "support:"+docsToken+":documents:read\n")
	tk, err := LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	s := newAuthServer(t, tk)
	reg := prometheus.NewRegistry()
	r := NewTokenReloader(path, tk, func(n *Tokens) error {
		return n.CheckTables(func(table string) bool { return table == "documents" || table == "invoices" })
	}, slog.New(slog.NewTextHandler(io.Discard, nil)), reg)
	if got := codeWith(s, docsToken); got != 400 {
		t.Fatalf("before the reload: %d, want 400 (authorized)", got)
	}

	// Rotation: the old token goes, a new one comes.
	writeTokens(t, path, "support:"+bothToken+":documents:read\n")
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := codeWith(s, docsToken); got != 401 {
		t.Errorf("the rotated-out token: %d, want 401", got)
	}
	if got := codeWith(s, bothToken); got != 400 {
		t.Errorf("the new token: %d, want 400 (authorized)", got)
	}

	// Malformed: refused with the line, the tokens in force stay.
	writeTokens(t, path, "support:"+docsToken+":documents:read\nbroken:"+adminToken+":documents:write\n")
	err = r.Reload()
	if err == nil || !strings.Contains(err.Error(), "line 2") || strings.Contains(err.Error(), adminToken) {
		t.Fatalf("malformed file: %v, want an error naming line 2 without the token", err)
	}
	if got := codeWith(s, bothToken); got != 400 {
		t.Errorf("after a refused reload, the token in force: %d, want 400 (authorized)", got)
	}
	if got := codeWith(s, docsToken); got != 401 {
		t.Errorf("after a refused reload, a token of the refused file: %d, want 401", got)
	}
	// A table that is not configured is refused too (the check).
	writeTokens(t, path, "support:"+docsToken+":rows:read:nosuchtable\n")
	if err := r.Reload(); err == nil || !strings.Contains(err.Error(), `table "nosuchtable" is not configured`) {
		t.Fatalf("unknown table: %v", err)
	}
	if got := counterValue(t, r.reloads.WithLabelValues("refused")); got != 2 {
		t.Errorf("refused reloads: %v, want 2", got)
	}
	if got := counterValue(t, r.reloads.WithLabelValues("loaded")); got != 1 {
		t.Errorf("loaded reloads: %v, want 1", got)
	}
}

// TestTokenReloaderRun: a signal and a change of the file each trigger a
// reload.
func TestTokenReloaderRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	writeTokens(t, path, "a:"+docsToken+":admin\n")
	tk, err := LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	r := NewTokenReloader(path, tk, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	signals := make(chan os.Signal, 1)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, 0, signals) }()
	waitNames := func(what string, want []string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !slices.Equal(tk.Names(), want); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: names %v, want %v", what, tk.Names(), want)
			}
		}
	}
	writeTokens(t, path, "b:"+docsToken+":admin\n")
	signals <- os.Interrupt // any signal value: the caller routes SIGHUP here
	waitNames("after a signal", []string{"b"})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// Polled: a change of size or modification time is noticed.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go func() { done <- r.Run(ctx, time.Millisecond, nil) }()
	writeTokens(t, path, "b:"+docsToken+":admin\nc:"+bothToken+":admin\n")
	waitNames("after a change", []string{"b", "c"})
}
