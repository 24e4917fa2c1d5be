package api

// GET /v1/revenue: exact revenue over the table configured in the table
// config's `revenue` section. The definition of gross, refunds and net is
// in internal/query/revenue.go and in the OpenAPI document.

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/tributary/tributary/internal/query"
	"github.com/tributary/tributary/internal/tables"
)

// Request limits. They keep one request's work bounded: the report is
// computed by a single ClickHouse query whose result is held in memory.
const (
	// maxRevenueRange is the widest [from, to) window, in calendar years.
	maxRevenueRange = 5
	// maxRevenueRows is the most groups a report may have.
	maxRevenueRows = query.DefaultMaxRevenueRows
	// maxFilterValues bounds each of workspace=, currency= and status=.
	maxFilterValues = 1000
)

// revenueDefinition is stated in every JSON answer so that a number can be
// read without the documentation at hand.
const revenueDefinition = "over live rows whose time is in [from, to): gross = sum(amount) of rows in count_statuses or refund_statuses; " +
	"refunds = sum(amount) of rows in refund_statuses; net = gross - refunds; invoices = rows in gross. " +
	"A refunded row was collected, then given back: it is in gross and refunds and nets to zero. Currencies are never added together."

// partialRefundDefinition replaces the refunds clause when the config names
// a refunded-amount column.
const partialRefundDefinition = "over live rows whose time is in [from, to): gross = sum(amount) of rows in count_statuses or refund_statuses; " +
	"refunds = sum over those rows of refunded_amount_column where set, else of the whole amount for rows in refund_statuses (partial refunds); " +
	"net = gross - refunds; invoices = rows in gross. Currencies are never added together."

// The DateTime range of ClickHouse (seconds since 1970 in 32 unsigned
// bits, up to 2106-02-07): bounds outside it cannot be compared exactly.
var (
	minRevenueTime = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	maxRevenueTime = time.Date(2106, 1, 1, 0, 0, 0, 0, time.UTC)
)

var (
	currencyParam  = regexp.MustCompile(`^[A-Za-z]{3}$`)
	workspaceParam = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)
)

// revenueParams is a parsed and validated GET /v1/revenue query.
type revenueParams struct {
	req query.RevenueRequest
	csv bool
}

// badRevenue is a 400 with the given code.
func badRevenue(code, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Code: code, Message: fmt.Sprintf(format, args...)}
}

// parseRevenueQuery validates a raw query string against the revenue
// configuration. Every failure is a 400 *Error naming the parameter.
// accept is the request's Accept header (format= wins over it).
func parseRevenueQuery(raw string, cfg *tables.Revenue, accept string) (revenueParams, error) {
	var p revenueParams
	v, err := url.ParseQuery(raw)
	if err != nil {
		return p, badRevenue("bad_query", "the query string is malformed: %v", err)
	}
	known := map[string]bool{"from": true, "to": true, "group_by": true, "workspace": true,
		"currency": true, "status": true, "format": true, "after": true, "wait": true}
	for k := range v {
		if !known[k] {
			return p, badRevenue("unknown_parameter", "unknown parameter %q; use from, to, group_by, workspace, currency, status, format, after, wait", k)
		}
	}
	if p.req.From, err = parseInstant(v, "from"); err != nil {
		return p, err
	}
	if p.req.To, err = parseInstant(v, "to"); err != nil {
		return p, err
	}
	if !p.req.From.Before(p.req.To) {
		return p, badRevenue("bad_range", "from (%s) must be before to (%s): the range is [from, to)",
			p.req.From.Format(time.RFC3339Nano), p.req.To.Format(time.RFC3339Nano))
	}
	if p.req.To.After(p.req.From.AddDate(maxRevenueRange, 0, 0)) {
		return p, badRevenue("bad_range", "the range may span at most %d years; split the request", maxRevenueRange)
	}

	if p.req.GroupBy, err = parseGroups(listParam(v, "group_by"), cfg); err != nil {
		return p, err
	}
	if p.req.Workspaces, err = parseWorkspaces(listParam(v, "workspace"), cfg); err != nil {
		return p, err
	}
	if p.req.Currencies, err = parseCurrencies(listParam(v, "currency")); err != nil {
		return p, err
	}
	if p.req.Statuses, err = parseStatuses(listParam(v, "status"), cfg); err != nil {
		return p, err
	}
	p.req.MaxRows = maxRevenueRows

	formats := v["format"]
	switch {
	case len(formats) > 1:
		return p, badRevenue("bad_format", "format may be given once")
	case len(formats) == 1 && formats[0] == "csv":
		p.csv = true
	case len(formats) == 1 && formats[0] == "json":
	case len(formats) == 1:
		return p, badRevenue("bad_format", "format %q is not json or csv", formats[0])
	default:
		p.csv = prefersCSV(accept)
	}
	return p, nil
}

