package verify

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tributary/tributary/internal/envelope"
)

// rowAnswer is a GET /v1/tables/{table}/rows/{id} answer as the API
// writes it (internal/api, internal/query.JSONValue).
const rowAnswer = `{
  "table": "documents",
  "id": "771571243957616640",
  "copies": [
    {"shard": 0, "version": "0/28AF568", "commit_lsn": "0/28AF600", "commit_ts": "2026-11-30T13:38:54Z",
     "row": {"id": "771571243957616640", "workspace_id": "7", "title": "hello", "body": null,
             "amount": "12.50", "n": 3, "created_at": "2026-11-30T13:38:54.123456Z"}},
    {"shard": 2, "version": "0/1AB86E0", "commit_lsn": "0/1AB8700", "commit_ts": "2026-11-30T13:38:49Z",
     "row": {"id": "771571243957616640", "workspace_id": "7", "title": "copy", "body": "b",
             "amount": "1", "n": 4, "created_at": "2026-11-30T13:38:49Z"}}
  ],
  "duplicate": true,
  "freshness": [{"shard": 0, "commit_lsn": "0/28AF568", "commit_ts": "2026-11-30T13:38:54Z", "complete": true, "staleness_seconds": 1.5}]
}`

const shardsAnswer = `{"shards": [
  {"shard": 0, "commit_lsn": "0/28AF568", "commit_ts": "2026-11-30T13:38:54Z", "complete": true, "staleness_seconds": 1.4},
  {"shard": 1, "commit_lsn": "16/B374D848", "commit_ts": "2026-11-30T13:38:54Z", "complete": false, "staleness_seconds": 1.4}
]}`

