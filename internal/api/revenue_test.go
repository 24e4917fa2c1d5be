package api

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shopspring/decimal"

	"github.com/tributary/tributary/internal/query"
	"github.com/tributary/tributary/internal/tables"
)

const revenueConfig = `{"tables":[{"name":"invoices","id_column":"id","id_layout":"seed000"}],
 "revenue":{"table":"invoices","amount_column":"amount","currency_column":"currency","time_column":"issued_at",
  "status_column":"status","workspace_column":"workspace_id","count_statuses":["paid"],"refund_statuses":["refunded"]}}`

func revenueCfg(t testing.TB) *tables.Config {
	t.Helper()
	cfg, err := tables.Parse([]byte(revenueConfig))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestParseRevenueQuery(t *testing.T) {
	cfg := revenueCfg(t).Revenue
	nov := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	dec := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		query, accept string
		from, to      time.Time
		groups        []query.Group
		workspaces    []string
		currencies    []string
		statuses      []string
		csv           bool
	}{
		{query: "from=2026-11-01&to=2026-12-01", from: nov, to: dec, groups: []query.Group{"currency"}},
		{query: "from=2026-11-01T01:00:00%2B01:00&to=2026-12-01T00:00:00Z&group_by=day", from: nov, to: dec,
			groups: []query.Group{"day", "currency"}},
		{query: "from=2026-11-01&to=2026-12-01&group_by=shard,week&group_by=workspace", from: nov, to: dec,
			groups: []query.Group{"shard", "week", "workspace", "currency"}},
		{query: "from=2026-11-01&to=2026-12-01&group_by=currency,month&group_by=month", from: nov, to: dec,
			groups: []query.Group{"currency", "month"}},
		{query: "from=2026-11-01&to=2026-12-01&group_by=day%2C+shard", from: nov, to: dec,
			groups: []query.Group{"day", "shard", "currency"}},
		{query: "from=2026-11-01&to=2026-12-01&workspace=007,42&workspace=0190A4E2-1C3B-7000-8000-000000000001&workspace=acme_1",
			from: nov, to: dec, groups: []query.Group{"currency"},
			workspaces: []string{"7", "42", "0190a4e2-1c3b-7000-8000-000000000001", "acme_1"}},
		{query: "from=2026-11-01&to=2026-12-01&currency=eur,USD&currency=EUR&status=refunded", from: nov, to: dec,
			groups: []query.Group{"currency"}, currencies: []string{"EUR", "USD"}, statuses: []string{"refunded"}},
		{query: "from=2026-11-01&to=2026-12-01&format=csv", from: nov, to: dec, groups: []query.Group{"currency"}, csv: true},
		{query: "from=2026-11-01&to=2026-12-01", accept: "text/csv", from: nov, to: dec, groups: []query.Group{"currency"}, csv: true},
		{query: "from=2026-11-01&to=2026-12-01&format=json", accept: "text/csv", from: nov, to: dec, groups: []query.Group{"currency"}},
		{query: "from=2021-11-01&to=2026-11-01", from: time.Date(2021, 11, 1, 0, 0, 0, 0, time.UTC),
			to: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), groups: []query.Group{"currency"}},
	} {
		p, err := parseRevenueQuery(c.query, cfg, c.accept)
		if err != nil {
			t.Errorf("%s: %v", c.query, err)
			continue
		}
		r := p.req
		if !r.From.Equal(c.from) || !r.To.Equal(c.to) || r.From.Location() != time.UTC || r.To.Location() != time.UTC {
			t.Errorf("%s: range [%v, %v), want [%v, %v)", c.query, r.From, r.To, c.from, c.to)
		}
		if !slices.Equal(r.GroupBy, c.groups) || !slices.Equal(r.Workspaces, c.workspaces) ||
			!slices.Equal(r.Currencies, c.currencies) || !slices.Equal(r.Statuses, c.statuses) || p.csv != c.csv {
			t.Errorf("%s: got %+v csv=%v", c.query, r, p.csv)
		}
		if r.MaxRows != maxRevenueRows {
			t.Errorf("%s: MaxRows %d", c.query, r.MaxRows)
		}
	}
}