// parseInstant reads a required RFC 3339 time or YYYY-MM-DD date (midnight
// UTC) and returns it in UTC.
func parseInstant(v url.Values, name string) (time.Time, error) {
	vals := v[name]
	if len(vals) != 1 || vals[0] == "" {
		return time.Time{}, badRevenue("bad_"+name, "%s is required once, as RFC 3339 (2026-11-30T00:00:00Z) or YYYY-MM-DD (midnight UTC)", name)
	}
	s := vals[0]
	layout := time.RFC3339Nano
	if len(s) == len(time.DateOnly) {
		layout = time.DateOnly
	}
	t, err := time.Parse(layout, s)
	if err != nil {
		return time.Time{}, badRevenue("bad_"+name, "%s %q is neither RFC 3339 (2026-11-30T00:00:00Z) nor YYYY-MM-DD", name, s)
	}
	t = t.UTC()
	if t.Nanosecond() != 0 {
		// Stored times are truncated to seconds: only whole-second bounds
		// select exactly the rows the source would.
		return time.Time{}, badRevenue("bad_"+name, "%s %q has a fraction of a second; revenue windows are given in whole seconds", name, s)
	}
	if t.Before(minRevenueTime) || t.After(maxRevenueTime) {
		return time.Time{}, badRevenue("bad_"+name, "%s %q is outside 1970-01-01 .. 2106-01-01", name, s)
	}
	return t, nil
}

// listParam joins a repeatable, comma-separated parameter; blanks are
// dropped.
func listParam(v url.Values, name string) []string {
	var out []string
	for _, s := range v[name] {
		for _, item := range strings.Split(s, ",") {
			if item = strings.TrimSpace(item); item != "" {
				out = append(out, item)
			}
		}
	}
	return out
}

// parseGroups validates group_by and appends currency (always a key:
// amounts in different currencies are never added).
func parseGroups(items []string, cfg *tables.Revenue) ([]query.Group, error) {
	var out []query.Group
	for _, item := range items {
		g := query.Group(item)
		if !slices.Contains(query.Groups, g) {
			return nil, badRevenue("bad_group_by", "group_by %q is not one of day, week, month, workspace, shard, currency", item)
		}
		if slices.Contains(out, g) {
			continue
		}
		if g.IsTime() && slices.ContainsFunc(out, query.Group.IsTime) {
			return nil, badRevenue("bad_group_by", "group_by may name one of day, week, month")
		}
		if g == query.GroupWorkspace && cfg.WorkspaceColumn == "" {
			return nil, badRevenue("bad_group_by", "group_by=workspace needs workspace_column in the revenue configuration")
		}
		out = append(out, g)
	}
	if !slices.Contains(out, query.GroupCurrency) {
		out = append(out, query.GroupCurrency)
	}
	return out, nil
}

// parseWorkspaces normalizes workspace ids to the text form ClickHouse's
// toString gives the column: decimal integers without leading zeros,
// lower-case UUIDs, other ids as given.
func parseWorkspaces(items []string, cfg *tables.Revenue) ([]string, error) {
	if len(items) == 0 {
		return nil, nil
	}
	if cfg.WorkspaceColumn == "" {
		return nil, badRevenue("bad_workspace", "the workspace filter needs workspace_column in the revenue configuration")
	}
	var out []string
	for _, item := range items {
		if !workspaceParam.MatchString(item) {
			return nil, badRevenue("bad_workspace", "workspace %q is not an id (1 to 64 letters, digits, _ . : -)", item)
		}
		if n, err := strconv.ParseInt(item, 10, 64); err == nil {
			item = strconv.FormatInt(n, 10)
		} else if u, err := uuid.Parse(item); err == nil && strings.Count(item, "-") == 4 {
			item = u.String()
		}
		if !slices.Contains(out, item) {
			out = append(out, item)
		}
		if len(out) > maxFilterValues {
			return nil, badRevenue("too_many_workspaces", "at most %d workspaces per request", maxFilterValues)
		}
	}
	return out, nil
}

