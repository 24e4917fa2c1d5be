package query

// The revenue report: exact money sums over the table named by the
// `revenue` section of the table configuration (tables.Revenue).
//
// Definition, over live rows (FINAL, _deleted = 0) whose time column is in
// [From, To):
//
//	gross    = sum(amount) where status in count_statuses ∪ refund_statuses
//	refunds  = sum(refund) over the same rows, where a row's refund is
//	           its whole amount if its status is in refund_statuses, else 0;
//	           with refunded_amount_column r: r where r is not NULL
//	           (partial refunds), else as without it
//	net      = gross - refunds
//	invoices = number of rows in gross
//
// ClickHouse holds each row's current status only, so a refunded invoice is
// money that was collected and given back: it is in gross and in refunds
// and nets to zero. Rows in other statuses (issued, void...) count nowhere.
// A refund is attributed to the bucket of the row's time column (there is
// no refund time).
//
// Exactness: sums run in ClickHouse over the Decimal(p,s) column, which
// sum() widens to Decimal(38,s) (measured on 18.16: sum of
// 9999999999.99 + 9999999999.99 = 19999999999.98, no float in between);
// they are scanned into decimal.Decimal and net is subtracted in Go. A float
// amount column is refused (ErrInexactAmount), never summed. Rows never mix
// currencies: currency is always a grouping key.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/shopspring/decimal"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/revenueblocks"
	"github.com/tributary/tributary/internal/tables"
)

// Group is a dimension of the revenue report.
type Group string

// The groups. Time buckets are computed in UTC; a week starts on Monday
// (ISO 8601) and is named by that Monday's date, a month by its first day.
const (
	GroupDay       Group = "day"
	GroupWeek      Group = "week"
	GroupMonth     Group = "month"
	GroupWorkspace Group = "workspace"
	GroupShard     Group = "shard"
	GroupCurrency  Group = "currency"
)

// Groups lists every group in the order the API documents them.
var Groups = []Group{GroupDay, GroupWeek, GroupMonth, GroupWorkspace, GroupShard, GroupCurrency}

// IsTime reports whether g is a time bucket (at most one per request).
func (g Group) IsTime() bool { return g == GroupDay || g == GroupWeek || g == GroupMonth }

// DefaultMaxRevenueRows bounds a report when RevenueRequest.MaxRows is 0.
const DefaultMaxRevenueRows = 100_000

var (
	// ErrTooManyRows: the report has more groups than the request allows.
	ErrTooManyRows = errors.New("too many result rows")
	// ErrInexactAmount: the amount column is not a Decimal, so its sum
	// would not be exact (the same error as the aggregator's).
	ErrInexactAmount = revenueblocks.ErrInexactAmount
	// ErrSubSecondBound: From or To has a fraction of a second.
	ErrSubSecondBound = errors.New("revenue bounds must be whole seconds")
)

// RevenueRequest is a validated revenue question (the API parses and
// checks user input; this type trusts it, and binds every value).
type RevenueRequest struct {
	// From and To bound the time column: From <= t < To. They must be
	// whole seconds: times are stored at second precision (truncated), and
	// only whole-second bounds select exactly the rows the source would.
	From, To time.Time
	// GroupBy is distinct groups, at most one of them a time bucket.
	// GroupCurrency is appended when missing.
	GroupBy []Group
	// Workspaces, Currencies and Statuses restrict the rows; empty means
	// no restriction. Workspaces compare with the column's text form
	// (decimal integers, lower-case UUIDs); Currencies with the upper-cased
	// currency; Statuses must be configured ones (others match nothing).
	Workspaces []string
	Currencies []string
	Statuses   []string
	// MaxRows bounds the number of groups (0: DefaultMaxRevenueRows).
	MaxRows int
	// Preagg, when set, reads the pre-aggregates for every block but its
	// dirty ones, which are read from the table, and adds the two (the
	// caller checked PreaggEligible and the state's layout).
	Preagg *PreaggRead
	// ShardKey is the table's shard-key column when rows are placed by a
	// ring map: each row then counts only from the owner of its key
	// (chstore.OwnedWhere), so a planned arc move's copies and the
	// leftovers of a finished one are not counted twice. Empty: every live
	// row counts.
	ShardKey string
}

// RevenueRow is one group of the report.
type RevenueRow struct {
	// Key holds the group values in GroupBy order: time buckets as
	// "2006-01-02" strings, shard as int, workspace as string (nil for
	// NULL), currency as string.
	Key      []any
	Currency string
	Gross    decimal.Decimal
	Refunds  decimal.Decimal
	Net      decimal.Decimal
	Invoices uint64
}

// RevenueTotal is the sum of all rows of one currency.
type RevenueTotal struct {
	Currency string
	Gross    decimal.Decimal
	Refunds  decimal.Decimal
	Net      decimal.Decimal
	Invoices uint64
}

