package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/query"
	"github.com/tributary/tributary/internal/tables"
)

const (
	docsToken    = "docs-token-0123456789abcdef"
	revenueToken = "revenue-token-0123456789abcdef"
	adminToken   = "admin-token-0123456789abcdef"
	bothToken    = "both-token-0123456789abcdef"
	invoiceToken = "invoice-token-0123456789abcdef"
	anomalyToken = "anomaly-token-0123456789abcdef"
)

var testTokens = strings.Join([]string{
	"# the support desk",
	"support:" + docsToken + ":documents:read",
	"finance:" + revenueToken + ":revenue:read",
	"",
	"ops:" + adminToken + ":admin",
	"bi:" + bothToken + ":documents:read, revenue:read",
	"billing:" + invoiceToken + ":rows:read:invoices",
	"oncall:" + anomalyToken + ":anomalies:read",
}, "\n")

func TestParseTokens(t *testing.T) {
	const tok = "abcdefghijklmnop"
	for _, c := range []struct {
		name, text string
		semicolons bool
		names      []string
		err        string
	}{
		{name: "file", text: testTokens, names: []string{"support", "finance", "ops", "bi", "billing", "oncall"}},
		{name: "per-table scopes", text: "a:" + tok + ":rows:read:invoices,rows:read:documents,anomalies:read", names: []string{"a"}},
		{name: "rows scope without a table", text: "a:" + tok + ":rows:read:", err: "scope 1 is not one of"},
		{name: "rows scope with a bad table", text: "a:" + tok + ":admin,rows:read:in voices", err: "scope 2 is not one of"},
		{name: "unknown scope names its line", text: "a:" + tok + "1:admin\nb:" + tok + "2:anomalies:write", err: "entry on line 2: b: scope 1 is not one of"},
		{name: "env with semicolons", text: "a:" + tok + "1:admin; b:" + tok + "2:documents:read;", semicolons: true, names: []string{"a", "b"}},
		{name: "semicolons not separators in a file", text: "a:" + tok + "1:admin; b:" + tok + "2:documents:read", err: "scope 1 is not one of"},
		{name: "comments and blanks", text: "\n# x\n  a:" + tok + ":admin  \n\n", names: []string{"a"}},
		{name: "CRLF", text: "a:" + tok + ":admin\r\nb:" + tok + "x:admin\r\n", names: []string{"a", "b"}},
		{name: "repeated scope", text: "a:" + tok + ":admin,admin", names: []string{"a"}},
		{name: "base64 token", text: "a:ABCDEFGHIJKLMNOP+/==:admin", names: []string{"a"}},
		{name: "empty", text: "# nothing\n", err: "no token entries"},
		{name: "two fields", text: "a:" + tok, err: "want name:token:scope1,scope2"},
		{name: "one field", text: tok, err: "want name:token:scope1,scope2"},
		{name: "short token", text: "a:short:admin", err: "16 to 512 characters"},
		{name: "token with space", text: "a:abcdefgh ijklmnopq:admin", err: "16 to 512 characters"},
		{name: "bad name", text: "a b:" + tok + ":admin", err: `name "a b"`},
		{name: "empty name", text: ":" + tok + ":admin", err: `name ""`},
		{name: "unknown scope", text: "a:" + tok + ":documents:write", err: "scope 1 is not one of"},
		{name: "fields swapped", text: "a:admin:" + tok, err: "16 to 512 characters"},
		{name: "no scope", text: "a:" + tok + ":", err: "no scope"},
		{name: "only commas", text: "a:" + tok + ":,,", err: "no scope"},
		{name: "duplicate name", text: "a:" + tok + "1:admin\na:" + tok + "2:admin", err: `name "a" is used twice`},
		{name: "duplicate token", text: "a:" + tok + ":admin\nb:" + tok + ":documents:read", err: "same token as a"},
		{name: "errors name the line", text: "a:" + tok + ":admin\nb:x:admin", err: "line 2"},
	} {
		got, err := ParseTokens(c.text, c.semicolons)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || !errors.Is(err, ErrBadTokens) {
				t.Errorf("%s: error %v, want ErrBadTokens containing %q", c.name, err, c.err)
			}
			// A token never appears in an error message.
			if err != nil && strings.Contains(err.Error(), tok) {
				t.Errorf("%s: error echoes the token: %v", c.name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !slices.Equal(got.Names(), c.names) || got.Len() != len(c.names) {
			t.Errorf("%s: names %v, want %v", c.name, got.Names(), c.names)
		}
	}
}

// TestTokensStoredHashed: the parsed set keeps no token text.
func TestTokensStoredHashed(t *testing.T) {
	tk, err := ParseTokens(testTokens, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range tk.cur.Load().entries {
		for _, secret := range []string{docsToken, revenueToken, adminToken, bothToken, invoiceToken, anomalyToken} {
			if strings.Contains(string(e.hash[:]), secret) || strings.Contains(e.name, secret) {
				t.Fatalf("entry %s holds a token in clear", e.name)
			}
		}
	}
	if e, ok := tk.lookup(adminToken); !ok || e.name != "ops" {
		t.Fatalf("lookup(admin) = %v, %v", e, ok)
	}
	if _, ok := tk.lookup(adminToken + "x"); ok {
		t.Fatal("lookup of a longer token matched")
	}
	if _, ok := tk.lookup(""); ok {
		t.Fatal("lookup of the empty token matched")
	}
}

// newAuthServer is newTestServer with tokens and a revenue section. Requests
// that pass authentication fail validation before any query runs, or reach
// the nil ClickHouse connection and are answered 503: either way, not 401/403.
func newAuthServer(t *testing.T, tk *Tokens) *Server {
	t.Helper()
	cfg, err := tables.Parse([]byte(`{"tables":[{"name":"documents","id_column":"id","id_layout":"seed000",
		"search":{"time_column":"created_at","title_column":"title"}},
		{"name":"invoices","id_column":"id","id_layout":"seed000"}],
		"revenue":{"table":"invoices","amount_column":"amount","currency":"EUR","time_column":"issued_at"}}`))
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Tables: cfg, DocumentsTable: "documents", QueryTimeout: time.Second, Tokens: tk},
		query.New(nil, "tributary"), slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	s.stopped = &stoppedWatch{timeout: time.Second, fetch: func(context.Context, time.Time) ([]query.StoppedTable, error) { return nil, nil }}
	return s
}

func TestAuthDecisions(t *testing.T) {
	tk, err := ParseTokens(testTokens, false)
	if err != nil {
		t.Fatal(err)
	}
	s := newAuthServer(t, tk)
	// Paths chosen to fail validation (400) once authorized, so that no
	// query runs.
	routes := map[string]string{
		"documents": "/v1/documents/abc",
		"search":    "/v1/documents?limit=0",
		"rows":      "/v1/tables/invoices/rows/abc",
		"docrows":   "/v1/tables/documents/rows/abc",
		"moves":     "/v1/anomalies/moves?kind=bogus",
		"anomalies": "/v1/anomalies/duplicates?state=bogus",
		"revenue":   "/v1/revenue?from=bogus",
		"shards":    "/v1/shards?after=bogus",
		"health":    "/healthz",
		"openapi":   "/v1/openapi.json",
	}
	const ok = 0 // anything but 401/403
	for _, c := range []struct {
		route, header string
		want          int
		wwwAuth       string
	}{
		// No credentials: 401 on every protected route, nothing on open ones.
		{"documents", "", 401, `Bearer realm="tributary"`},
		{"search", "", 401, `Bearer realm="tributary"`},
		{"rows", "", 401, `Bearer realm="tributary"`},
		{"anomalies", "", 401, `Bearer realm="tributary"`},
		{"revenue", "", 401, `Bearer realm="tributary"`},
		{"shards", "", 401, `Bearer realm="tributary"`},
		{"health", "", ok, ""},
		{"openapi", "", ok, ""},
		// Malformed headers and unknown tokens: 401.
		{"documents", "Basic dXNlcjpwYXNz", 401, `error="invalid_request"`},
		{"documents", "Bearer", 401, `error="invalid_request"`},
		{"documents", "Bearer ", 401, `error="invalid_request"`},
		{"documents", "Bearer not-a-configured-token-at-all", 401, `error="invalid_token"`},
		{"documents", "Bearer " + docsToken + "x", 401, `error="invalid_token"`},
		{"revenue", "Bearer " + strings.ToUpper(revenueToken), 401, `error="invalid_token"`},
		// documents:read.
		{"documents", "Bearer " + docsToken, ok, ""},
		{"documents", "bearer " + docsToken, ok, ""},
		{"search", "Bearer " + docsToken, ok, ""},
		// documents:read reads the documents table's rows, not invoices'.
		{"docrows", "Bearer " + docsToken, ok, ""},
		{"rows", "Bearer " + docsToken, 403, `error="insufficient_scope", scope="rows:read:invoices"`},
		// documents:read still grants the anomaly listings.
		{"anomalies", "Bearer " + docsToken, ok, ""},
		{"moves", "Bearer " + docsToken, ok, ""},
		{"shards", "Bearer " + docsToken, ok, ""},
		{"revenue", "Bearer " + docsToken, 403, `error="insufficient_scope", scope="revenue:read"`},
		// revenue:read.
		{"revenue", "Bearer " + revenueToken, ok, ""},
		{"shards", "Bearer " + revenueToken, ok, ""},
		{"documents", "Bearer " + revenueToken, 403, `error="insufficient_scope", scope="documents:read"`},
		{"search", "Bearer " + revenueToken, 403, `scope="documents:read"`},
		{"rows", "Bearer " + revenueToken, 403, `scope="rows:read:invoices"`},
		{"docrows", "Bearer " + revenueToken, 403, `scope="rows:read:documents"`},
		{"anomalies", "Bearer " + revenueToken, 403, `scope="anomalies:read"`},
		// rows:read:invoices: that table's rows and nothing else.
		{"rows", "Bearer " + invoiceToken, ok, ""},
		{"docrows", "Bearer " + invoiceToken, 403, `scope="rows:read:documents"`},
		{"documents", "Bearer " + invoiceToken, 403, `scope="documents:read"`},
		{"anomalies", "Bearer " + invoiceToken, 403, `scope="anomalies:read"`},
		{"revenue", "Bearer " + invoiceToken, 403, `scope="revenue:read"`},
		// anomalies:read: the listings and nothing else.
		{"anomalies", "Bearer " + anomalyToken, ok, ""},
		{"moves", "Bearer " + anomalyToken, ok, ""},
		{"documents", "Bearer " + anomalyToken, 403, `scope="documents:read"`},
		{"docrows", "Bearer " + anomalyToken, 403, `scope="rows:read:documents"`},
		// admin and two scopes: everything.
		{"documents", "Bearer " + adminToken, ok, ""},
		{"revenue", "Bearer " + adminToken, ok, ""},
		{"anomalies", "Bearer " + adminToken, ok, ""},
		{"rows", "Bearer " + adminToken, ok, ""},
		{"docrows", "Bearer " + adminToken, ok, ""},
		{"documents", "Bearer " + bothToken, ok, ""},
		{"revenue", "Bearer " + bothToken, ok, ""},
		// Open routes ignore a bad token.
		{"health", "Bearer nonsense", ok, ""},
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", routes[c.route], nil)
		if c.header != "" {
			req.Header.Set("Authorization", c.header)
		}
		s.ServeHTTP(rec, req)
		name := c.route + " with " + strings.ReplaceAll(c.header, "-token-0123456789abcdef", "…")
		if c.want == ok {
			if rec.Code == 401 || rec.Code == 403 {
				t.Errorf("%s: %d %s, want access", name, rec.Code, rec.Body)
			}
			continue
		}
		var e Error
		if rec.Code != c.want || json.Unmarshal(rec.Body.Bytes(), &e) != nil {
			t.Errorf("%s: %d %s, want %d", name, rec.Code, rec.Body, c.want)
			continue
		}
		wantCode := map[int]string{401: "unauthorized", 403: "forbidden"}[c.want]
		if e.Code != wantCode || e.Message == "" {
			t.Errorf("%s: error %+v, want %s", name, e, wantCode)
		}
		if got := rec.Header().Get("WWW-Authenticate"); !strings.HasPrefix(got, `Bearer realm="tributary"`) || !strings.Contains(got, c.wwwAuth) {
			t.Errorf("%s: WWW-Authenticate %q, want one containing %q", name, got, c.wwwAuth)
		}
		for _, secret := range []string{docsToken, revenueToken, adminToken, bothToken, invoiceToken, anomalyToken} {
			if strings.Contains(rec.Body.String(), secret) {
				t.Errorf("%s: the answer echoes a token", name)
			}
		}
	}
}

// TestCheckTables: a rows:read:<table> scope naming a table that is not
// configured is refused with its line and name.
func TestCheckTables(t *testing.T) {
	tk, err := ParseTokens(testTokens+"\ntypo:typo-token-0123456789abcdef:rows:read:invoice", false)
	if err != nil {
		t.Fatal(err)
	}
	known := func(table string) bool { return table == "documents" || table == "invoices" }
	err = tk.CheckTables(known)
	if err == nil || !errors.Is(err, ErrBadTokens) || !strings.Contains(err.Error(), `entry on line 9 (typo): scope rows:read:invoice: table "invoice" is not configured`) {
		t.Fatalf("CheckTables: %v", err)
	}
	good, err := ParseTokens(testTokens, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := good.CheckTables(known); err != nil {
		t.Fatalf("CheckTables of configured tables: %v", err)
	}
}

// TestNoTokensIsOpen: the zero Config serves every route without a token.
func TestNoTokensIsOpen(t *testing.T) {
	s := newAuthServer(t, nil)
	for _, path := range []string{"/v1/documents/abc", "/v1/revenue?from=x", "/v1/shards?after=x", "/v1/anomalies/duplicates?state=x"} {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != 400 {
			t.Errorf("%s: %d %s, want 400 (validation, no auth)", path, rec.Code, rec.Body)
		}
	}
}

// TestAccessLogNamesToken: the access log carries the token's name, never
// the token, for granted and refused requests alike.
func TestAccessLogNamesToken(t *testing.T) {
	tk, err := ParseTokens(testTokens, false)
	if err != nil {
		t.Fatal(err)
	}
	s := newAuthServer(t, tk)
	var logs strings.Builder
	s.log = slog.New(slog.NewTextHandler(&logs, nil))
	for _, c := range []struct{ path, token, name string }{
		{"/v1/documents/abc", docsToken, "token=support"},
		{"/v1/revenue?from=bogus", docsToken, "token=support"},
		{"/v1/tables/invoices/rows/abc", invoiceToken, "token=billing"},
	} {
		logs.Reset()
		req := httptest.NewRequest("GET", c.path, nil)
		req.Header.Set("Authorization", "Bearer "+c.token)
		s.ServeHTTP(httptest.NewRecorder(), req)
		if !strings.Contains(logs.String(), c.name) || strings.Contains(logs.String(), c.token) {
			t.Errorf("%s: access log %q, want %s and not the token", c.path, logs.String(), c.name)
		}
	}
}
