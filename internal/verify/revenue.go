package verify

// Revenue (when the table config has a `revenue` section): GET /v1/revenue
// for several groupings must equal, to the cent, the same sums computed on
// every shard and added up (scatter-gather) — each row counted on the owner
// of its workspace under the ring map, when one is given (Config.Ring), as
// the API counts it.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
	"golang.org/x/sync/errgroup"

	"github.com/tributary/tributary/internal/tables"
)

// KindRevenue is a revenue group whose amounts or count differ.
const KindRevenue Kind = "revenue"

// revenueGroupings are the group_by lists checked.
var revenueGroupings = [][]string{{"month", "currency"}, {"shard", "currency"}, {"workspace", "currency"}}

// RevenueReport says what the revenue check compared.
type RevenueReport struct {
	From, To time.Time
	// Groups is the number of (grouping, group) pairs compared.
	Groups int
	// Sources are the API's answer sources ("preaggregate", "live").
	Sources []string
}

// revenueMoney is one group's sums.
type revenueMoney struct {
	gross, refunds decimal.Decimal
	rows           int64
}

func (m revenueMoney) String() string {
	return fmt.Sprintf("gross %s refunds %s net %s rows %d", m.gross, m.refunds, m.gross.Sub(m.refunds), m.rows)
}

// checkRevenue compares the API's revenue with the shards', over the last
// 366 whole UTC days.
func (v *verifier) checkRevenue(ctx context.Context) (*RevenueReport, []Difference, error) {
	cfg := v.cfg.Tables.Revenue
	if cfg == nil {
		return nil, nil, nil
	}
	to := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, 1)
	rep := &RevenueReport{From: to.AddDate(0, 0, -366), To: to}
	var diffs []Difference
	for _, groups := range revenueGroupings {
		if slices.Contains(groups, "workspace") && cfg.WorkspaceColumn == "" {
			continue
		}
		want, err := v.sourceRevenue(ctx, cfg, rep.From, rep.To, groups)
		if err != nil {
			return nil, nil, err
		}
		got, source, err := v.apiRevenue(ctx, rep.From, rep.To, groups)
		if err != nil {
			return nil, nil, err
		}
		if !slices.Contains(rep.Sources, source) {
			rep.Sources = append(rep.Sources, source)
		}
		keys := map[string]bool{}
		for k := range want {
			keys[k] = true
		}
		for k := range got {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		slices.Sort(sorted)
		for _, k := range sorted {
			rep.Groups++
			w, g := want[k], got[k]
			if w.gross.Equal(g.gross) && w.refunds.Equal(g.refunds) && w.rows == g.rows {
				continue
			}
			diffs = append(diffs, Difference{Kind: KindRevenue, Table: cfg.Table, Shard: -1, ID: strings.Join(groups, ",") + "=" + k,
				Source: w.String(), API: g.String(), Detail: "answered from " + source})
		}
	}
	return rep, diffs, nil
}

