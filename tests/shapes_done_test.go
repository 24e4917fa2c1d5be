package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// shapeTable is one table of TestEveryTableShape: its entry in the table
// config, the rows it has before the readers start, and one change of
// the traffic. Its CREATE is in testdata/shapes.sql. Adding a table to the
// test is a CREATE there and an entry in shapesTables.
type shapeTable struct {
	name   string // the table is <name>_<suffix>
	config string // its entry in the table config; %[1]s is the suffix
	seed   func(w *shapesWriter, ctx context.Context, shard int) error
	change func(w *shapesWriter, ctx context.Context, shard int) error
}

// shapesTables are the tables of TestEveryTableShape, in the order of the
// table config (the first is the revenue table: setupPipelineOn's own).
var shapesTables = []shapeTable{
	{name: "sh_payments", config: `{"name": "sh_payments_%[1]s", "id_column": "id", "id_layout": "instagram"}`,
		seed: (*shapesWriter).seedPayments, change: (*shapesWriter).changePayment},
	{name: "sh_quotes", config: `{"name": "sh_quotes_%[1]s", "id_column": "id", "id_layout": "uuidv7", "column_types": {"qty": "Decimal(38, 12)"}}`,
		seed: (*shapesWriter).seedQuotes, change: (*shapesWriter).changeQuote},
	{name: "sh_lines", config: `{"name": "sh_lines_%[1]s", "id_columns": ["tenant_id", "line_no"], "id_layout": "key"}`,
		seed: (*shapesWriter).seedLines, change: (*shapesWriter).changeLine},
}

// shapesRevenue is the revenue section: over the partitioned payments,
// whose amount is a domain over numeric(14,2), currency a domain over
// text, and status an enum.
const shapesRevenue = `{"table": "sh_payments_%[1]s", "amount_column": "amount", "currency_column": "currency",
	"time_column": "paid_at", "status_column": "status", "workspace_column": "account",
	"count_statuses": ["paid"], "refund_statuses": ["refunded"], "refunded_amount_column": "refunded"}`

// shapesConfig is the table config, %[1]s the suffix.
func shapesConfig() string {
	var entries []string
	for _, t := range shapesTables {
		entries = append(entries, t.config)
	}
	return `{"topic_prefix": "shapes_%[1]s.", "tables": [` + strings.Join(entries, ",\n") + `], "revenue": ` + shapesRevenue + "}"
}

