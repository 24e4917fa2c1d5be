package query

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/shopspring/decimal"

	"github.com/tributary/tributary/internal/tables"
)

var (
	invoicesCfg = &tables.Revenue{Table: "invoices", AmountColumn: "amount", CurrencyColumn: "currency",
		TimeColumn: "issued_at", StatusColumn: "status", WorkspaceColumn: "workspace_id",
		CountStatuses: []string{"paid"}, RefundStatuses: []string{"refunded"}}
	// QuickCart-like: other names, one currency, no status, no workspace.
	ordersCfg = &tables.Revenue{Table: "orders", AmountColumn: "total", Currency: "USD", TimeColumn: "placed_at"}
)

func TestPlanRevenue(t *testing.T) {
	from := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	to := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name      string
		cfg       *tables.Revenue
		req       RevenueRequest
		contains  []string
		absent    []string
		groupBy   []Group
		empty     bool
		dropEmpty bool
		count     []string
		refund    []string
	}{{
		name: "demo by day and currency",
		cfg:  invoicesCfg,
		req:  RevenueRequest{From: from, To: to, GroupBy: []Group{GroupDay}},
		contains: []string{"FROM `tributary`.`invoices` FINAL WHERE _deleted = 0",
			"toDate(toDateTime(assumeNotNull(`issued_at`), 'UTC')) AS __revenue_0",
			"ifNull(upper(`currency`), '') AS __revenue_1",
			"`status` IN ?", "sumIf(`amount`, NOT (`status` IN ?))", "sumIf(`amount`, `status` IN ?)",
			"GROUP BY __revenue_0, __revenue_1 ORDER BY __revenue_0, __revenue_1", "LIMIT 100001"},
		groupBy: []Group{GroupDay, GroupCurrency},
		count:   []string{"paid"}, refund: []string{"refunded"},
	}, {
		name: "week, shard, workspace filters",
		cfg:  invoicesCfg,
		req: RevenueRequest{From: from, To: to, GroupBy: []Group{GroupWeek, GroupShard, GroupCurrency, GroupWorkspace},
			Workspaces: []string{"7"}, Currencies: []string{"EUR"}, MaxRows: 10},
		contains: []string{"toMonday(", "_shard AS __revenue_1", "toString(`workspace_id`) AS __revenue_3",
			"toString(`workspace_id`) IN ?", "upper(`currency`) IN ?", "LIMIT 11"},
		groupBy: []Group{GroupWeek, GroupShard, GroupCurrency, GroupWorkspace},
		count:   []string{"paid"}, refund: []string{"refunded"},
	}, {
		name: "partial refunds from a refunded-amount column; owner-only with a shard key",
		cfg: func() *tables.Revenue {
			c := *invoicesCfg
			c.RefundedAmountColumn = "refunded_amount"
			return &c
		}(),
		req: RevenueRequest{From: from, To: to, ShardKey: "workspace_id"},
		contains: []string{
			"sum(`amount` - if(`status` IN ?, ifNull(`refunded_amount`, `amount`), ifNull(`refunded_amount`, `amount` - `amount`))) AS __revenue_kept",
			"sum(if(`status` IN ?, ifNull(`refunded_amount`, `amount`), ifNull(`refunded_amount`, `amount` - `amount`))) AS __revenue_refunds",
			"(toString(assumeNotNull(`workspace_id`)), _shard) IN (SELECT key, argMax(owner, ring_version) FROM `tributary`._ownership"},
		absent:  []string{"sumIf("},
		groupBy: []Group{GroupCurrency},
		count:   []string{"paid"}, refund: []string{"refunded"},
	}, {
		name:     "status filter keeps paid only: no refund set",
		cfg:      invoicesCfg,
		req:      RevenueRequest{From: from, To: to, GroupBy: []Group{GroupMonth}, Statuses: []string{"paid"}},
		contains: []string{"toStartOfMonth(", "sumIf(`amount`, NOT (0))", "sumIf(`amount`, 0)"},
		groupBy:  []Group{GroupMonth, GroupCurrency},
		count:    []string{"paid"},
	}, {
		name:    "status filter matching nothing configured",
		cfg:     invoicesCfg,
		req:     RevenueRequest{From: from, To: to, Statuses: []string{"void"}},
		groupBy: []Group{GroupCurrency},
		empty:   true,
	}, {
		name: "single-currency orders by config alone",
		cfg:  ordersCfg,
		req:  RevenueRequest{From: from, To: to, GroupBy: []Group{GroupMonth}},
		contains: []string{"FROM `tributary`.`orders` FINAL", "toStartOfMonth(toDateTime(assumeNotNull(`placed_at`), 'UTC'))",
			"sumIf(`total`, NOT (0))", "GROUP BY __revenue_0 ORDER BY __revenue_0"},
		absent:  []string{"upper(", "IN ?"},
		groupBy: []Group{GroupMonth, GroupCurrency},
	}, {
		name:      "single currency, no time bucket: no GROUP BY",
		cfg:       ordersCfg,
		req:       RevenueRequest{From: from, To: to},
		absent:    []string{"GROUP BY"},
		groupBy:   []Group{GroupCurrency},
		dropEmpty: true,
	}, {
		name:      "single currency filtered to another one",
		cfg:       ordersCfg,
		req:       RevenueRequest{From: from, To: to, Currencies: []string{"EUR"}},
		groupBy:   []Group{GroupCurrency},
		empty:     true,
		dropEmpty: true,
	}} {
		t.Run(c.name, func(t *testing.T) {
			p := planRevenue("tributary", c.cfg, c.req, nil)
			if p.empty != c.empty {
				t.Fatalf("empty = %v, want %v", p.empty, c.empty)
			}
			if !slices.Equal(p.groupBy, c.groupBy) {
				t.Errorf("groupBy = %v, want %v", p.groupBy, c.groupBy)
			}
			if !slices.Equal(p.count, c.count) || !slices.Equal(p.refund, c.refund) {
				t.Errorf("statuses = %v / %v, want %v / %v", p.count, p.refund, c.count, c.refund)
			}
			if p.dropEmpty != c.dropEmpty {
				t.Errorf("dropEmpty = %v, want %v", p.dropEmpty, c.dropEmpty)
			}
			if c.empty {
				return
			}
			checkExactSQL(t, p)
			for _, s := range c.contains {
				if !strings.Contains(p.sql, s) {
					t.Errorf("SQL lacks %q:\n%s", s, p.sql)
				}
			}
			for _, s := range c.absent {
				if strings.Contains(p.sql, s) {
					t.Errorf("SQL has %q:\n%s", s, p.sql)
				}
			}
			// The bounds are bound, in UTC.
			var times []time.Time
			for _, a := range p.args {
				if tm, ok := a.(time.Time); ok {
					times = append(times, tm)
				}
			}
			want := []time.Time{from, to}
			if !slices.EqualFunc(times, want, time.Time.Equal) {
				t.Errorf("bound times %v, want %v", times, want)
			}
		})
	}
}