// sourceRevenue sums every shard's rows by the groups (currency last).
func (v *verifier) sourceRevenue(ctx context.Context, cfg *tables.Revenue, from, to time.Time, groups []string) (map[string]revenueMoney, error) {
	parts := make([]map[string]revenueMoney, len(v.shards))
	g, gctx := errgroup.WithContext(ctx)
	for i, s := range v.shards {
		g.Go(func() error {
			sql, args := revenueSQL(cfg, v.shardKey(cfg.Table), v.rowFilter(cfg.Table), s.id, from, to, groups)
			qctx, cancel := context.WithTimeout(gctx, s.timeout)
			defer cancel()
			rows, err := s.pool.Query(qctx, sql, args...)
			if err != nil {
				return fmt.Errorf("shard %d: revenue: %w", s.id, err)
			}
			defer rows.Close()
			out := map[string]revenueMoney{}
			for rows.Next() {
				var key, owned, gross, refunds string
				var n int64
				if err := rows.Scan(&key, &owned, &gross, &refunds, &n); err != nil {
					return fmt.Errorf("shard %d: revenue: %w", s.id, err)
				}
				if v.cfg.Ring != nil && owned != "" && v.cfg.Ring.OwnerString(owned) != s.id {
					continue // not the owner of its shard key: the API does not count it
				}
				m := out[key]
				m.gross, m.refunds, m.rows = m.gross.Add(decimal.RequireFromString(gross)), m.refunds.Add(decimal.RequireFromString(refunds)), m.rows+n
				out[key] = m
			}
			parts[i] = out
			return rows.Err()
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	total := map[string]revenueMoney{}
	for _, p := range parts {
		for k, m := range p {
			t := total[k]
			t.gross, t.refunds, t.rows = t.gross.Add(m.gross), t.refunds.Add(m.refunds), t.rows+m.rows
			total[k] = t
		}
	}
	return total, nil
}

// revenueSQL is one shard's revenue query, written from the definition
// (tables.Revenue), not from the API's: its columns are the group key
// (parts joined by '|'), the shard-key value, gross, refunds and the row
// count. It is grouped by the shard key too, so that rows a shard does not
// own can be left out. filter is the table's row filter as a condition.
func revenueSQL(cfg *tables.Revenue, shardKey, filter string, shard int, from, to time.Time, groups []string) (string, []any) {
	ident := func(s string) string { return pgx.Identifier{s}.Sanitize() }
	var args []any
	arg := func(v any) string { args = append(args, v); return fmt.Sprintf("$%d", len(args)) }
	tcol, amount := ident(cfg.TimeColumn), ident(cfg.AmountColumn)
	var keys []string
	for _, g := range groups {
		switch g {
		case "month":
			keys = append(keys, fmt.Sprintf("to_char(date_trunc('month', %s AT TIME ZONE 'UTC'), 'YYYY-MM-DD')", tcol))
		case "shard":
			keys = append(keys, arg(fmt.Sprint(shard))+"::text")
		case "workspace":
			keys = append(keys, "coalesce("+ident(cfg.WorkspaceColumn)+"::text, '')")
		case "currency":
			if cfg.CurrencyColumn == "" {
				keys = append(keys, arg(cfg.Currency)+"::text")
			} else {
				keys = append(keys, "coalesce(upper("+ident(cfg.CurrencyColumn)+"), '')")
			}
		}
	}
	where := []string{tcol + " >= " + arg(from), tcol + " < " + arg(to), filter}
	refund := "0"
	if cfg.StatusColumn != "" {
		st := ident(cfg.StatusColumn)
		where = append(where, st+" = ANY("+arg(append(slices.Clone(cfg.CountStatuses), cfg.RefundStatuses...))+")")
		refunded := arg(cfg.RefundStatuses)
		refund = fmt.Sprintf("CASE WHEN %s = ANY(%s) THEN %s ELSE 0 END", st, refunded, amount)
		if cfg.RefundedAmountColumn != "" {
			rc := ident(cfg.RefundedAmountColumn)
			refund = fmt.Sprintf("CASE WHEN %[1]s = ANY(%[4]s) THEN coalesce(%[2]s, %[3]s) ELSE coalesce(%[2]s, 0) END", st, rc, amount, refunded)
		}
	}
	ws := "''"
	if shardKey != "" {
		ws = "coalesce(" + ident(shardKey) + "::text, '')"
	}
	return fmt.Sprintf(`SELECT concat_ws('|', %s), %s, coalesce(sum(%s), 0)::text, coalesce(sum(%s), 0)::text, count(*)
		FROM %s WHERE %s GROUP BY 1, 2`,
		strings.Join(keys, ", "), ws, amount, refund, ident(cfg.Table), strings.Join(where, " AND ")), args
}

// rowFilter is table's row filter as a condition ("TRUE" when it has none).
func (v *verifier) rowFilter(table string) string {
	t, _ := v.cfg.Tables.ByName(table)
	if t == nil {
		return "TRUE"
	}
	return rowFilter(t)
}

// shardKey is table's shard-key column ("" when it has none).
func (v *verifier) shardKey(table string) string {
	t, _ := v.cfg.Tables.ByName(table)
	if t == nil {
		return ""
	}
	return t.ShardKey
}

// apiRevenue asks GET /v1/revenue and returns its rows by the same keys.
func (v *verifier) apiRevenue(ctx context.Context, from, to time.Time, groups []string) (map[string]revenueMoney, string, error) {
	q := url.Values{"from": {from.Format(time.DateOnly)}, "to": {to.Format(time.DateOnly)}, "group_by": {strings.Join(groups, ",")}}
	status, body, err := v.api.get(ctx, "/v1/revenue?"+q.Encode())
	if err != nil {
		return nil, "", err
	}
	if status != 200 {
		return nil, "", fmt.Errorf("GET /v1/revenue: status %d: %.300s", status, body)
	}
	var a struct {
		GroupBy []string         `json:"group_by"`
		Source  string           `json:"source"`
		Rows    []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, "", fmt.Errorf("GET /v1/revenue: %w", err)
	}
	if !slices.Equal(a.GroupBy, groups) {
		return nil, "", fmt.Errorf("GET /v1/revenue grouped by %v, asked %v", a.GroupBy, groups)
	}
	out := map[string]revenueMoney{}
	for _, r := range a.Rows {
		parts := make([]string, len(groups))
		for i, g := range groups {
			parts[i] = fmt.Sprint(r[g])
			if r[g] == nil {
				parts[i] = ""
			}
		}
		gross, err1 := decimal.NewFromString(fmt.Sprint(r["gross"]))
		refunds, err2 := decimal.NewFromString(fmt.Sprint(r["refunds"]))
		n, ok := r["invoices"].(float64)
		if err1 != nil || err2 != nil || !ok {
			return nil, "", fmt.Errorf("GET /v1/revenue: row %v: amounts are not decimal strings", r)
		}
		out[strings.Join(parts, "|")] = revenueMoney{gross: gross, refunds: refunds, rows: int64(n)}
	}
	return out, a.Source, nil
}
