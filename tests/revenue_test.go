package tests

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/tributary/tributary/internal/api"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/loader"
	"github.com/tributary/tributary/internal/tables"
)

// revOrdersDDL is a QuickCart-like money table whose names differ from the
// demo's invoices on purpose: revenue must work by configuration alone.
const revOrdersDDL = `CREATE TABLE %s (
	id            bigint        PRIMARY KEY DEFAULT tributary.next_id(),
	account_id    bigint        NOT NULL,
	total         numeric(12,2) NOT NULL,
	currency_code text          NOT NULL,
	state         text          NOT NULL,
	placed_at     timestamptz   NOT NULL,
	refunded      numeric(12,2) -- given back (partial refunds); NULL: none
)`

// newRevenuePipeline is newPipeline with an orders table (as tables[0])
// and a revenue section over it.
func newRevenuePipeline(t *testing.T, shards []int) (*pipeline, *tables.Revenue) {
	t.Helper()
	p := setupRevenuePipeline(t, shards, false)
	return p, p.tables.Revenue
}

// setupRevenuePipeline is setupPipeline with the orders table.
func setupRevenuePipeline(t *testing.T, shards []int, external bool) *pipeline {
	t.Helper()
	return setupPipelineWith(t, shards, nil, external, "orders_", `{"topic_prefix":"e2e_%[1]s.",
		"tables":[{"name":%[2]q,"id_column":"id","id_layout":"seed000","shard_key":"account_id"}],
		"revenue":{"table":%[2]q,"amount_column":"total","currency_column":"currency_code","time_column":"placed_at",
		  "status_column":"state","workspace_column":"account_id","count_statuses":["paid"],"refund_statuses":["refunded"],
		  "refunded_amount_column":"refunded"}}`,
		revOrdersDDL)
}

// revenueAnswer is GET /v1/revenue's JSON.
type revenueAnswer struct {
	GroupBy   []string         `json:"group_by"`
	Source    string           `json:"source"`
	Rows      []map[string]any `json:"rows"`
	Totals    []map[string]any `json:"totals"`
	Freshness []struct {
		Shard     int    `json:"shard"`
		CommitLSN string `json:"commit_lsn"`
		Complete  bool   `json:"complete"`
	} `json:"freshness"`
}

// revMoney is one group's amounts.
type revMoney struct {
	gross, refunds, net decimal.Decimal
	invoices            int64
}

func (m revMoney) add(o revMoney) revMoney {
	return revMoney{m.gross.Add(o.gross), m.refunds.Add(o.refunds), m.net.Add(o.net), m.invoices + o.invoices}
}

func (m revMoney) equal(o revMoney) bool {
	return m.gross.Equal(o.gross) && m.refunds.Equal(o.refunds) && m.net.Equal(o.net) && m.invoices == o.invoices
}

func (m revMoney) String() string {
	return fmt.Sprintf("gross %s refunds %s net %s invoices %d", m.gross, m.refunds, m.net, m.invoices)
}

func (p *pipeline) getRevenue(ctx context.Context, params url.Values, accept string) (int, []byte) {
	p.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", p.api.URL+"/v1/revenue?"+params.Encode(), nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := p.httpClient().Do(req)
	if err != nil {
		p.t.Fatalf("GET revenue: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		p.t.Fatalf("read revenue: %v", err)
	}
	return resp.StatusCode, b
}

// revenueWALPositions returns each shard's current WAL position: once every
// shard's freshness passes it, everything written before is visible.
func (p *pipeline) revenueWALPositions(ctx context.Context) map[int]envelope.LSN {
	p.t.Helper()
	out := map[int]envelope.LSN{}
	for _, s := range p.shards {
		conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[s])
		if err != nil {
			p.t.Fatal(err)
		}
		var text string
		err = conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&text)
		conn.Close(ctx)
		if err != nil {
			p.t.Fatal(err)
		}
		if out[s], err = envelope.ParseLSN(text); err != nil {
			p.t.Fatal(err)
		}
	}
	return out
}