// TestEveryTableShape is the table shapes SaaS fleets have, end to end,
// configured from docs/configuration.md alone (a table config and a fleet file of
// its own, its own ClickHouse database and topics), on shards numbered 3,
// 8 and 21: a revenue table partitioned by month whose amount, currency
// and status are domains and an enum, a table of enums, domains and
// unconstrained numerics with values at their limits, and a table keyed
// (tenant_id, line_no) whose tenants share line numbers and whose key
// changes (testdata/shapes.sql).
// Preflight finds nothing wrong. The readers and the loader run as
// processes with their defaults (the revenue pre-aggregator on). Rows
// written before the readers start are copied; then, under traffic on
// every shard (inserts, updates, partial refunds, updates of the partition
// key that move rows between partitions, deletes, values at their limits),
// a partition is truncated, another detached and a table with rows
// attached as a new partition, the loader SIGKILLed after the first two
// and shard 8's reader after the third. Then the verify binary, on the fleet file,
// passes (every row of every table on every shard, revenue to the cent);
// GET /v1/revenue equals a sum over the shards to the cent, live and from
// the pre-aggregates; no row of the truncated or detached partitions is
// live in ClickHouse; a row that moved between partitions reads as one
// copy with its new partition key; the dead-letter topic is empty.
func TestEveryTableShape(t *testing.T) {
	t.Parallel()
	numbers := []int{3, 8, 21}
	st := sparseStack(t, numbers)
	p := setupPipelineOn(t, st, numbers, nil, true, "sh_payments_", shapesConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	execSchemaFile(ctx, t, p, numbers, "testdata/shapes.sql")
	t.Cleanup(func() { shapesDropSchema(t, p) }) // after the processes stopped (registered later, run earlier)

	w := &shapesWriter{sfx: p.suffix, pools: shardPools(ctx, t, st, numbers), months: map[int]*shapesMonths{}, moved: map[int][]int64{}}
	for _, s := range numbers {
		w.months[s] = &shapesMonths{open: []string{"2026-08", "2026-09", "2026-10", "2026-11", "2026-12"}}
		for _, tbl := range shapesTables { // rows for the initial copy
			if err := tbl.seed(w, ctx, s); err != nil {
				t.Fatalf("seed %s on shard %d: %v", tbl.name, s, err)
			}
		}
	}

	dir := t.TempDir()
	fleetFile, fleetEnv := writeFleet(t, dir, "saas-fleet.json", numbers, map[int]string{3: st.ShardDSNs[3], 8: st.ShardDSNs[8], 21: st.ShardDSNs[21]})
	tablesFile := writeTablesFile(t, dir, fmt.Sprintf(shapesConfig(), p.suffix))
	procs, verifyBin := startCheckedFleet(ctx, t, p, dir, fleetFile, tablesFile, fleetEnv, []string{"--publication", "e2e_" + p.suffix})

	// Traffic on every shard; meanwhile, on every shard, a partition is
	// truncated, another detached and a table with rows attached, each
	// followed by a SIGKILL: of the loader while it deletes the removed
	// partitions' rows, of shard 8's reader while it copies the attached
	// one's.
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	waitTraffic := trafficOn(wctx, numbers, w.run)
	start := time.Now()
	gone := map[int][]int64{} // per shard: ids of the truncated and detached partitions
	for _, ev := range []struct {
		after  time.Duration
		what   func(shard int) ([]int64, error)
		victim *supervised
	}{
		{4 * time.Second, func(s int) ([]int64, error) { return w.truncate(ctx, s, "2026-09") }, procs.loader},
		{9 * time.Second, func(s int) ([]int64, error) { return w.detach(ctx, s, "2026-10") }, procs.loader},
		{14 * time.Second, func(s int) ([]int64, error) { return nil, w.attach(ctx, s, "2026-07") }, procs.readers[8]},
	} {
		time.Sleep(time.Until(start.Add(ev.after)))
		for _, s := range numbers {
			ids, err := ev.what(s)
			if err != nil {
				t.Fatalf("shard %d: %v", s, err)
			}
			gone[s] = append(gone[s], ids...)
		}
		ev.victim.kill()
	}
	waitTraffic(t)
	t.Logf("traffic: %s", w.stats.String())
	if w.stats.moved.Load() == 0 || w.stats.refunds.Load() == 0 || w.stats.quoteEdges.Load() == 0 || w.stats.deletes.Load() == 0 {
		t.Fatalf("traffic did too little to check: %s", w.stats.String())
	}
	if n := procs.loader.startCount(); n < 3 {
		t.Errorf("the loader started %d times: it was not killed and restarted twice", n)
	}
	for _, s := range numbers {
		if len(gone[s]) == 0 {
			t.Fatalf("shard %d: the truncated and detached partitions held no rows: the test would prove nothing", s)
		}
	}

	rep, code, stderr := verifyBinary(ctx, t, verifyBin, p, fleetFile, tablesFile, fleetEnv, "3m")
	if code != 0 || !rep.Passed {
		t.Fatalf("verify: exit %d, mismatches %+v, differences %+v\n%s", code, rep.Mismatches, rep.Differences, stderr)
	}
	if len(rep.Tables) != len(shapesTables) {
		t.Errorf("verify checked %d tables, want the %d configured", len(rep.Tables), len(shapesTables))
	}
	for _, tbl := range rep.Tables {
		var got []int
		for _, sh := range tbl.Shards {
			got = append(got, sh.Shard)
			if sh.Sampled || int64(sh.Checked) != sh.SourceRows || sh.ClickHouseRows != sh.SourceRows || sh.SourceRows == 0 {
				t.Errorf("table %s shard %d: %+v, want every row (some) checked and counted", tbl.Table, sh.Shard, sh)
			}
		}
		if !slices.Equal(got, numbers) {
			t.Errorf("table %s: shards %v checked, want %v", tbl.Table, got, numbers)
		}
	}
	if rep.Revenue == nil || rep.Revenue.Groups == 0 {
		t.Fatalf("revenue %+v: want groups compared", rep.Revenue)
	}
	t.Logf("verify: passed, %d rows checked (%d via the API), revenue %d groups from %v, in %.1f s",
		rep.Checked(), rep.CheckedViaAPI(), rep.Revenue.Groups, rep.Revenue.Sources, rep.TookSeconds)

	// Revenue to the cent against the shards, live (bounds inside a day)
	// and from the pre-aggregates (whole days), which are on by default.
	cfg := p.tables.Revenue
	from, to := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	p.waitFor(ctx, 90*time.Second, "revenue answered from the pre-aggregates", func() bool {
		status, body := p.getRevenue(ctx, url.Values{"from": {"2026-07-01"}, "to": {"2027-01-01"}}, "")
		var a revenueAnswer
		return status == http.StatusOK && json.Unmarshal(body, &a) == nil && a.Source == "preaggregate"
	})
	p.preagg = true
	for _, groups := range [][]string{{"day"}, {"month", "shard"}, nil} {
		p.compareRevenue(ctx, cfg, from, to, groups, nil, nil, nil)
	}
	p.compareRevenue(ctx, cfg, from.Add(time.Second), to.Add(-time.Second), []string{"month"}, nil, nil, nil)
	p.compareRevenue(ctx, cfg, from, to, []string{"workspace"}, nil, nil, nil)

	// The truncated and detached partitions' rows are gone from ClickHouse.
	payments := "sh_payments_" + p.suffix
	for _, s := range numbers {
		if n := p.chCount(ctx, "SELECT count() FROM %[1]s.%[2]s FINAL WHERE _deleted = 0 AND _shard = ? AND has(?, id)", uint16(s), gone[s]); n != 0 {
			t.Errorf("shard %d: %d of the %d rows of the truncated and detached partitions are live in ClickHouse", s, n, len(gone[s]))
		}
	}
	// A row that moved between partitions is one copy, in its new one.
	checked := 0
	for _, s := range numbers {
		for _, id := range w.movedIDs(s) {
			var at time.Time
			err := w.pools[s].QueryRow(ctx, "SELECT paid_at FROM "+payments+" WHERE id = $1", id).Scan(&at)
			if err == pgx.ErrNoRows {
				continue // deleted, truncated or detached since
			}
			if err != nil {
				t.Fatal(err)
			}
			row := p.getRowAfter(ctx, payments, id, fmt.Sprintf("%d:%s", s, p.walInsertLSN(ctx, s)))
			got, err := time.Parse(time.RFC3339Nano, fmt.Sprint(row["paid_at"]))
			if err != nil || !got.Equal(at) {
				t.Errorf("shard %d: payment %d moved to %s, read by id as %v (%v)", s, id, at.UTC().Format(time.RFC3339Nano), row["paid_at"], err)
			}
			if checked++; checked >= 10 {
				break
			}
		}
	}
	if checked == 0 {
		t.Error("no moved payment left to read by id")
	}
	if dead := p.dlqRecords(ctx); dead != 0 {
		t.Errorf("the dead-letter topic %s holds %d records, want 0", p.dlqTopic(), dead)
	}
}

// shapesDropSchema removes what testdata/shapes.sql and the test created.
func shapesDropSchema(t *testing.T, p *pipeline) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sfx := p.suffix
	for _, s := range p.shards {
		conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[s])
		if err != nil {
			t.Errorf("cleanup shard %d: %v", s, err)
			continue
		}
		conn.Exec(ctx, strings.ReplaceAll(`DROP TABLE IF EXISTS sh_payments_{{sfx}}, sh_payments_{{sfx}}_2026_10, sh_payments_{{sfx}}_2026_07, sh_quotes_{{sfx}}, sh_lines_{{sfx}};
			DROP FUNCTION IF EXISTS sh_pay_id_{{sfx}}(), sh_uuidv7_{{sfx}}(); DROP SEQUENCE IF EXISTS sh_pay_seq_{{sfx}};
			DROP TYPE IF EXISTS sh_status_{{sfx}}, sh_side_{{sfx}};
			DROP DOMAIN IF EXISTS sh_money_{{sfx}}, sh_currency_{{sfx}}, sh_email_{{sfx}}`, "{{sfx}}", sfx)) //nolint:errcheck
		conn.Close(ctx)
	}
}