func parseCurrencies(items []string) ([]string, error) {
	var out []string
	for _, item := range items {
		if !currencyParam.MatchString(item) {
			return nil, badRevenue("bad_currency", "currency %q is not an ISO 4217 code such as EUR", item)
		}
		item = strings.ToUpper(item)
		if !slices.Contains(out, item) {
			out = append(out, item)
		}
		if len(out) > maxFilterValues {
			return nil, badRevenue("bad_currency", "at most %d currencies per request", maxFilterValues)
		}
	}
	return out, nil
}

// parseStatuses accepts only configured statuses: anything else would
// silently match nothing.
func parseStatuses(items []string, cfg *tables.Revenue) ([]string, error) {
	if len(items) == 0 {
		return nil, nil
	}
	if cfg.StatusColumn == "" {
		return nil, badRevenue("bad_status", "the status filter needs status_column in the revenue configuration")
	}
	allowed := append(slices.Clone(cfg.CountStatuses), cfg.RefundStatuses...)
	var out []string
	for _, item := range items {
		if !slices.Contains(allowed, item) {
			return nil, badRevenue("bad_status", "status %q is not one of the configured %s", item, strings.Join(allowed, ", "))
		}
		if !slices.Contains(out, item) {
			out = append(out, item)
		}
	}
	return out, nil
}

// prefersCSV reports whether the Accept header ranks text/csv above
// application/json (an absent or wildcard header means JSON).
func prefersCSV(accept string) bool {
	best := func(want string) float64 {
		q := 0.0
		for _, part := range strings.Split(accept, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil || mt != want {
				continue
			}
			w := 1.0
			if s, ok := params["q"]; ok {
				if f, err := strconv.ParseFloat(s, 64); err == nil && f >= 0 && f <= 1 {
					w = f
				}
			}
			q = max(q, w)
		}
		return q
	}
	c := best("text/csv")
	return c > 0 && c > best("application/json")
}

func (s *Server) revenue(w http.ResponseWriter, r *http.Request) error {
	cfg, t, ok := s.cfg.Tables.RevenueTable()
	if !ok {
		return &Error{Status: http.StatusNotFound, Code: "revenue_not_configured",
			Message: "no revenue section in the table configuration"}
	}
	p, err := parseRevenueQuery(r.URL.RawQuery, cfg, r.Header.Get("Accept"))
	if err != nil {
		return err
	}
	// Freshness first: the report includes at least everything up to it.
	fresh, err := s.freshness(w, r, []string{t.Topic})
	if err != nil {
		return err
	}
	p.req.ShardKey = t.ShardKey
	source := "live"
	if pre := s.preaggRead(r, cfg.Table, t.IDColumn, p.req, fresh); pre != nil {
		p.req.Preagg, source = pre, "preaggregate"
	}
	rep, err := s.q.Revenue(r.Context(), cfg, p.req)
	switch {
	case errors.Is(err, query.ErrUnknownTable):
		rep = &query.RevenueReport{GroupBy: p.req.GroupBy} // nothing loaded yet
	case errors.Is(err, query.ErrTooManyRows):
		return badRevenue("too_many_rows", "the report has more than %d rows; group by a coarser period or narrow the range", maxRevenueRows)
	case errors.Is(err, query.ErrInexactAmount):
		s.log.Error("revenue misconfigured", slog.String("table", cfg.Table), slog.Any("err", err))
		return &Error{Status: http.StatusInternalServerError, Code: "revenue_misconfigured",
			Message: "the configured amount column is not a decimal; refusing an inexact sum"}
	case err != nil:
		return err
	}
	if p.csv {
		return writeRevenueCSV(w, p, rep)
	}
	return writeJSON(w, http.StatusOK, revenueResponse{
		Table: cfg.Table, From: p.req.From.Format(time.RFC3339Nano), To: p.req.To.Format(time.RFC3339Nano),
		GroupBy: rep.GroupBy, CountStatuses: rep.CountStatuses, RefundStatuses: rep.RefundStatuses,
		Definition: definitionOf(cfg), Source: source, Rows: revenueRows{rep}, Totals: totalsJSON(rep), Freshness: fresh,
	})
}