// waitRevenueFresh polls the revenue endpoint until its freshness covers
// the given positions on every shard.
func (p *pipeline) waitRevenueFresh(ctx context.Context, pos map[int]envelope.LSN) {
	p.t.Helper()
	params := url.Values{"from": {"2026-01-01"}, "to": {"2027-01-01"}}
	deadline := time.Now().Add(60 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		if err := p.failed(); err != nil {
			p.t.Fatalf("waiting for freshness: %v", err)
		}
		status, body := p.getRevenue(ctx, params, "")
		last = string(body)
		var a revenueAnswer
		if status == http.StatusOK && json.Unmarshal(body, &a) == nil && (!p.preagg || a.Source == "preaggregate") {
			covered := 0
			for _, f := range a.Freshness {
				lsn, err := envelope.ParseLSN(f.CommitLSN)
				if want, ok := pos[f.Shard]; ok && err == nil && f.Complete && lsn >= want {
					covered++
				}
			}
			if covered == len(pos) {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	p.t.Fatalf("revenue freshness never reached %v; last answer %.2000s", pos, last)
}

// revOrder is one generated row.
type revOrder struct {
	account  int64
	total    string
	currency string
	state    string
	placed   time.Time
}

// revenueWindow is the [from, to) the comparisons use; rows are placed
// inside, on, and just outside its edges.
var (
	revFrom = time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	revTo   = time.Date(2026, 12, 31, 0, 0, 0, 0, time.UTC)
)

// revGenOrders makes n orders for one shard, with edge amounts and edge times.
func revGenOrders(rng *rand.Rand, n int) []revOrder {
	edgesAt := []time.Time{
		revFrom, revFrom.Add(-300 * time.Millisecond), revFrom.Add(-time.Second), revFrom.Add(400 * time.Millisecond),
		revTo, revTo.Add(-300 * time.Millisecond), revTo.Add(-time.Second), revTo.Add(time.Second),
		time.Date(2026, 11, 29, 23, 59, 59, 0, time.UTC), // Sunday: last second of an ISO week
		time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC),    // Monday: first of the next
		time.Date(2026, 10, 31, 23, 59, 59, 999000000, time.UTC),
		time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC),
	}
	edgeAmounts := []string{"0.01", "9999999999.99", "9999999999.99", "0.10", "1.00", "0.00"}
	currencies := []string{"EUR", "USD", "JPY", "usd"}
	states := []string{"issued", "paid", "paid", "paid", "refunded", "void"}
	out := make([]revOrder, n)
	for i := range out {
		o := revOrder{
			account:  int64(1 + rng.IntN(6)),
			total:    fmt.Sprintf("%d.%02d", rng.IntN(1_000_000), rng.IntN(100)),
			currency: currencies[rng.IntN(len(currencies))],
			state:    states[rng.IntN(len(states))],
			placed: revFrom.Add(-5 * 24 * time.Hour).
				Add(time.Duration(rng.Int64N(int64(revTo.Sub(revFrom) + 10*24*time.Hour))).Truncate(time.Millisecond)),
		}
		if i < len(edgesAt) {
			o.placed = edgesAt[i]
		}
		if i%7 == 0 {
			o.total = edgeAmounts[rng.IntN(len(edgeAmounts))]
		}
		out[i] = o
	}
	return out
}

// insertRevenueOrders writes orders on a shard in one transaction and returns the ids.
func (p *pipeline) insertRevenueOrders(ctx context.Context, shard int, orders []revOrder) []int64 {
	p.t.Helper()
	texts := p.insertRevenueOrdersText(ctx, shard, orders)
	ids := make([]int64, len(texts))
	for i, s := range texts {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			p.t.Fatalf("id %q of shard %d: %v", s, shard, err)
		}
		ids[i] = id
	}
	return ids
}