// shapesMonths are the months a shard's payments may be written in: the
// partitions attached. Writers hold mu for reading; a partition is
// detached or attached under it held for writing.
type shapesMonths struct {
	mu   sync.RWMutex
	open []string // "2026-08"
}

// shapesStats counts what the traffic did.
type shapesStats struct {
	payments, paid, refunds, amounts, moved, deletes atomic.Int64
	quotes, quoteEdges, quoteEdits                   atomic.Int64
	lines, lineEdits, lineKeyChanges, lineDeletes    atomic.Int64
}

func (s *shapesStats) String() string {
	return fmt.Sprintf("%d payments, %d paid, %d refunds, %d amount changes, %d moved between partitions, %d deletes; %d quotes (%d with values at their limits), %d quote edits; %d lines, %d line edits, %d key changes, %d line deletes",
		s.payments.Load(), s.paid.Load(), s.refunds.Load(), s.amounts.Load(), s.moved.Load(), s.deletes.Load(),
		s.quotes.Load(), s.quoteEdges.Load(), s.quoteEdits.Load(),
		s.lines.Load(), s.lineEdits.Load(), s.lineKeyChanges.Load(), s.lineDeletes.Load())
}

// shapesWriter is the fleet's application: one writer per shard.
type shapesWriter struct {
	sfx    string
	pools  map[int]*pgxpool.Pool
	months map[int]*shapesMonths
	mu     sync.Mutex
	moved  map[int][]int64 // per shard: payments moved between partitions; guarded by mu
	stats  shapesStats
}