func TestParseRevenueQueryRejects(t *testing.T) {
	cfg := revenueCfg(t).Revenue
	single := &tables.Revenue{Table: "orders", AmountColumn: "total", Currency: "USD", TimeColumn: "placed_at"}
	manyWS := make([]string, maxFilterValues+1)
	for i := range manyWS {
		manyWS[i] = "w" + strings.Repeat("x", i%10) + string(rune('a'+i%26)) + string(rune('a'+i/26%26))
	}
	ok := "from=2026-11-01&to=2026-12-01"
	for _, c := range []struct {
		name, query, code string
		cfg               *tables.Revenue
	}{
		{"missing from", "to=2026-12-01", "bad_from", nil},
		{"missing to", "from=2026-12-01", "bad_to", nil},
		{"empty from", "from=&to=2026-12-01", "bad_from", nil},
		{"from twice", "from=2026-11-01&from=2026-11-02&to=2026-12-01", "bad_from", nil},
		{"garbage from", "from=yesterday&to=2026-12-01", "bad_from", nil},
		{"no zone", "from=2026-11-01T00:00:00&to=2026-12-01", "bad_from", nil},
		{"sub-second from", "from=2026-11-01T00:00:00.5Z&to=2026-12-01", "bad_from", nil},
		{"sub-second to", "from=2026-11-01&to=2026-12-01T00:00:00.000001Z", "bad_to", nil},
		{"bad date", "from=2026-02-30&to=2026-12-01", "bad_from", nil},
		{"unix seconds", "from=1790000000&to=2026-12-01", "bad_from", nil},
		{"bad to", "from=2026-11-01&to=2026-13-01", "bad_to", nil},
		{"from after to", "from=2026-12-01&to=2026-11-01", "bad_range", nil},
		{"from equals to", "from=2026-12-01&to=2026-12-01T00:00:00Z", "bad_range", nil},
		{"over five years", "from=2020-01-01&to=2025-01-01T00:00:01Z", "bad_range", nil},
		{"absurd range", "from=1970-01-01&to=2106-01-01", "bad_range", nil},
		{"before 1970", "from=1969-12-31&to=1970-01-02", "bad_from", nil},
		{"year 0001", "from=0001-01-01&to=0001-02-01", "bad_from", nil},
		{"after 2106", "from=2105-12-01&to=2106-02-01", "bad_to", nil},
		{"unknown group", ok + "&group_by=year", "bad_group_by", nil},
		{"case matters", ok + "&group_by=Day", "bad_group_by", nil},
		{"two time buckets", ok + "&group_by=day,week", "bad_group_by", nil},
		{"two time buckets repeated", ok + "&group_by=month&group_by=day", "bad_group_by", nil},
		{"workspace not configured", ok + "&group_by=workspace", "bad_group_by", single},
		{"workspace filter not configured", ok + "&workspace=1", "bad_workspace", single},
		{"bad workspace", ok + "&workspace=a%20b", "bad_workspace", nil},
		{"long workspace", ok + "&workspace=" + strings.Repeat("1", 65), "bad_workspace", nil},
		{"too many workspaces", ok + "&workspace=" + strings.Join(manyWS, ","), "too_many_workspaces", nil},
		{"bad currency", ok + "&currency=EURO", "bad_currency", nil},
		{"numeric currency", ok + "&currency=978", "bad_currency", nil},
		{"quoted currency", ok + "&currency=E'R", "bad_currency", nil},
		{"unknown status", ok + "&status=void", "bad_status", nil},
		{"status without column", ok + "&status=paid", "bad_status", single},
		{"bad format", ok + "&format=xml", "bad_format", nil},
		{"format twice", ok + "&format=csv&format=json", "bad_format", nil},
		{"unknown parameter", ok + "&group=day", "unknown_parameter", nil},
		{"malformed query", ok + "&%zz=1", "bad_query", nil},
	} {
		rc := c.cfg
		if rc == nil {
			rc = cfg
		}
		_, err := parseRevenueQuery(c.query, rc, "")
		e, isErr := err.(*Error)
		if !isErr || e.Status != http.StatusBadRequest || e.Code != c.code || e.Message == "" {
			t.Errorf("%s: %q: error %#v, want 400 %s", c.name, c.query, err, c.code)
		}
	}
}

func TestPrefersCSV(t *testing.T) {
	for accept, want := range map[string]bool{
		"":                                 false,
		"*/*":                              false,
		"application/json":                 false,
		"text/csv":                         true,
		"text/csv; charset=utf-8":          true,
		"text/csv;q=0.5, application/json": false,
		"application/json;q=0.1, text/csv": true,
		"text/csv;q=0":                     false,
		"text/html, text/csv;q=0.9":        true,
		"garbage;;;":                       false,
	} {
		if got := prefersCSV(accept); got != want {
			t.Errorf("prefersCSV(%q) = %v, want %v", accept, got, want)
		}
	}
}