func fakeAPI(t *testing.T) (*apiClient, *atomic.Int32) {
	t.Helper()
	var flaky atomic.Int32
	mux := http.NewServeMux()
	write := func(w http.ResponseWriter, status int, body string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write([]byte(body)) //nolint:errcheck
	}
	mux.HandleFunc("GET /v1/tables/documents/rows/771571243957616640", func(w http.ResponseWriter, _ *http.Request) {
		write(w, 200, rowAnswer)
	})
	mux.HandleFunc("GET /v1/tables/documents/rows/1", func(w http.ResponseWriter, _ *http.Request) {
		write(w, 404, `{"error": "not_found", "message": "no live row with id 1", "detail": {"freshness": []}}`)
	})
	mux.HandleFunc("GET /v1/tables/nope/rows/1", func(w http.ResponseWriter, _ *http.Request) {
		write(w, 404, `{"error": "unknown_table", "message": "table \"nope\" is not replicated"}`)
	})
	mux.HandleFunc("GET /v1/tables/documents/rows/2", func(w http.ResponseWriter, _ *http.Request) {
		if flaky.Add(1) <= 2 {
			write(w, 503, `{"error": "backend_unavailable", "message": "the query failed; retry later"}`)
			return
		}
		write(w, 404, `{"error": "not_found", "message": "no live row with id 2"}`)
	})
	mux.HandleFunc("GET /v1/tables/documents/rows/3", func(w http.ResponseWriter, _ *http.Request) {
		write(w, 500, `oops`)
	})
	mux.HandleFunc("GET /v1/shards", func(w http.ResponseWriter, _ *http.Request) { write(w, 200, shardsAnswer) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c, err := newAPIClient(Config{APIURL: srv.URL + "/", Concurrency: 4}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.backoff = time.Millisecond
	return c, &flaky
}

func TestAPIClientRow(t *testing.T) {
	c, flaky := fakeAPI(t)
	ctx := context.Background()

	copies, err := c.row(ctx, "documents", "771571243957616640")
	if err != nil {
		t.Fatal(err)
	}
	if len(copies) != 2 || copies[0].Shard != 0 || copies[1].Shard != 2 {
		t.Fatalf("copies = %+v", copies)
	}
	r := copies[0].Row
	if r["id"] != "771571243957616640" || r["body"] != nil || r["n"] != json.Number("3") {
		t.Fatalf("row decoded as %#v (numbers must stay json.Number)", r)
	}

	if copies, err := c.row(ctx, "documents", "1"); err != nil || copies != nil {
		t.Fatalf("plain 404: copies %v, err %v; want none and no error", copies, err)
	}

	var apiErr *APIError
	if _, err := c.row(ctx, "nope", "1"); !errors.As(err, &apiErr) || apiErr.Code != "unknown_table" {
		t.Fatalf("unknown table: err = %v, want an APIError unknown_table", err)
	}

	if copies, err := c.row(ctx, "documents", "2"); err != nil || copies != nil || flaky.Load() != 3 {
		t.Fatalf("503 twice then 404: copies %v, err %v after %d tries", copies, err, flaky.Load())
	}

	if _, err := c.row(ctx, "documents", "3"); !errors.As(err, &apiErr) || apiErr.Status != 500 {
		t.Fatalf("persistent 500: err = %v", err)
	}
}

func TestAPIClientShards(t *testing.T) {
	c, _ := fakeAPI(t)
	got, err := c.shards(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []apiShard{{0, 0x28AF568, true}, {1, 0x16B374D848, false}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("shards = %+v, want %+v", got, want)
	}
}

func TestDecodeRejectsMalformed(t *testing.T) {
	for _, body := range []string{`{"copies": [{"row": {}}]}`, `{"copies": [{"shard": 0}]}`, `[`} {
		if _, err := decodeCopies([]byte(body)); err == nil {
			t.Errorf("decodeCopies(%s) accepted", body)
		}
	}
	for _, body := range []string{`{"shards": [{"commit_lsn": "0/1"}]}`, `{"shards": [{"shard": 0, "commit_lsn": "nope"}]}`} {
		if _, err := decodeShards([]byte(body)); err == nil {
			t.Errorf("decodeShards(%s) accepted", body)
		}
	}
}

func TestPositions(t *testing.T) {
	target := map[int]envelope.LSN{0: 0x100, 1: 0x200, 2: 0x300, 3: 0x400}
	api := []apiShard{
		{Shard: 0, CommitLSN: 0x100, Complete: true},  // exactly there
		{Shard: 1, CommitLSN: 0x1FF, Complete: true},  // one byte behind
		{Shard: 2, CommitLSN: 0x900, Complete: false}, // past, but not every partition reported
		{Shard: 7, CommitLSN: 0x1, Complete: true},    // not a target: ignored
	} // shard 3 absent
	pos, all := positions(target, api)
	if all {
		t.Fatal("reported all reached")
	}
	want := []Position{
		{0, "0/100", "0/100", true, true},
		{1, "0/200", "0/1FF", true, false},
		{2, "0/300", "0/900", false, false},
		{3, "0/400", "", false, false},
	}
	if len(pos) != len(want) {
		t.Fatalf("positions = %+v", pos)
	}
	for i := range want {
		if pos[i] != want[i] {
			t.Errorf("position %d = %+v, want %+v", i, pos[i], want[i])
		}
	}
	api[1].CommitLSN, api[2].Complete = 0x200, true
	api = append(api, apiShard{Shard: 3, CommitLSN: 0x500, Complete: true})
	if _, all := positions(target, api); !all {
		t.Fatal("all reached, but not reported so")
	}
}

// TestAPIClientHTTPSAndToken: with APICAFile and APIToken the client
// trusts the API's CA and sends the token on every request; without the
// CA file the certificate is refused.
func TestAPIClientHTTPSAndToken(t *testing.T) {
	const token = "verify-token-0123456789"
	write := func(w http.ResponseWriter, status int, body string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write([]byte(body)) //nolint:errcheck
	}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			write(w, 401, `{"error": "unauthorized", "message": "the bearer token is not valid"}`)
			return
		}
		write(w, 200, shardsAnswer)
	}))
	t.Cleanup(srv.Close)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := newAPIClient(Config{APIURL: srv.URL, APIToken: token, APICAFile: caFile, Concurrency: 1}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if status, body, err := c.get(ctx, "/v1/shards"); err != nil || status != 200 {
		t.Fatalf("with the CA and the token: %d %s %v", status, body, err)
	}
	c, _ = newAPIClient(Config{APIURL: srv.URL, APICAFile: caFile, Concurrency: 1}, 5*time.Second)
	if status, _, err := c.get(ctx, "/v1/shards"); err != nil || status != 401 {
		t.Fatalf("without the token: %d %v, want 401", status, err)
	}
	c, _ = newAPIClient(Config{APIURL: srv.URL, APIToken: token, Concurrency: 1}, 5*time.Second)
	c.attempts = 1
	if _, _, err := c.get(ctx, "/v1/shards"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without the CA: %v, want a certificate error", err)
	}
	if _, err := newAPIClient(Config{APIURL: srv.URL, APICAFile: filepath.Join(t.TempDir(), "none")}, time.Second); err == nil {
		t.Error("a missing CA file was accepted")
	}
}