func (w *shapesWriter) table(name string) string { return name + "_" + w.sfx }

// run writes on shard until ctx ends, a change of a random table at a time.
func (w *shapesWriter) run(ctx context.Context, shard int) error {
	for ctx.Err() == nil {
		if err := shapesTables[rand.IntN(len(shapesTables))].change(w, ctx, shard); err != nil {
			return err
		}
		time.Sleep(5 * time.Millisecond) // the machine's cores are shared
	}
	return nil
}

var shapesCurrencies = []string{"EUR", "USD", "JPY", "CHF"}

// paymentValues are a new payment's account, amount, currency, status,
// payer and exchange rate: amounts up to the domain's limit, exchange
// rates of any scale, NaN or NULL.
func paymentValues() []any {
	cents := rand.Int64N(1_000_000_000_000)
	amount := fmt.Sprintf("%d.%02d", cents/100, cents%100)
	if rand.IntN(20) == 0 {
		amount = "999999999999.99" // numeric(14,2)'s largest
	}
	var fx any
	switch rand.IntN(6) {
	case 0:
		fx = nil
	case 1:
		fx = "NaN"
	default:
		fx = fmt.Sprintf("%d.%0*d", rand.IntN(200), 1+rand.IntN(20), rand.Int64N(1e18))
	}
	return []any{1 + rand.IntN(25), amount, shapesCurrencies[rand.IntN(len(shapesCurrencies))],
		[]string{"pending", "paid", "paid", "failed"}[rand.IntN(4)], fmt.Sprintf("payer%d@example.com", rand.IntN(1000)), fx}
}

// randomIn is a random instant in month ("2026-08"), to the microsecond.
func randomIn(month string) time.Time {
	start, _ := time.Parse("2006-01", month)
	end := start.AddDate(0, 1, 0)
	return start.Add(time.Duration(rand.Int64N(int64(end.Sub(start))/1000)) * time.Microsecond)
}

func (w *shapesWriter) insertPayment(ctx context.Context, shard int, month string) error {
	_, err := w.pools[shard].Exec(ctx, "INSERT INTO "+w.table("sh_payments")+` (account, amount, currency, status, payer, fx_rate, paid_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`, append(paymentValues(), randomIn(month))...)
	if err == nil {
		w.stats.payments.Add(1)
	}
	return err
}

func (w *shapesWriter) seedPayments(ctx context.Context, shard int) error {
	for _, m := range w.months[shard].open {
		for range 40 {
			if err := w.insertPayment(ctx, shard, m); err != nil {
				return err
			}
		}
	}
	return nil
}