// TestRevenueRouteRejectsBeforeQuerying: bad input is answered without
// ClickHouse (the server below has none), as JSON.
func TestRevenueRouteRejectsBeforeQuerying(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := New(Config{Tables: revenueCfg(t), DocumentsTable: "invoices", QueryTimeout: time.Second},
		query.New(nil, "tributary"), log, prometheus.NewRegistry())
	for path, code := range map[string]string{
		"/v1/revenue": "bad_from",
		"/v1/revenue?from=2026-12-01&to=2026-11-01":                          "bad_range",
		"/v1/revenue?from=2026-11-01&to=2026-12-01&x=1":                      "unknown_parameter",
		"/v1/revenue?from=2026-11-01&to=2026-12-01&group_by=year&format=csv": "bad_group_by",
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set("Accept", "text/csv")
		s.ServeHTTP(rec, req)
		var e Error
		if rec.Code != 400 || rec.Header().Get("Content-Type") != "application/json" ||
			json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Code != code {
			t.Errorf("%s: %d %s %s, want 400 %s", path, rec.Code, rec.Header().Get("Content-Type"), rec.Body, code)
		}
	}

	// Without a revenue section the route exists and says so.
	s = newTestServer(t)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/revenue?from=2026-11-01&to=2026-12-01", nil))
	if rec.Code != 404 || !strings.Contains(rec.Body.String(), "revenue_not_configured") {
		t.Errorf("unconfigured: %d %s", rec.Code, rec.Body)
	}
}

// sampleReport is a report as query.Revenue returns it.
func sampleReport() *query.RevenueReport {
	d := decimal.RequireFromString
	rep := &query.RevenueReport{GroupBy: []query.Group{"workspace", "day", "shard", "currency"}, Scale: 2,
		CountStatuses: []string{"paid"}, RefundStatuses: []string{"refunded"}}
	for _, r := range []struct {
		ws      any
		day     string
		shard   int
		cur     string
		g, r, n string
		inv     uint64
	}{
		{"1", "2026-11-30", 0, "EUR", "10000000000", "0.01", "9999999999.99", 3},
		{nil, "2026-11-30", 1, "EUR", "0", "0", "0", 1},
		{"=HYPERLINK(\"x\")", "2026-12-01", 1, "USD", "5", "10", "-5", 2},
		{"-7", "2026-12-01", 1, "USD", "0.1", "0", "0.1", 1},
	} {
		rep.Rows = append(rep.Rows, query.RevenueRow{Key: []any{r.ws, r.day, r.shard, r.cur}, Currency: r.cur,
			Gross: d(r.g), Refunds: d(r.r), Net: d(r.n), Invoices: r.inv})
	}
	rep.Totals = []query.RevenueTotal{{Currency: "EUR", Gross: d("10000000000"), Refunds: d("0.01"), Net: d("9999999999.99"), Invoices: 4}}
	return rep
}