// RevenueReport is the answer to a RevenueRequest.
type RevenueReport struct {
	// GroupBy is the effective grouping (currency included).
	GroupBy []Group
	// CountStatuses and RefundStatuses are the statuses that were summed,
	// after the request's status filter (nil without a status column).
	CountStatuses  []string
	RefundStatuses []string
	// Scale is the number of decimal places of the amount column; amounts
	// are meant to be printed with exactly that many.
	Scale int32
	// Rows are ordered by their key (NULL last); Totals by currency.
	Rows   []RevenueRow
	Totals []RevenueTotal
}

// Revenue computes the revenue report over cfg's table. It returns
// ErrUnknownTable when the loader has not created the table yet.
func (q *Queries) Revenue(ctx context.Context, cfg *tables.Revenue, req RevenueRequest) (*RevenueReport, error) {
	if req.From.Nanosecond() != 0 || req.To.Nanosecond() != 0 {
		return nil, ErrSubSecondBound
	}
	var plans []revenuePlan
	if req.Preagg == nil {
		plans = append(plans, planRevenue(q.db, cfg, req, nil))
	} else {
		plans = append(plans, planPreagg(q.db, cfg, req, req.Preagg.Dirty))
		if len(req.Preagg.Dirty) > 0 {
			plans = append(plans, planRevenue(q.db, cfg, req, req.Preagg))
		}
	}
	plan := plans[0]
	rep := &RevenueReport{GroupBy: plan.groupBy, CountStatuses: plan.count, RefundStatuses: plan.refund}
	if plan.empty {
		return rep, nil
	}
	// Belt and braces: the connection already disables PREWHERE moves, but
	// this query's exactness must not depend on how it was opened.
	ctx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"optimize_move_to_prewhere": 0}))
	maxRows := req.MaxRows
	if maxRows <= 0 {
		maxRows = DefaultMaxRevenueRows
	}
	byKey := map[string]int{} // group key -> index in rep.Rows, when rows of several plans are added
	for i, plan := range plans {
		rows, scale, err := q.runRevenuePlan(ctx, cfg, plan, maxRows)
		if err != nil {
			return nil, err
		}
		if i == 0 || len(rows) > 0 {
			rep.Scale = scale
		}
		for _, row := range rows {
			if len(plans) == 1 {
				rep.Rows = append(rep.Rows, row)
				continue
			}
			k := fmt.Sprintf("%#v", row.Key)
			j, ok := byKey[k]
			if !ok {
				byKey[k] = len(rep.Rows)
				rep.Rows = append(rep.Rows, row)
				continue
			}
			r := &rep.Rows[j]
			r.Gross, r.Refunds, r.Net, r.Invoices = r.Gross.Add(row.Gross), r.Refunds.Add(row.Refunds), r.Net.Add(row.Net), r.Invoices+row.Invoices
		}
	}
	if len(rep.Rows) > maxRows {
		return nil, fmt.Errorf("%w: more than %d", ErrTooManyRows, maxRows)
	}
	if len(plans) > 1 {
		sort.SliceStable(rep.Rows, func(i, j int) bool { return keyLess(rep.Rows[i].Key, rep.Rows[j].Key) })
	}
	totals := map[string]*RevenueTotal{}
	for _, row := range rep.Rows {
		t := totals[row.Currency]
		if t == nil {
			t = &RevenueTotal{Currency: row.Currency}
			totals[row.Currency] = t
		}
		t.Gross = t.Gross.Add(row.Gross)
		t.Refunds = t.Refunds.Add(row.Refunds)
		t.Net = t.Net.Add(row.Net)
		t.Invoices += row.Invoices
	}
	for _, t := range totals {
		rep.Totals = append(rep.Totals, *t)
	}
	sort.Slice(rep.Totals, func(i, j int) bool { return rep.Totals[i].Currency < rep.Totals[j].Currency })
	return rep, nil
}