// changePayment is one change of a payment, in a month that has its
// partition.
func (w *shapesWriter) changePayment(ctx context.Context, shard int) error {
	ms := w.months[shard]
	ms.mu.RLock()
	defer ms.mu.RUnlock()
	month := ms.open[rand.IntN(len(ms.open))]
	pool, tbl := w.pools[shard], w.table("sh_payments")
	pick := "(SELECT id FROM " + tbl + " WHERE %s ORDER BY random() LIMIT 1)"
	var err error
	var n int64
	switch op := rand.IntN(100); {
	case op < 35:
		return w.insertPayment(ctx, shard, month)
	case op < 50:
		err = w.update(ctx, pool, &n, "UPDATE "+tbl+" SET status = 'paid' WHERE id = "+fmt.Sprintf(pick, "status = 'pending'"))
		w.stats.paid.Add(n)
	case op < 62: // refunded whole, or in part
		err = w.update(ctx, pool, &n, "UPDATE "+tbl+" SET status = 'refunded', refunded = CASE WHEN random() < 0.5 THEN round(amount / 3, 2) END WHERE id = "+fmt.Sprintf(pick, "status = 'paid'"))
		w.stats.refunds.Add(n)
	case op < 72:
		err = w.update(ctx, pool, &n, "UPDATE "+tbl+" SET amount = $1, currency = $2 WHERE id = "+fmt.Sprintf(pick, "true"),
			paymentValues()[1], shapesCurrencies[rand.IntN(len(shapesCurrencies))])
		w.stats.amounts.Add(n)
	case op < 87: // the partition key: the row moves to another partition
		to := ms.open[rand.IntN(len(ms.open))]
		var id int64
		err = pool.QueryRow(ctx, "UPDATE "+tbl+" SET paid_at = $1 WHERE id = "+fmt.Sprintf(pick, "to_char(paid_at AT TIME ZONE 'UTC', 'YYYY-MM') <> $2")+" RETURNING id",
			randomIn(to), to).Scan(&id)
		if err == pgx.ErrNoRows {
			return nil
		}
		if err == nil {
			w.stats.moved.Add(1)
			w.mu.Lock()
			w.moved[shard] = append(w.moved[shard], id)
			w.mu.Unlock()
		}
	default:
		err = w.update(ctx, pool, &n, "DELETE FROM "+tbl+" WHERE id = "+fmt.Sprintf(pick, "true"))
		w.stats.deletes.Add(n)
	}
	return err
}

// update runs a statement and sets n to the rows it changed.
func (w *shapesWriter) update(ctx context.Context, pool *pgxpool.Pool, n *int64, sql string, args ...any) error {
	tag, err := pool.Exec(ctx, sql, args...)
	*n = tag.RowsAffected()
	return err
}

// movedIDs are the payments of shard whose partition key the traffic
// changed, newest first.
func (w *shapesWriter) movedIDs(shard int) []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	ids := slices.Clone(w.moved[shard])
	slices.Reverse(ids)
	return ids
}

// partition is the payments partition of month ("2026-09").
func (w *shapesWriter) partition(month string) string {
	return w.table("sh_payments") + "_" + strings.ReplaceAll(month, "-", "_")
}

// truncate truncates the partition of month on shard and returns the ids
// it held.
func (w *shapesWriter) truncate(ctx context.Context, shard int, month string) ([]int64, error) {
	ms := w.months[shard]
	ms.mu.Lock()
	defer ms.mu.Unlock()
	var ids []int64
	err := pgx.BeginFunc(ctx, w.pools[shard], func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "LOCK TABLE "+w.partition(month)); err != nil {
			return err
		}
		rows, _ := tx.Query(ctx, "SELECT id FROM "+w.partition(month))
		var err error
		if ids, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "TRUNCATE "+w.partition(month))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("truncate %s: %w", w.partition(month), err)
	}
	return ids, nil
}

// detach detaches the partition of month on shard (its month then takes no
// writes) and returns the ids it held.
func (w *shapesWriter) detach(ctx context.Context, shard int, month string) ([]int64, error) {
	ms := w.months[shard]
	ms.mu.Lock()
	defer ms.mu.Unlock()
	ms.open = slices.DeleteFunc(ms.open, func(m string) bool { return m == month })
	rows, _ := w.pools[shard].Query(ctx, "SELECT id FROM "+w.partition(month))
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, err
	}
	if _, err := w.pools[shard].Exec(ctx, fmt.Sprintf("ALTER TABLE %s DETACH PARTITION %s", w.table("sh_payments"), w.partition(month))); err != nil {
		return nil, fmt.Errorf("detach %s: %w", w.partition(month), err)
	}
	return ids, nil
}