func TestRevenueJSONRows(t *testing.T) {
	b, err := json.Marshal(revenueRows{sampleReport()})
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"workspace":"1","day":"2026-11-30","shard":0,"currency":"EUR","gross":"10000000000.00","refunds":"0.01","net":"9999999999.99","invoices":3},` +
		`{"workspace":null,"day":"2026-11-30","shard":1,"currency":"EUR","gross":"0.00","refunds":"0.00","net":"0.00","invoices":1},` +
		`{"workspace":"=HYPERLINK(\"x\")","day":"2026-12-01","shard":1,"currency":"USD","gross":"5.00","refunds":"10.00","net":"-5.00","invoices":2},` +
		`{"workspace":"-7","day":"2026-12-01","shard":1,"currency":"USD","gross":"0.10","refunds":"0.00","net":"0.10","invoices":1}]`
	if string(b) != want {
		t.Errorf("rows JSON\n got %s\nwant %s", b, want)
	}
	if got := totalsJSON(sampleReport()); got[0].Gross != "10000000000.00" || got[0].Net != "9999999999.99" {
		t.Errorf("totals %+v", got)
	}
	// Empty reports are [] not null.
	b, _ = json.Marshal(revenueResponse{Rows: revenueRows{&query.RevenueReport{}}, Totals: totalsJSON(&query.RevenueReport{})})
	if !bytes.Contains(b, []byte(`"rows":[]`)) || !bytes.Contains(b, []byte(`"totals":[]`)) {
		t.Errorf("empty report: %s", b)
	}
}

func TestRevenueCSV(t *testing.T) {
	rec := httptest.NewRecorder()
	p := revenueParams{req: query.RevenueRequest{From: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}}
	if err := writeRevenueCSV(rec, p, sampleReport()); err != nil {
		t.Fatal(err)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "text/csv; charset=utf-8" {
		t.Errorf("content type %q", ct)
	}
	recs, err := csv.NewReader(rec.Body).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"workspace", "day", "shard", "currency", "gross", "refunds", "net", "invoices"},
		{"1", "2026-11-30", "0", "EUR", "10000000000.00", "0.01", "9999999999.99", "3"},
		{"", "2026-11-30", "1", "EUR", "0.00", "0.00", "0.00", "1"},
		{"'=HYPERLINK(\"x\")", "2026-12-01", "1", "USD", "5.00", "10.00", "-5.00", "2"},
		{"-7", "2026-12-01", "1", "USD", "0.10", "0.00", "0.10", "1"},
	}
	if !slices.EqualFunc(recs, want, slices.Equal) {
		t.Errorf("CSV\n got %q\nwant %q", recs, want)
	}
}

// FuzzParseRevenueQuery: any query string is either a 400 *Error or a
// request that satisfies every invariant the query layer relies on.
func FuzzParseRevenueQuery(f *testing.F) {
	for _, s := range []string{
		"from=2026-11-01&to=2026-12-01",
		"from=2026-11-01T00:00:00%2B05:30&to=2026-12-01&group_by=day,shard&group_by=workspace&workspace=1,2&currency=eur&status=paid&format=csv",
		"from=2026-12-01&to=2026-11-01", "group_by=,,,", "from=9999-99-99", "%", "from=2026-11-01&to=2031-11-01",
		"workspace=" + strings.Repeat("a,", 600),
	} {
		f.Add(s, "")
	}
	f.Add("from=2026-11-01&to=2026-12-01", "text/csv;q=0.9, application/json;q=0.8")
	cfg := revenueCfg(f).Revenue
	f.Fuzz(func(t *testing.T, raw, accept string) {
		p, err := parseRevenueQuery(raw, cfg, accept)
		if err != nil {
			e, ok := err.(*Error)
			if !ok || e.Status != http.StatusBadRequest || e.Code == "" || e.Message == "" {
				t.Fatalf("%q: error %#v is not a 400 *Error", raw, err)
			}
			return
		}
		r := p.req
		if !r.From.Before(r.To) || r.To.After(r.From.AddDate(maxRevenueRange, 0, 0)) ||
			r.From.Before(minRevenueTime) || r.To.After(maxRevenueTime) || r.From.Location() != time.UTC ||
			r.From.Nanosecond() != 0 || r.To.Nanosecond() != 0 {
			t.Fatalf("%q: bad range [%v, %v)", raw, r.From, r.To)
		}
		times := 0
		for i, g := range r.GroupBy {
			if !slices.Contains(query.Groups, g) || slices.Index(r.GroupBy, g) != i {
				t.Fatalf("%q: groups %v", raw, r.GroupBy)
			}
			if g.IsTime() {
				times++
			}
		}
		if times > 1 || !slices.Contains(r.GroupBy, query.GroupCurrency) {
			t.Fatalf("%q: groups %v", raw, r.GroupBy)
		}
		if len(r.Workspaces) > maxFilterValues {
			t.Fatalf("%q: %d workspaces", raw, len(r.Workspaces))
		}
		for _, w := range r.Workspaces {
			if !workspaceParam.MatchString(w) {
				t.Fatalf("%q: workspace %q", raw, w)
			}
		}
		for _, c := range r.Currencies {
			if len(c) != 3 || strings.ToUpper(c) != c || !currencyParam.MatchString(c) {
				t.Fatalf("%q: currency %q", raw, c)
			}
		}
		for _, s := range r.Statuses {
			if !slices.Contains(cfg.CountStatuses, s) && !slices.Contains(cfg.RefundStatuses, s) {
				t.Fatalf("%q: status %q", raw, s)
			}
		}
		if v, _ := url.ParseQuery(raw); v.Get("format") == "csv" && !p.csv {
			t.Fatalf("%q: format=csv ignored", raw)
		}
	})
}