// revenueResponse is the JSON answer of GET /v1/revenue.
type revenueResponse struct {
	Table          string        `json:"table"`
	From           string        `json:"from"`
	To             string        `json:"to"`
	GroupBy        []query.Group `json:"group_by"`
	CountStatuses  []string      `json:"count_statuses,omitempty"`
	RefundStatuses []string      `json:"refund_statuses,omitempty"`
	Definition     string        `json:"definition"`
	// Source is "preaggregate" when the exact pre-aggregates answered (with
	// the blocks changed since their last round read from the table),
	// "live" for the query over the table. Either is exact at Freshness.
	Source    string                 `json:"source"`
	Rows      revenueRows            `json:"rows"`
	Totals    []revenueTotal         `json:"totals"`
	Freshness []query.ShardFreshness `json:"freshness"`
}

// definitionOf is the revenue definition cfg configures.
func definitionOf(cfg *tables.Revenue) string {
	if cfg.RefundedAmountColumn != "" {
		return partialRefundDefinition
	}
	return revenueDefinition
}

// revenueTotal is one currency's totals; amounts are exact decimal strings.
type revenueTotal struct {
	Currency string `json:"currency"`
	Gross    string `json:"gross"`
	Refunds  string `json:"refunds"`
	Net      string `json:"net"`
	Invoices uint64 `json:"invoices"`
}

func totalsJSON(rep *query.RevenueReport) []revenueTotal {
	out := make([]revenueTotal, 0, len(rep.Totals))
	for _, t := range rep.Totals {
		out = append(out, revenueTotal{Currency: t.Currency, Gross: t.Gross.StringFixed(rep.Scale),
			Refunds: t.Refunds.StringFixed(rep.Scale), Net: t.Net.StringFixed(rep.Scale), Invoices: t.Invoices})
	}
	return out
}

// revenueRows writes rows as objects whose keys are the group names, in
// group_by order, then gross, refunds, net and invoices.
type revenueRows struct{ rep *query.RevenueReport }

// MarshalJSON implements json.Marshaler.
func (rr revenueRows) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, row := range rr.rep.Rows {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('{')
		for j, g := range rr.rep.GroupBy {
			k, _ := json.Marshal(string(g))
			v, err := json.Marshal(row.Key[j])
			if err != nil {
				return nil, err
			}
			b.Write(k)
			b.WriteByte(':')
			b.Write(v)
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"gross":%q,"refunds":%q,"net":%q,"invoices":%d}`, row.Gross.StringFixed(rr.rep.Scale),
			row.Refunds.StringFixed(rr.rep.Scale), row.Net.StringFixed(rr.rep.Scale), row.Invoices)
	}
	b.WriteByte(']')
	return b.Bytes(), nil
}

// writeRevenueCSV writes the rows with a header row: the group_by columns,
// then gross, refunds, net, invoices. Totals and freshness are JSON-only.
func writeRevenueCSV(w http.ResponseWriter, p revenueParams, rep *query.RevenueReport) error {
	header := make([]string, 0, len(rep.GroupBy)+4)
	for _, g := range rep.GroupBy {
		header = append(header, string(g))
	}
	header = append(header, "gross", "refunds", "net", "invoices")
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`inline; filename="revenue_%s_%s.csv"`,
		p.req.From.Format("20060102T150405Z"), p.req.To.Format("20060102T150405Z")))
	w.WriteHeader(http.StatusOK)
	cw := csv.NewWriter(w)
	if err := cw.Write(header); err != nil {
		return nil //nolint:nilerr // the client went away; headers are sent
	}
	rec := make([]string, len(header))
	for _, row := range rep.Rows {
		for j := range rep.GroupBy {
			rec[j] = csvCell(row.Key[j])
		}
		n := len(rep.GroupBy)
		rec[n] = row.Gross.StringFixed(rep.Scale)
		rec[n+1] = row.Refunds.StringFixed(rep.Scale)
		rec[n+2] = row.Net.StringFixed(rep.Scale)
		rec[n+3] = strconv.FormatUint(row.Invoices, 10)
		if err := cw.Write(rec); err != nil {
			return nil //nolint:nilerr // the client went away
		}
	}
	cw.Flush()
	return nil
}

// csvCell formats a group value. Text from the data that a spreadsheet
// would run as a formula (=, +, -, @ first) is prefixed with a quote,
// unless it is a plain number.
func csvCell(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case int:
		return strconv.Itoa(x)
	case string:
		if x != "" && strings.ContainsRune("=+-@\t\r", rune(x[0])) {
			if _, err := strconv.ParseFloat(x, 64); err != nil {
				return "'" + x
			}
		}
		return x
	}
	return fmt.Sprint(v)
}