// attach makes a table for month with payments in it and attaches it as
// the partition of month on shard.
func (w *shapesWriter) attach(ctx context.Context, shard int, month string) error {
	ms := w.months[shard]
	ms.mu.Lock()
	defer ms.mu.Unlock()
	part, root := w.partition(month), w.table("sh_payments")
	pool := w.pools[shard]
	if _, err := pool.Exec(ctx, fmt.Sprintf("CREATE TABLE %s (LIKE %s INCLUDING ALL)", part, root)); err != nil {
		return err
	}
	for range 30 {
		if _, err := pool.Exec(ctx, "INSERT INTO "+part+` (account, amount, currency, status, payer, fx_rate, paid_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, append(paymentValues(), randomIn(month))...); err != nil {
			return err
		}
	}
	start, _ := time.Parse("2006-01", month)
	if _, err := pool.Exec(ctx, fmt.Sprintf("ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')",
		root, part, start.Format(time.DateOnly), start.AddDate(0, 1, 0).Format(time.DateOnly))); err != nil {
		return fmt.Errorf("attach %s: %w", part, err)
	}
	ms.open = append(ms.open, month)
	return nil
}

// numericLimits are unconstrained numeric's values at its limits: the
// largest and smallest magnitudes it holds (131072 digits before the
// point, 16383 after), the special values, and scales kept as written.
func numericLimits() []string {
	largest := strings.Repeat("9", 131072) + "." + strings.Repeat("9", 16383)
	return []string{largest, "-" + largest, "0." + strings.Repeat("0", 16382) + "1", "NaN", "Infinity", "-Infinity",
		"0", "-0.000", "1.50", "123456789012345678901234567890123456789012.5"}
}

// qtyLimits are the values at the limits of the qty column's configured
// Decimal(38, 12): 26 integer and 12 fractional digits.
var qtyLimits = []string{"99999999999999999999999999.999999999999", "-99999999999999999999999999.999999999999",
	"0.000000000001", "0", "1.5", "1.500000000000000000", "-0.0000000000000000"}

var sidesValues = []any{nil, "{}", `{buy,sell}`, `{"it's \"both\"",NULL,buy}`}

func (w *shapesWriter) insertQuote(ctx context.Context, shard int, edge bool) error {
	price := fmt.Sprintf("%d.%0*d", rand.Int64N(1e12), rand.IntN(30), rand.Int64N(1e15))
	qty := fmt.Sprintf("%d.%03d", rand.IntN(100000), rand.IntN(1000))
	if edge {
		lim := numericLimits()
		price, qty = lim[rand.IntN(len(lim))], qtyLimits[rand.IntN(len(qtyLimits))]
	}
	_, err := w.pools[shard].Exec(ctx, "INSERT INTO "+w.table("sh_quotes")+` (side, sides, state, contact, cap, price, qty)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		[]string{"buy", "sell", `it's "both"`}[rand.IntN(3)], sidesValues[rand.IntN(len(sidesValues))],
		[]any{nil, "pending", "paid"}[rand.IntN(3)], fmt.Sprintf("desk%d@example.com", rand.IntN(50)),
		[]any{nil, "0.00", "999999999999.99", "12.30"}[rand.IntN(4)], price, qty)
	if err == nil {
		w.stats.quotes.Add(1)
		if edge {
			w.stats.quoteEdges.Add(1)
		}
	}
	return err
}

func (w *shapesWriter) seedQuotes(ctx context.Context, shard int) error {
	for _, v := range numericLimits() { // every limit, in the initial copy
		if _, err := w.pools[shard].Exec(ctx, "INSERT INTO "+w.table("sh_quotes")+" (side, price) VALUES ('sell', $1)", v); err != nil {
			return err
		}
	}
	for _, v := range qtyLimits {
		if _, err := w.pools[shard].Exec(ctx, "INSERT INTO "+w.table("sh_quotes")+" (side, qty) VALUES ('buy', $1)", v); err != nil {
			return err
		}
	}
	for i := range 30 {
		if err := w.insertQuote(ctx, shard, i%3 == 0); err != nil {
			return err
		}
	}
	return nil
}

// changeQuote is one change of a quote: new ones (some at the limits),
// edits of the enums and domains that leave the numerics unchanged (the
// largest are stored out of line), edits of the numerics, deletes.
func (w *shapesWriter) changeQuote(ctx context.Context, shard int) error {
	pool, tbl := w.pools[shard], w.table("sh_quotes")
	pick := "(SELECT id FROM " + tbl + " ORDER BY random() LIMIT 1)"
	var err error
	switch op := rand.IntN(100); {
	case op < 40:
		return w.insertQuote(ctx, shard, rand.IntN(4) == 0)
	case op < 65:
		_, err = pool.Exec(ctx, "UPDATE "+tbl+" SET state = $1, side = $2, contact = $3 WHERE id = "+pick,
			[]any{nil, "paid", "refunded", "failed"}[rand.IntN(4)], []string{"buy", "sell", `it's "both"`}[rand.IntN(3)],
			fmt.Sprintf("desk%d@example.com", rand.IntN(50)))
	case op < 85:
		lim := numericLimits()
		_, err = pool.Exec(ctx, "UPDATE "+tbl+" SET price = $1, qty = $2 WHERE id = "+pick,
			lim[rand.IntN(len(lim))], qtyLimits[rand.IntN(len(qtyLimits))])
	default:
		_, err = pool.Exec(ctx, "DELETE FROM "+tbl+" WHERE id = "+pick)
	}
	if err == nil {
		w.stats.quoteEdits.Add(1)
	}
	return err
}

// shapesTenants are a shard's tenants of sh_lines: two per shard, with the
// same line numbers, so only the whole key (tenant_id, line_no) tells
// their rows apart; one name holds a comma, which the key text escapes.
func shapesTenants(shard int) []string {
	return []string{fmt.Sprintf("t%d", shard), fmt.Sprintf("acme, t%d", shard)}
}

// seedLines writes lines 1..15 of both tenants of shard.
func (w *shapesWriter) seedLines(ctx context.Context, shard int) error {
	for _, tenant := range shapesTenants(shard) {
		for n := 1; n <= 15; n++ {
			if _, err := w.pools[shard].Exec(ctx, "INSERT INTO "+w.table("sh_lines")+" (tenant_id, line_no, note, qty) VALUES ($1, $2, $3, $4)",
				tenant, n, fmt.Sprintf("line %d of %s", n, tenant), fmt.Sprintf("%d.%03d", n, rand.IntN(1000))); err != nil {
				return err
			}
			w.stats.lines.Add(1)
		}
	}
	return nil
}

// changeLine is one change of a composite-keyed line: a new line (the
// tenant's next number), an edit of its note, a change of its key (the
// line number negated: a delete of the old key and an insert of the new
// one downstream), or a delete. One writer per shard: the next number
// cannot race.
func (w *shapesWriter) changeLine(ctx context.Context, shard int) error {
	tbl := w.table("sh_lines")
	tenant := shapesTenants(shard)[rand.IntN(2)]
	pick := "(tenant_id, line_no) = (SELECT tenant_id, line_no FROM " + tbl + " WHERE tenant_id = $1 ORDER BY random() LIMIT 1)"
	var err error
	switch rand.IntN(5) {
	case 0, 1:
		_, err = w.pools[shard].Exec(ctx, "INSERT INTO "+tbl+" (tenant_id, line_no, note, qty) SELECT $1, coalesce(max(abs(line_no)), 0) + 1, 'new', 1.5 FROM "+tbl+" WHERE tenant_id = $1", tenant)
		w.stats.lines.Add(1)
	case 2:
		var n int64
		err = w.update(ctx, w.pools[shard], &n, "UPDATE "+tbl+" SET note = note || '+' WHERE "+pick, tenant)
		w.stats.lineEdits.Add(n)
	case 3:
		var n int64
		err = w.update(ctx, w.pools[shard], &n, "UPDATE "+tbl+" SET line_no = -line_no WHERE "+pick+" AND line_no > 0", tenant)
		w.stats.lineKeyChanges.Add(n)
	default:
		var n int64
		err = w.update(ctx, w.pools[shard], &n, "DELETE FROM "+tbl+" WHERE "+pick, tenant)
		w.stats.lineDeletes.Add(n)
	}
	return err
}
