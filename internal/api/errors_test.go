package api

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/tributary/tributary/internal/ids"
	"github.com/tributary/tributary/internal/tables"
)

// TestFailureStatus: a failed query is answered by whose problem it is;
// 503 only for a ClickHouse that cannot be reached.
func TestFailureStatus(t *testing.T) {
	ex := func(code int32, msg string) error {
		return fmt.Errorf("read documents: %w", &clickhouse.Exception{Code: code, Name: "DB::Exception", Message: msg})
	}
	for _, c := range []struct {
		err    error
		status int
		code   string
	}{
		{ex(43, "Illegal types of arguments (Int64, String) of function equals"), http.StatusBadRequest, "bad_value"},
		{ex(47, "Missing columns: 'title'"), http.StatusInternalServerError, "query_failed"},
		{ex(202, "Too many simultaneous queries"), http.StatusServiceUnavailable, "backend_unavailable"},
		{fmt.Errorf("read: %w", syscall.ECONNREFUSED), http.StatusServiceUnavailable, "backend_unavailable"},
		{ex(159, "Timeout exceeded"), http.StatusGatewayTimeout, "timeout"},
		{errors.New("scan: something of ours"), http.StatusInternalServerError, "query_failed"},
	} {
		got := failure(c.err)
		if got.Status != c.status || got.Code != c.code || got.Message == "" {
			t.Errorf("%v: %d %s %q, want %d %s", c.err, got.Status, got.Code, got.Message, c.status, c.code)
		}
	}
	if m := failure(ex(43, "Illegal types of arguments\nstack trace")).Message; !strings.Contains(m, "Illegal types of arguments") || strings.Contains(m, "stack") {
		t.Errorf("input error message %q: want ClickHouse's first line", m)
	}
}

// TestParseTableID: an id of the other kind than the table's id_layout is
// a 400 naming the layout; ids longer than any layout say so.
func TestParseTableID(t *testing.T) {
	cfg, err := tables.Parse([]byte(`{"tables":[
		{"name":"documents","id_column":"id","id_layout":"seed000"},
		{"name":"events","id_column":"id","id_layout":"uuidv7"},
		{"name":"accounts","id_column":"id","id_layout":"pgdog-hash-uuid:4"},
		{"name":"notes","id_column":"id","id_layout":"serial"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	const u = "0190a4e2-1c3b-7000-8000-000000000001"
	for _, c := range []struct {
		table, id string
		want      any    // the bound value, or nil for an error
		code      string // the error's code
		mention   string // a text the message must contain
	}{
		{"documents", "734197815705617408", int64(734197815705617408), "", ""},
		{"documents", u, nil, "wrong_id_kind", `id_layout "seed000"`},
		{"notes", u, nil, "wrong_id_kind", `id_layout "serial"`},
		{"events", u, u, "", ""},
		{"events", "42", nil, "wrong_id_kind", `id_layout "uuidv7"`},
		{"accounts", "42", nil, "wrong_id_kind", `id_layout "pgdog-hash-uuid:4"`},
		{"documents", strings.Repeat("1", 37), nil, "bad_id", "longer than any id layout"},
		{"events", strings.Repeat("a", 100), nil, "bad_id", "longer than any id layout"},
		{"documents", "99999999999999999999", nil, "bad_id", "beyond the range of a bigint"},
	} {
		tb, _ := cfg.ByName(c.table)
		l, lerr := ids.Lookup(tb.IDLayout)
		got, err := parseTableID(c.id, tb, tableLayout{layout: l, err: lerr})
		if c.code == "" {
			if err != nil || got != c.want {
				t.Errorf("%s %s: %v, %v; want %v", c.table, c.id, got, err, c.want)
			}
			continue
		}
		var e *Error
		if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Code != c.code || !strings.Contains(e.Message, c.mention) {
			t.Errorf("%s %s: %v, %v; want 400 %s mentioning %q", c.table, c.id, got, err, c.code, c.mention)
		}
	}
}

// TestLoggedQuery: the access log keeps the query string but never a
// secret's value.
func TestLoggedQuery(t *testing.T) {
	for in, want := range map[string]string{
		"":                               "",
		"after=0:0/1&wait=1s":            "after=0:0/1&wait=1s",
		"workspace=3&token=s3cr3t":       "workspace=3&token=REDACTED",
		"Access_Token=abc&x=1":           "Access_Token=REDACTED&x=1",
		"a%20b=1&%74oken=abc":            "a%20b=1&%74oken=REDACTED",
		"title=%zz":                      "(malformed, 9 bytes)",
		"password=p&password=q&limit=10": "password=REDACTED&password=REDACTED&limit=10",
	} {
		if got := loggedQuery(in); got != want {
			t.Errorf("loggedQuery(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestAccessLogHasQuery: every request's log line carries its query
// string, a secret's value redacted.
func TestAccessLogHasQuery(t *testing.T) {
	var buf strings.Builder
	s := newTestServer(t)
	s.log = slog.New(slog.NewTextHandler(&buf, nil))
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/documents/abc?wait=1s&token=s3cr3t", nil))
	line := buf.String()
	if !strings.Contains(line, `query="wait=1s&token=REDACTED"`) || strings.Contains(line, "s3cr3t") {
		t.Errorf("access log %q: want the query string with the token redacted", line)
	}
}