// revenueTx runs each statement with its argument in one transaction.
func (p *pipeline) revenueTx(ctx context.Context, shard int, stmts []string, args ...[]int64) {
	p.t.Helper()
	conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[shard])
	if err != nil {
		p.t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		p.t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	for i, sql := range stmts {
		if _, err := tx.Exec(ctx, sql, args[i]); err != nil {
			p.t.Fatalf("shard %d: %s: %v", shard, sql, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		p.t.Fatal(err)
	}
}

// revenueOracle computes the report by scatter-gather over the shards: the same
// aggregation in SQL on each shard, the partial sums added in Go with
// exact decimals. groups are the API's group_by (currency included).
func (p *pipeline) revenueOracle(ctx context.Context, cfg *tables.Revenue, from, to time.Time, groups []string,
	workspaces []int64, currencies, statuses []string) map[string]revMoney {
	p.t.Helper()
	countSt, refundSt := cfg.CountStatuses, cfg.RefundStatuses
	if len(statuses) > 0 {
		countSt = slices.DeleteFunc(slices.Clone(countSt), func(s string) bool { return !slices.Contains(statuses, s) })
		refundSt = slices.DeleteFunc(slices.Clone(refundSt), func(s string) bool { return !slices.Contains(statuses, s) })
	}
	all := append(slices.Clone(countSt), refundSt...)
	tcol := pgx.Identifier{cfg.TimeColumn}.Sanitize()
	var keys []string
	for _, g := range groups {
		switch g {
		case "day", "week", "month":
			keys = append(keys, fmt.Sprintf("to_char(date_trunc('%s', %s AT TIME ZONE 'UTC'), 'YYYY-MM-DD')", g, tcol))
		case "workspace":
			keys = append(keys, pgx.Identifier{cfg.WorkspaceColumn}.Sanitize()+"::text")
		case "currency":
			keys = append(keys, "upper("+pgx.Identifier{cfg.CurrencyColumn}.Sanitize()+")")
		case "shard":
			keys = append(keys, "'{shard}'") // the shard number, filled in per shard
		}
	}
	amount, st := pgx.Identifier{cfg.AmountColumn}.Sanitize(), pgx.Identifier{cfg.StatusColumn}.Sanitize()
	where := fmt.Sprintf("%[1]s >= $1 AND %[1]s < $2 AND %[2]s = ANY($3) AND ($4::bigint[] IS NULL OR %[3]s = ANY($4)) AND ($5::text[] IS NULL OR upper(%[4]s) = ANY($5)) AND ($7::bigint[] IS NULL OR %[3]s = ANY($7))",
		tcol, st, pgx.Identifier{cfg.WorkspaceColumn}.Sanitize(), pgx.Identifier{cfg.CurrencyColumn}.Sanitize())
	// Each row's refund: its whole amount in a refund status; with a
	// refunded-amount column, that column where set.
	refund := fmt.Sprintf("CASE WHEN %s = ANY($6) THEN %s ELSE 0 END", st, amount)
	if cfg.RefundedAmountColumn != "" {
		rc := pgx.Identifier{cfg.RefundedAmountColumn}.Sanitize()
		refund = fmt.Sprintf("CASE WHEN %[1]s = ANY($6) THEN coalesce(%[2]s, %[3]s) ELSE coalesce(%[2]s, 0) END", st, rc, amount)
	}
	sql := fmt.Sprintf(`SELECT concat_ws('|', %s),
		coalesce(sum(%[2]s), 0)::text,
		coalesce(sum(%[6]s), 0)::text,
		count(*)
		FROM %[4]s WHERE %[5]s GROUP BY 1`,
		strings.Join(keys, ", "), amount, st, pgx.Identifier{cfg.Table}.Sanitize(), where, refund)
	var ws []int64
	if len(workspaces) > 0 {
		ws = workspaces
	}
	var curs []string
	if len(currencies) > 0 {
		curs = currencies
	}
	out := map[string]revMoney{}
	for _, s := range p.shards {
		conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[s])
		if err != nil {
			p.t.Fatal(err)
		}
		var owned []int64 // nil: every row counts
		if p.owned != nil {
			owned = append([]int64{}, p.owned(s)...)
		}
		rows, err := conn.Query(ctx, strings.ReplaceAll(sql, "{shard}", fmt.Sprint(s)), from, to, all, ws, curs, refundSt, owned)
		if err != nil {
			p.t.Fatalf("revenueOracle on shard %d: %v\n%s", s, err, sql)
		}
		for rows.Next() {
			var key, gross, refunds string
			var n int64
			if err := rows.Scan(&key, &gross, &refunds, &n); err != nil {
				p.t.Fatal(err)
			}
			m := revMoney{gross: decimal.RequireFromString(gross), refunds: decimal.RequireFromString(refunds), invoices: n}
			m.net = m.gross.Sub(m.refunds)
			out[key] = out[key].add(m)
		}
		rows.Close()
		conn.Close(ctx)
		if rows.Err() != nil {
			p.t.Fatal(rows.Err())
		}
	}
	return out
}

// revRowMoney reads a JSON or CSV row's amounts; each must be an exact
// decimal string with two places.
func revRowMoney(t *testing.T, gross, refunds, net string, invoices int64) revMoney {
	t.Helper()
	m := revMoney{invoices: invoices}
	for _, f := range []struct {
		s   string
		dst *decimal.Decimal
	}{{gross, &m.gross}, {refunds, &m.refunds}, {net, &m.net}} {
		d, err := decimal.NewFromString(f.s)
		if err != nil || d.StringFixed(2) != f.s {
			t.Fatalf("amount %q is not an exact decimal with 2 places", f.s)
		}
		*f.dst = d
	}
	if !m.net.Equal(m.gross.Sub(m.refunds)) {
		t.Fatalf("net %s != gross %s - refunds %s", m.net, m.gross, m.refunds)
	}
	return m
}

// compareRevenue asks the API and compares every group and total with the
// revenueOracle, to the cent; it also checks the CSV form parses to the same.
func (p *pipeline) compareRevenue(ctx context.Context, cfg *tables.Revenue, from, to time.Time, groups []string,
	workspaces []int64, currencies, statuses []string) int {
	t := p.t
	t.Helper()
	params := url.Values{"from": {from.Format(time.RFC3339Nano)}, "to": {to.Format(time.RFC3339Nano)}}
	if len(groups) > 0 {
		params["group_by"] = []string{strings.Join(groups, ",")}
	}
	for _, w := range workspaces {
		params.Add("workspace", fmt.Sprint(w))
	}
	for _, c := range currencies {
		params.Add("currency", strings.ToLower(c))
	}
	for _, s := range statuses {
		params.Add("status", s)
	}
	for _, a := range p.revAfter {
		params.Add("after", a)
	}
	if len(p.revAfter) > 0 {
		// The longest wait the API allows, not its 5 s default (the
		// harness API's 10 s request timeout bounds it), and asked
		// again on not_yet_visible, as the API says to: in cluster mode
		// at load 60-110 the writes of TestRevenuePreaggregateNeverStale
		// took longer than 5 s to reach their watermarks. What the
		// answer holds is checked below, whichever try it came on.
		params.Set("wait", "30s")
	}
	status, body := p.getRevenue(ctx, params, "")
	for try := 1; try < 6 && len(p.revAfter) > 0 && status == http.StatusServiceUnavailable &&
		strings.Contains(string(body), `"not_yet_visible"`); try++ {
		t.Logf("revenue %v: not yet visible on try %d; asking again", params, try)
		status, body = p.getRevenue(ctx, params, "")
	}
	if status != http.StatusOK {
		t.Fatalf("revenue %v: %d %s", params, status, body)
	}
	var a revenueAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatal(err)
	}
	// The pre-aggregates answer whole UTC days without workspaces or
	// statuses, when the pipeline runs the aggregator.
	midnight := func(x time.Time) bool { return x.Equal(x.Truncate(24 * time.Hour)) }
	wantSource := "live"
	if p.preagg && len(workspaces) == 0 && len(statuses) == 0 && !slices.Contains(groups, "workspace") && midnight(from) && midnight(to) {
		wantSource = "preaggregate"
	}
	if a.Source != wantSource {
		t.Errorf("revenue %v answered from %q, want %q", params, a.Source, wantSource)
	}
	eff := a.GroupBy
	if !slices.Contains(groups, "currency") && (len(eff) != len(groups)+1 || eff[len(eff)-1] != "currency") {
		t.Fatalf("group_by %v for %v: currency must be appended", eff, groups)
	}
	want := p.revenueOracle(ctx, cfg, from, to, eff, workspaces, currencies, statuses)

	keyOf := func(get func(g string) string) string {
		parts := make([]string, len(eff))
		for i, g := range eff {
			parts[i] = get(g)
		}
		return strings.Join(parts, "|")
	}
	got := map[string]revMoney{}
	for _, r := range a.Rows {
		k := keyOf(func(g string) string { return fmt.Sprint(r[g]) })
		if _, dup := got[k]; dup {
			t.Fatalf("group %s twice", k)
		}
		got[k] = revRowMoney(t, r["gross"].(string), r["refunds"].(string), r["net"].(string), int64(r["invoices"].(float64)))
	}
	revDiff(t, fmt.Sprintf("%v", params), got, want)

	// Totals per currency, never mixed.
	wantTotals := map[string]revMoney{}
	ci := slices.Index(eff, "currency")
	for k, m := range want {
		cur := strings.Split(k, "|")[ci]
		wantTotals[cur] = wantTotals[cur].add(m)
	}
	gotTotals := map[string]revMoney{}
	for _, r := range a.Totals {
		gotTotals[r["currency"].(string)] = revRowMoney(t, r["gross"].(string), r["refunds"].(string), r["net"].(string), int64(r["invoices"].(float64)))
	}
	revDiff(t, "totals "+params.Encode(), gotTotals, wantTotals)

	// CSV: the same numbers, via Accept and via format=.
	for _, how := range []string{"accept", "format"} {
		accept := "text/csv"
		cp := url.Values{}
		for k, v := range params {
			cp[k] = v
		}
		if how == "format" {
			accept = ""
			cp.Set("format", "csv")
		}
		status, body := p.getRevenue(ctx, cp, accept)
		if status != http.StatusOK {
			t.Fatalf("CSV %v: %d %s", cp, status, body)
		}
		recs, err := csv.NewReader(strings.NewReader(string(body))).ReadAll()
		if err != nil {
			t.Fatalf("CSV: %v\n%s", err, body)
		}
		header := append(slices.Clone(eff), "gross", "refunds", "net", "invoices")
		if !slices.Equal(recs[0], header) {
			t.Fatalf("CSV header %v, want %v", recs[0], header)
		}
		gotCSV := map[string]revMoney{}
		for _, rec := range recs[1:] {
			k := keyOf(func(g string) string { return rec[slices.Index(eff, g)] })
			var n int64
			fmt.Sscan(rec[len(eff)+3], &n)
			gotCSV[k] = revRowMoney(t, rec[len(eff)], rec[len(eff)+1], rec[len(eff)+2], n)
		}
		revDiff(t, "CSV "+how+" "+params.Encode(), gotCSV, want)
	}
	return len(a.Rows)
}

