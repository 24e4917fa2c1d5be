package tests

// Direct tests of query.Revenue on hand-made ClickHouse parts, and its
// benchmark. The end-to-end comparison with the shards is in revenue_test.go.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/query"
	"github.com/tributary/tributary/internal/tables"
)

// revCHTable creates a loader-shaped ClickHouse table for direct tests.
func revCHTable(t testing.TB, store *chstore.Store, db, table, amountType, timeType string) {
	t.Helper()
	ctx := context.Background()
	err := store.Conn().Exec(ctx, fmt.Sprintf("CREATE TABLE `%s`.`%s` (id Int64, account_id Nullable(Int64), total Nullable(%s), "+
		"currency_code Nullable(String), state Nullable(String), placed_at Nullable(%s), _shard UInt16, _version UInt64, _deleted UInt8) "+
		"ENGINE = ReplacingMergeTree(_version) ORDER BY (id, _shard)", db, table, amountType, timeType))
	if err != nil {
		t.Fatal(err)
	}
	// Parts must stay apart: the superseded versions are what FINAL has to drop.
	if err := store.Conn().Exec(ctx, fmt.Sprintf("SYSTEM STOP MERGES `%s`.`%s`", db, table)); err != nil {
		t.Fatal(err)
	}
}

type revCHRow struct {
	id      int64
	ws      *int64
	total   any
	cur     *string
	state   *string
	at      any
	shard   uint16
	version uint64
	deleted uint8
}

func revCHInsert(t testing.TB, store *chstore.Store, db, table string, rows ...revCHRow) {
	t.Helper()
	ctx := context.Background()
	b, err := store.Conn().PrepareBatch(ctx, fmt.Sprintf("INSERT INTO `%s`.`%s` (id, account_id, total, currency_code, state, placed_at, _shard, _version, _deleted)", db, table))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if err := b.Append(r.id, r.ws, r.total, r.cur, r.state, r.at, r.shard, r.version, r.deleted); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
}

func revPtr[T any](v T) *T { return &v }