// checkExactSQL asserts the invariants of every exact read: FINAL with a
// plain WHERE, tombstones dropped, one bound argument per placeholder and
// no request value in the text.
func checkExactSQL(t *testing.T, p revenuePlan) {
	t.Helper()
	if !strings.Contains(p.sql, " FINAL WHERE _deleted = 0 AND ") || strings.Contains(strings.ToUpper(p.sql), "PREWHERE") {
		t.Errorf("not FINAL + plain WHERE + _deleted = 0:\n%s", p.sql)
	}
	if n := strings.Count(p.sql, "?"); n != len(p.args) {
		t.Errorf("%d placeholders, %d args:\n%s", n, len(p.args), p.sql)
	}
	for _, a := range p.args {
		if gs, ok := a.(clickhouse.GroupSet); ok {
			if len(gs.Value) == 0 {
				t.Errorf("empty IN set bound (invalid SQL)")
			}
			for _, v := range gs.Value {
				if strings.Contains(p.sql, "'"+v.(string)+"'") {
					t.Errorf("value %v spliced into SQL", v)
				}
			}
		}
	}
}

// TestPlanRevenueHostileStatus: a status is data, never SQL.
func TestPlanRevenueHostileStatus(t *testing.T) {
	cfg := *invoicesCfg
	cfg.CountStatuses = []string{"paid') OR 1=1 --"}
	p := planRevenue("db", &cfg, RevenueRequest{From: time.Unix(0, 0), To: time.Unix(10, 0), Workspaces: []string{"x' OR '1"}}, nil)
	if strings.Contains(p.sql, "OR 1=1") || strings.Contains(p.sql, "x' OR") {
		t.Fatalf("user or config value in SQL text:\n%s", p.sql)
	}
	checkExactSQL(t, p)
}

// fakeRow fills Scan destinations from fixed values, as clickhouse-go does.
type fakeRow []any

func (f fakeRow) Scan(dest ...any) error {
	for i, d := range dest {
		switch d := d.(type) {
		case *time.Time:
			*d = f[i].(time.Time)
		case *uint16:
			*d = f[i].(uint16)
		case **string:
			*d, _ = f[i].(*string)
		case **decimal.Decimal:
			*d, _ = f[i].(*decimal.Decimal)
		case *uint64:
			*d = f[i].(uint64)
		}
	}
	return nil
}

func TestScanRevenueRow(t *testing.T) {
	p := planRevenue("db", invoicesCfg, RevenueRequest{GroupBy: []Group{GroupShard, GroupDay, GroupWorkspace}}, nil)
	ws, eur := "42", "EUR"
	kept, refunds := decimal.RequireFromString("9999999999.99"), decimal.RequireFromString("0.01")
	row, err := scanRevenueRow(fakeRow{uint16(3), time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), &ws, &eur, &kept, &refunds, uint64(5)}, p)
	if err != nil {
		t.Fatal(err)
	}
	if want := []any{3, "2026-11-30", "42", "EUR"}; !slices.Equal(row.Key, want) {
		t.Errorf("key %v, want %v", row.Key, want)
	}
	if row.Currency != "EUR" || row.Gross.String() != "10000000000" || row.Net.String() != "9999999999.99" ||
		row.Refunds.String() != "0.01" || row.Invoices != 5 {
		t.Errorf("row %+v", row)
	}
	// NULL workspace and NULL sums.
	row, err = scanRevenueRow(fakeRow{uint16(0), time.Unix(0, 0).UTC(), (*string)(nil), &eur, (*decimal.Decimal)(nil), (*decimal.Decimal)(nil), uint64(1)}, p)
	if err != nil {
		t.Fatal(err)
	}
	if row.Key[2] != nil || !row.Gross.IsZero() || !row.Net.IsZero() || !row.Refunds.IsZero() {
		t.Errorf("NULLs: %+v", row)
	}
}

// TestAliasesCannotCaptureColumns: the result aliases must not be plain
// identifiers a table could use for a column by accident.
func TestAliasesCannotCaptureColumns(t *testing.T) {
	p := planRevenue("db", invoicesCfg, RevenueRequest{GroupBy: []Group{GroupDay}}, nil)
	for _, m := range regexp.MustCompile(`AS (\w+)`).FindAllStringSubmatch(p.sql, -1) {
		if !strings.HasPrefix(m[1], aliasPrefix) {
			t.Errorf("alias %q without prefix", m[1])
		}
	}
}