func revDiff(t *testing.T, what string, got, want map[string]revMoney) {
	t.Helper()
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	bad := 0
	for _, k := range keys {
		if g, w := got[k], want[k]; !g.equal(w) {
			if bad++; bad <= 10 {
				t.Errorf("%s: group %s: API %v, shards %v", what, k, g, w)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%s: %d of %d groups differ", what, bad, len(keys))
	}
}

// TestRevenueEndToEnd: orders on two shards, then updates (issued → paid →
// refunded, amount and time changes) and deletes as later ClickHouse parts;
// GET /v1/revenue must equal the shards' own sums to the cent, for several
// group_bys and filters, in JSON and CSV.
//
// It runs twice: on the live query, and with the revenue aggregator, where
// every whole-day request is answered from the pre-aggregates.
func TestRevenueEndToEnd(t *testing.T) {
	t.Run("live", func(t *testing.T) {
		p, cfg := newRevenuePipeline(t, []int{0, 1})
		revenueEndToEnd(t, p, cfg)
	})
	t.Run("preaggregate", func(t *testing.T) {
		p := setupRevenuePipeline(t, []int{0, 1}, true)
		runCtx, runCancel := context.WithCancel(context.Background())
		defer runCancel()
		for _, s := range p.shards {
			p.startReader(runCtx, s)
		}
		// Small blocks (2^30 ids: 128 ms of seed000 creation time), so that
		// the rows span many and a change dirties few.
		p.startMeteredLoader(runCtx, "l1", func(c *loader.Config) {
			c.RevenueAggregator, c.PreaggInterval, c.PreaggBlockBits = true, 200*time.Millisecond, 30
		})
		p.preagg = true
		revenueEndToEnd(t, p, p.tables.Revenue)
	})
}

func revenueEndToEnd(t *testing.T, p *pipeline, cfg *tables.Revenue) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	tbl := pgx.Identifier{p.table()}.Sanitize()
	rng := rand.New(rand.NewPCG(2026, 11))

	ids := map[int][]int64{}
	for _, s := range p.shards {
		ids[s] = p.insertRevenueOrders(ctx, s, revGenOrders(rng, 400))
	}
	p.waitRevenueFresh(ctx, p.revenueWALPositions(ctx))
	p.compareRevenue(ctx, cfg, revFrom, revTo, []string{"day"}, nil, nil, nil)
	before := p.revenueOracle(ctx, cfg, revFrom, revTo, []string{"day", "currency"}, nil, nil, nil)
	// Keep the next versions in parts of their own: FINAL, not a merge
	// that happened to run, must hide the superseded ones.
	if err := p.store.Conn().Exec(ctx, fmt.Sprintf("SYSTEM STOP MERGES `%s`.`%s`", p.chDB, p.table())); err != nil {
		t.Fatal(err)
	}

	// Second phase, applied as newer versions in other parts.
	for _, s := range p.shards {
		own := ids[s]
		// issued → paid → refunded, one transaction each.
		for _, id := range own[20:40] {
			p.exec(ctx, s, "UPDATE "+tbl+" SET state = 'paid' WHERE id = $1 AND state = 'issued'", id)
		}
		for _, id := range own[20:30] {
			p.exec(ctx, s, "UPDATE "+tbl+" SET state = 'refunded' WHERE id = $1 AND state = 'paid'", id)
		}
		// Several in one transaction, including one row updated twice.
		p.revenueTx(ctx, s, []string{
			"UPDATE " + tbl + " SET state = 'refunded' WHERE id = ANY($1) AND state = 'paid'",
			"UPDATE " + tbl + " SET total = 9999999999.99 WHERE id = ANY($1)",
			"UPDATE " + tbl + " SET total = 0.01, state = 'paid' WHERE id = ANY($1)",
			"UPDATE " + tbl + " SET total = 0.02 WHERE id = ANY($1)",
			"UPDATE " + tbl + " SET placed_at = placed_at + interval '31 days' WHERE id = ANY($1)",
			"UPDATE " + tbl + " SET currency_code = 'EUR', account_id = 99 WHERE id = ANY($1)",
		}, own[40:60], own[60:70], own[70:80], own[70:80], own[80:100], own[100:110])
		// Partial refunds: part of a paid order given back; a refunded
		// order whose refund was partial; a partial refund taken back.
		p.revenueTx(ctx, s, []string{
			"UPDATE " + tbl + " SET state = 'paid', refunded = round(total / 3, 2) WHERE id = ANY($1)",
			"UPDATE " + tbl + " SET state = 'refunded', refunded = 0.01 WHERE id = ANY($1)",
			"UPDATE " + tbl + " SET refunded = NULL WHERE id = ANY($1)",
		}, own[140:160], own[160:170], own[140:145])
		// Deletes: some refunded, some paid, some edge-time rows.
		p.exec(ctx, s, "DELETE FROM "+tbl+" WHERE id = ANY($1)", append(slices.Clone(own[5:8]), own[110:140]...))
		// A deleted row's id inserted again with another state.
		p.exec(ctx, s, "INSERT INTO "+tbl+" (id, account_id, total, currency_code, state, placed_at) VALUES ($1, 3, 123.45, 'EUR', 'paid', '2026-11-15T12:00:00Z')", own[110])
	}
	p.waitRevenueFresh(ctx, p.revenueWALPositions(ctx))
	after := p.revenueOracle(ctx, cfg, revFrom, revTo, []string{"day", "currency"}, nil, nil, nil)
	changed := 0
	for k, m := range after {
		if !m.equal(before[k]) {
			changed++
		}
	}
	if changed < 20 {
		t.Fatalf("the second phase changed only %d day groups: the test would prove little", changed)
	}

	nov, dec := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		from, to   time.Time
		groups     []string
		workspaces []int64
		currencies []string
		statuses   []string
	}{
		{from: revFrom, to: revTo, groups: []string{"day"}},
		{from: revFrom, to: revTo, groups: []string{"week", "workspace"}},
		{from: revFrom, to: revTo, groups: []string{"month", "shard"}},
		{from: revFrom, to: revTo},
		{from: revFrom.Add(-30 * 24 * time.Hour), to: revTo.Add(30 * 24 * time.Hour), groups: []string{"currency", "shard"}},
		{from: nov, to: dec, groups: []string{"workspace", "currency", "shard", "day"}, workspaces: []int64{1, 2, 99}},
		{from: nov, to: dec, groups: []string{"week"}, currencies: []string{"EUR", "USD"}},
		{from: revFrom, to: revTo, groups: []string{"month"}, statuses: []string{"paid"}},
		{from: revFrom, to: revTo, groups: []string{"month"}, statuses: []string{"refunded"}},
		// Bounds one second inside the edges: rows at from+0.4s and to-0.3s
		// are stored as from and to-1s, and must fall out exactly as at
		// the source.
		{from: revFrom.Add(time.Second), to: revTo.Add(-time.Second), groups: []string{"day", "shard"}},
	} {
		n := p.compareRevenue(ctx, cfg, c.from, c.to, c.groups, c.workspaces, c.currencies, c.statuses)
		t.Logf("%v..%v group_by=%v ws=%v cur=%v st=%v: %d groups equal to the shards", c.from.Format(time.RFC3339Nano),
			c.to.Format(time.RFC3339Nano), c.groups, c.workspaces, c.currencies, c.statuses, n)
	}

	// One request's latency on this data (a number to read, not an assertion).
	params := url.Values{"from": {revFrom.Format(time.DateOnly)}, "to": {revTo.Format(time.DateOnly)}, "group_by": {"day,workspace,shard"}}
	var took []time.Duration
	for i := 0; i < 10; i++ {
		start := time.Now()
		if status, body := p.getRevenue(ctx, params, ""); status != http.StatusOK {
			t.Fatalf("%d %s", status, body)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	t.Logf("GET /v1/revenue group_by=day,workspace,shard over %d source rows: median %v, max %v", 800, took[len(took)/2], took[len(took)-1])

	// Bad requests are 400s with a JSON error, also against the real stack.
	for q, code := range map[string]string{
		"from=2026-12-01&to=2026-11-01":                    "bad_range",
		"from=2026-11-01&to=2026-12-01&group_by=fortnight": "bad_group_by",
		"from=2026-11-01&to=2026-12-01&status=void":        "bad_status",
	} {
		v, _ := url.ParseQuery(q)
		status, body := p.getRevenue(ctx, v, "text/csv")
		var e api.Error
		if status != http.StatusBadRequest || json.Unmarshal(body, &e) != nil || e.Code != code {
			t.Errorf("%s: %d %s, want 400 %s", q, status, body, code)
		}
	}

	// A TRUNCATE on one shard removes rows no change names: the live query
	// tombstones them, the pre-aggregates recompute every block.
	p.exec(ctx, p.shards[0], "TRUNCATE "+tbl)
	p.waitRevenueFresh(ctx, p.revenueWALPositions(ctx))
	for _, groups := range [][]string{{"day"}, {"month", "shard"}} {
		if n := p.compareRevenue(ctx, cfg, revFrom, revTo, groups, nil, nil, nil); n == 0 {
			t.Errorf("after TRUNCATE, group_by=%v compared no rows", groups)
		}
	}
}