// TestRevenueQueryFinalExact runs query.Revenue on hand-made parts:
// a row paid in one part and refunded in a newer one, a deleted row, an
// older version arriving after a newer one, NULL amounts, a Date time
// column, the row limit and a float amount column.
func TestRevenueQueryFinalExact(t *testing.T) {
	store, db := scratchStore(t, "rev_")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q := query.New(store.Conn(), db)
	d := func(s string) decimal.Decimal { return decimal.RequireFromString(s) }
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	eur, usd, paid, refunded, issued := revPtr("EUR"), revPtr("usd"), revPtr("paid"), revPtr("refunded"), revPtr("issued")

	revCHTable(t, store, db, "orders", "Decimal(12, 2)", "DateTime('UTC')")
	revCHInsert(t, store, db, "orders",
		revCHRow{id: 1, ws: revPtr(int64(1)), total: d("9999999999.99"), cur: eur, state: paid, at: at, shard: 0, version: 10},
		revCHRow{id: 2, ws: revPtr(int64(1)), total: d("0.01"), cur: eur, state: paid, at: at, shard: 0, version: 10},
		revCHRow{id: 3, ws: revPtr(int64(2)), total: d("5.00"), cur: usd, state: paid, at: at, shard: 1, version: 10},
		revCHRow{id: 4, ws: revPtr(int64(2)), total: d("7.00"), cur: eur, state: paid, at: at, shard: 1, version: 30},
		revCHRow{id: 5, ws: nil, total: nil, cur: eur, state: paid, at: at, shard: 1, version: 10},
		revCHRow{id: 6, ws: revPtr(int64(1)), total: d("1.00"), cur: eur, state: issued, at: at, shard: 0, version: 10},
		revCHRow{id: 7, ws: revPtr(int64(2)), total: d("3.00"), cur: eur, state: paid, at: at, shard: 1, version: 10},
	)
	revCHInsert(t, store, db, "orders",
		// 1 refunded later; 2 deleted; 4's older version arrives late; 6 paid.
		revCHRow{id: 1, ws: revPtr(int64(1)), total: d("9999999999.99"), cur: eur, state: refunded, at: at, shard: 0, version: 20},
		// The tombstone carries the old values (as with replica identity
		// FULL): only _deleted keeps it out.
		revCHRow{id: 2, ws: revPtr(int64(1)), total: d("0.01"), cur: eur, state: paid, at: at, shard: 0, version: 20, deleted: 1},
		revCHRow{id: 4, ws: revPtr(int64(2)), total: d("700.00"), cur: eur, state: refunded, at: at, shard: 1, version: 20},
		revCHRow{id: 6, ws: revPtr(int64(1)), total: d("1.00"), cur: eur, state: paid, at: at, shard: 0, version: 11},
		// 7 voided: FINAL + PREWHERE would bring the paid version back.
		revCHRow{id: 7, ws: revPtr(int64(2)), total: d("3.00"), cur: eur, state: revPtr("void"), at: at, shard: 1, version: 20},
	)
	cfg := &tables.Revenue{Table: "orders", AmountColumn: "total", CurrencyColumn: "currency_code", TimeColumn: "placed_at",
		StatusColumn: "state", WorkspaceColumn: "account_id", CountStatuses: []string{"paid"}, RefundStatuses: []string{"refunded"}}
	req := query.RevenueRequest{From: at.Truncate(24 * time.Hour), To: at.Add(24 * time.Hour), GroupBy: []query.Group{query.GroupWorkspace}}
	rep, err := q.Revenue(ctx, cfg, req)
	if err != nil {
		t.Fatal(err)
	}
	type line struct {
		key                 string
		gross, refunds, net string
		n                   uint64
	}
	var got []line
	for _, r := range rep.Rows {
		got = append(got, line{fmt.Sprint(r.Key), r.Gross.StringFixed(rep.Scale), r.Refunds.StringFixed(rep.Scale), r.Net.StringFixed(rep.Scale), r.Invoices})
	}
	want := []line{
		{"[1 EUR]", "10000000000.99", "9999999999.99", "1.00", 2},
		{"[2 EUR]", "7.00", "0.00", "7.00", 1},
		{"[2 USD]", "5.00", "0.00", "5.00", 1},
		{"[<nil> EUR]", "0.00", "0.00", "0.00", 1}, // NULLs sort last
	}
	if rep.Scale != 2 || !slices.Equal(got, want) {
		t.Fatalf("FINAL report (scale %d):\n got %v\nwant %v", rep.Scale, got, want)
	}
	if len(rep.Totals) != 2 || rep.Totals[0].Currency != "EUR" || rep.Totals[0].Net.StringFixed(2) != "8.00" ||
		rep.Totals[0].Gross.StringFixed(2) != "10000000007.99" || rep.Totals[1].Currency != "USD" {
		t.Fatalf("totals %+v", rep.Totals)
	}

	req.MaxRows = 3
	if _, err := q.Revenue(ctx, cfg, req); !errors.Is(err, query.ErrTooManyRows) {
		t.Fatalf("4 groups with MaxRows 3: %v", err)
	}
	req.MaxRows = 4
	if _, err := q.Revenue(ctx, cfg, req); err != nil {
		t.Fatalf("4 groups with MaxRows 4: %v", err)
	}

	// A Date time column: buckets and bounds in days, not compared as
	// day numbers against seconds.
	revCHTable(t, store, db, "dated", "Decimal(18, 4)", "Date")
	day := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC) // a Sunday
	revCHInsert(t, store, db, "dated",
		revCHRow{id: 1, total: d("1.2345"), cur: eur, state: paid, at: day, version: 1},
		revCHRow{id: 2, total: d("2"), cur: eur, state: paid, at: day.AddDate(0, 0, 1), version: 1},
		revCHRow{id: 3, total: d("4"), cur: eur, state: paid, at: day.AddDate(0, 0, 2), version: 1})
	cfg2 := *cfg
	cfg2.Table = "dated"
	rep, err = q.Revenue(ctx, &cfg2, query.RevenueRequest{From: day, To: day.AddDate(0, 0, 2), GroupBy: []query.Group{query.GroupWeek}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Scale != 4 || len(rep.Rows) != 2 || rep.Rows[0].Key[0] != "2026-11-23" || rep.Rows[0].Net.StringFixed(4) != "1.2345" ||
		rep.Rows[1].Key[0] != "2026-11-30" || rep.Rows[1].Net.StringFixed(4) != "2.0000" {
		t.Fatalf("Date column by week: %+v", rep)
	}

	// A float amount is refused, not summed.
	revCHTable(t, store, db, "floaty", "Float64", "DateTime('UTC')")
	revCHInsert(t, store, db, "floaty", revCHRow{id: 1, total: 0.1, cur: eur, state: paid, at: at, version: 1})
	cfg3 := *cfg
	cfg3.Table = "floaty"
	if _, err := q.Revenue(ctx, &cfg3, req); !errors.Is(err, query.ErrInexactAmount) {
		t.Fatalf("float amount: %v", err)
	}
	// A table the loader has not created yet.
	cfg3.Table = "missing"
	if _, err := q.Revenue(ctx, &cfg3, req); !errors.Is(err, query.ErrUnknownTable) {
		t.Fatalf("missing table: %v", err)
	}
}

// BenchmarkRevenueQuery measures query.Revenue over a million rows (four
// currencies, 100 workspaces, two shards, a year), grouped by day and
// workspace, and by month: go test ./tests -run '^$' -bench RevenueQuery.
func BenchmarkRevenueQuery(b *testing.B) {
	store, db := scratchStore(b, "revbench_")
	ctx := context.Background()
	revCHTable(b, store, db, "orders", "Decimal(12, 2)", "DateTime('UTC')")
	// Generated server-side: INSERT ... SELECT runs through Exec.
	err := store.Conn().Exec(ctx, fmt.Sprintf("INSERT INTO `%s`.orders (id, account_id, total, currency_code, state, placed_at, _shard, _version, _deleted) "+
		"SELECT number, number %% 100, toDecimal64(number %% 100000, 2) / 100, ['EUR','USD','JPY','GBP'][number %% 4 + 1], "+
		"['paid','paid','refunded','issued'][intHash32(number) %% 4 + 1], toDateTime(1767225600 + number * 31, 'UTC'), number %% 2, 1, 0 "+
		"FROM system.numbers LIMIT 1000000", db))
	if err != nil {
		b.Fatal(err)
	}
	store.Conn().Exec(ctx, fmt.Sprintf("SYSTEM START MERGES `%s`.orders", db)) //nolint:errcheck
	q := query.New(store.Conn(), db)
	cfg := &tables.Revenue{Table: "orders", AmountColumn: "total", CurrencyColumn: "currency_code", TimeColumn: "placed_at",
		StatusColumn: "state", WorkspaceColumn: "account_id", CountStatuses: []string{"paid"}, RefundStatuses: []string{"refunded"}}
	for _, groups := range [][]query.Group{{query.GroupMonth}, {query.GroupDay, query.GroupWorkspace}} {
		req := query.RevenueRequest{From: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC),
			GroupBy: groups}
		b.Run(fmt.Sprint(groups), func(b *testing.B) {
			for b.Loop() {
				rep, err := q.Revenue(ctx, cfg, req)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(len(rep.Rows)), "groups")
			}
		})
	}
}