// runRevenuePlan runs one plan and returns its rows (at most maxRows) and
// the amounts' scale.
func (q *Queries) runRevenuePlan(ctx context.Context, cfg *tables.Revenue, plan revenuePlan, maxRows int) ([]RevenueRow, int32, error) {
	rows, err := q.conn.Query(ctx, plan.sql, plan.args...)
	if err != nil {
		if chstore.IsUnknownTable(err) {
			return nil, 0, fmt.Errorf("%w: %s", ErrUnknownTable, cfg.Table)
		}
		return nil, 0, fmt.Errorf("revenue query on %s: %w", cfg.Table, err)
	}
	defer rows.Close()
	types := rows.ColumnTypes()
	if len(types) != len(plan.keys)+3 {
		return nil, 0, fmt.Errorf("revenue query on %s: %d result columns, want %d", cfg.Table, len(types), len(plan.keys)+3)
	}
	amountType := types[len(plan.keys)].DatabaseTypeName()
	scale, ok := revenueblocks.DecimalScale(amountType)
	if !ok {
		return nil, 0, fmt.Errorf("%w: %s.%s sums to %s", ErrInexactAmount, cfg.Table, cfg.AmountColumn, amountType)
	}
	var out []RevenueRow
	for rows.Next() {
		if len(out) == maxRows {
			return nil, 0, fmt.Errorf("%w: more than %d", ErrTooManyRows, maxRows)
		}
		row, err := scanRevenueRow(rows, plan)
		if err != nil {
			return nil, 0, fmt.Errorf("scan revenue of %s: %w", cfg.Table, err)
		}
		if plan.dropEmpty && row.Invoices == 0 {
			continue // an aggregate without GROUP BY answers one row even over nothing
		}
		if cfg.CurrencyColumn == "" {
			row.Currency = cfg.Currency
			row.Key[slices.Index(plan.groupBy, GroupCurrency)] = cfg.Currency
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("revenue query on %s: %w", cfg.Table, err)
	}
	return out, scale, nil
}

// keyLess orders group keys as ClickHouse's ORDER BY does: element by
// element, dates (ISO text) and currencies as strings, shards as numbers,
// NULL last.
func keyLess(a, b []any) bool {
	for i := range a {
		x, y := a[i], b[i]
		switch {
		case x == nil && y == nil:
			continue
		case x == nil:
			return false
		case y == nil:
			return true
		}
		switch xv := x.(type) {
		case int:
			if yv, _ := y.(int); xv != yv {
				return xv < yv
			}
		case string:
			if yv, _ := y.(string); xv != yv {
				return xv < yv
			}
		}
	}
	return false
}

// revenuePlan is the SQL for one request and how to read its rows.
type revenuePlan struct {
	sql     string
	args    []any
	groupBy []Group
	// keys are the groups computed by ClickHouse, in SELECT order; the
	// fixed currency of a single-currency table is filled in by Go.
	keys          []Group
	keyPos        []int // index in groupBy of each key
	count, refund []string
	// empty: the filters exclude everything; no query is needed.
	empty bool
	// dropEmpty: no GROUP BY, so ClickHouse answers one row even when no
	// row matched.
	dropEmpty bool
}

// Result column aliases. They are prefixed so that they cannot capture a
// table column of the same name (ClickHouse aliases are visible in WHERE).
const aliasPrefix = revenueblocks.AliasPrefix

// planRevenue builds the query. Identifiers come from the validated
// configuration only; every request value is a bound parameter.
// With only set, it counts the rows of only's dirty blocks (the live delta
// added to the pre-aggregates).
func planRevenue(db string, cfg *tables.Revenue, req RevenueRequest, only *PreaggRead) revenuePlan {
	p := revenuePlan{groupBy: slices.Clone(req.GroupBy)}
	if !slices.Contains(p.groupBy, GroupCurrency) {
		p.groupBy = append(p.groupBy, GroupCurrency)
	}
	if cfg.StatusColumn != "" {
		p.count = filterStatuses(cfg.CountStatuses, req.Statuses)
		p.refund = filterStatuses(cfg.RefundStatuses, req.Statuses)
		if len(p.count)+len(p.refund) == 0 {
			p.empty = true
		}
	}
	if cfg.CurrencyColumn == "" && len(req.Currencies) > 0 && !slices.Contains(req.Currencies, cfg.Currency) {
		p.empty = true
	}

	// Every bucket is computed from the time as a UTC DateTime, whatever the
	// column's type (Date, DateTime, DateTime('zone')): 18.16 compares a
	// Date with a DateTime wrongly (day number against seconds), and the
	// explicit zone makes toMonday and friends independent of the server's.
	tcol := quote(cfg.TimeColumn)
	bucketTime := "toDateTime(assumeNotNull(" + tcol + "), 'UTC')"
	var sel []string
	for i, g := range p.groupBy {
		var expr string
		switch g {
		case GroupDay:
			expr = "toDate(" + bucketTime + ")"
		case GroupWeek:
			expr = "toMonday(" + bucketTime + ")"
		case GroupMonth:
			expr = "toStartOfMonth(" + bucketTime + ")"
		case GroupShard:
			expr = "_shard"
		case GroupWorkspace:
			expr = "toString(" + quote(cfg.WorkspaceColumn) + ")"
		case GroupCurrency:
			if cfg.CurrencyColumn == "" {
				continue // one currency: nothing to group
			}
			expr = "ifNull(upper(" + quote(cfg.CurrencyColumn) + "), '')"
		default:
			continue // the API refuses unknown groups; never reach SQL
		}
		sel = append(sel, fmt.Sprintf("%s AS %s%d", expr, aliasPrefix, len(p.keys)))
		p.keys = append(p.keys, g)
		p.keyPos = append(p.keyPos, i)
	}

	var where []string
	var whereArgs []any
	where = append(where, "_deleted = 0",
		"toDateTime("+tcol+", 'UTC') >= ?", "toDateTime("+tcol+", 'UTC') < ?")
	whereArgs = append(whereArgs, req.From.UTC(), req.To.UTC())
	sums, selArgs, statusWhere, statusArgs := revenueblocks.Sums(cfg, p.count, p.refund)
	where = append(where, statusWhere...)
	whereArgs = append(whereArgs, statusArgs...)
	if len(req.Workspaces) > 0 {
		where = append(where, "toString("+quote(cfg.WorkspaceColumn)+") IN ?")
		whereArgs = append(whereArgs, revenueblocks.GroupSet(req.Workspaces))
	}
	if len(req.Currencies) > 0 && cfg.CurrencyColumn != "" {
		where = append(where, "upper("+quote(cfg.CurrencyColumn)+") IN ?")
		whereArgs = append(whereArgs, revenueblocks.GroupSet(req.Currencies))
	}
	if req.ShardKey != "" {
		where = append(where, chstore.OwnedWhere(db, req.ShardKey))
		whereArgs = append(whereArgs, chstore.PlacementArgs(cfg.Table, 2)...)
	}
	if only != nil {
		w, a := revenueblocks.BlocksWhere(only.Kind, only.IDColumn, only.Bits, only.Dirty)
		where = append(where, w)
		whereArgs = append(whereArgs, a...)
	}
	sel = append(sel, sums...)

	p.finish(fmt.Sprintf("SELECT %s FROM %s.%s FINAL WHERE %s", strings.Join(sel, ", "),
		quote(db), quote(cfg.Table), strings.Join(where, " AND ")), req.MaxRows)
	p.args = append(selArgs, whereArgs...)
	return p
}

// finish completes the query: grouped and ordered by every key, or one row
// (dropped when empty) without keys, and limited to one row more than
// maxRows (0: DefaultMaxRevenueRows), to tell "exactly the limit" from
// "over it".
func (p *revenuePlan) finish(query string, maxRows int) {
	var b strings.Builder
	b.WriteString(query)
	if len(p.keys) > 0 {
		aliases := make([]string, len(p.keys))
		for i := range p.keys {
			aliases[i] = aliasPrefix + strconv.Itoa(i)
		}
		fmt.Fprintf(&b, " GROUP BY %[1]s ORDER BY %[1]s", strings.Join(aliases, ", "))
	} else {
		p.dropEmpty = true
	}
	if maxRows <= 0 {
		maxRows = DefaultMaxRevenueRows
	}
	fmt.Fprintf(&b, " LIMIT %d", maxRows+1)
	p.sql = b.String()
}

// scanRevenueRow reads one result row laid out by plan.
func scanRevenueRow(rows interface{ Scan(...any) error }, plan revenuePlan) (RevenueRow, error) {
	dest := make([]any, 0, len(plan.keys)+3)
	for _, g := range plan.keys {
		switch {
		case g.IsTime():
			dest = append(dest, new(time.Time))
		case g == GroupShard:
			dest = append(dest, new(uint16))
		default:
			dest = append(dest, new(*string))
		}
	}
	var kept, refunds *decimal.Decimal
	var n uint64
	dest = append(dest, &kept, &refunds, &n)
	if err := rows.Scan(dest...); err != nil {
		return RevenueRow{}, err
	}
	row := RevenueRow{Key: make([]any, len(plan.groupBy)), Invoices: n}
	for i, g := range plan.keys {
		var v any
		switch d := dest[i].(type) {
		case *time.Time:
			v = d.UTC().Format(time.DateOnly)
		case *uint16:
			v = int(*d)
		case **string:
			if *d != nil {
				v = **d
			}
		}
		row.Key[plan.keyPos[i]] = v
		if g == GroupCurrency {
			row.Currency, _ = v.(string)
		}
	}
	// NULL sums (every amount in the group NULL, or no row of that kind)
	// are zero.
	if kept != nil {
		row.Net = *kept
	}
	if refunds != nil {
		row.Refunds = *refunds
	}
	row.Gross = row.Net.Add(row.Refunds)
	return row, nil
}

// filterStatuses keeps the configured statuses the request asked for (all
// of them when it asked for none).
func filterStatuses(configured, asked []string) []string {
	if len(asked) == 0 {
		return slices.Clone(configured)
	}
	var out []string
	for _, s := range configured {
		if slices.Contains(asked, s) {
			out = append(out, s)
		}
	}
	return out
}
