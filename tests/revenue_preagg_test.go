package tests

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/loader"
	"github.com/tributary/tributary/internal/preagg"
	"github.com/tributary/tributary/internal/query"
)

// revOrdersUUIDDDL is revOrdersDDL keyed by a random uuid.
const revOrdersUUIDDDL = `CREATE TABLE %s (
	id            uuid          PRIMARY KEY DEFAULT gen_random_uuid(),
	account_id    bigint        NOT NULL,
	total         numeric(12,2) NOT NULL,
	currency_code text          NOT NULL,
	state         text          NOT NULL,
	placed_at     timestamptz   NOT NULL,
	refunded      numeric(12,2)
)`

// revenueConfigJSON is setupRevenuePipeline's configuration with the id
// layout given.
const revenueConfigJSON = `{"topic_prefix":"e2e_%%[1]s.",
	"tables":[{"name":%%[2]q,"id_column":"id","id_layout":%q,"shard_key":"account_id"}],
	"revenue":{"table":%%[2]q,"amount_column":"total","currency_column":"currency_code","time_column":"placed_at",
	  "status_column":"state","workspace_column":"account_id","count_statuses":["paid"],"refund_statuses":["refunded"],
	  "refunded_amount_column":"refunded"}}`

// TestRevenuePreaggregateNeverStale: the aggregator runs one round, then is
// behind for good (the test never runs another); changes keep arriving.
// Every whole-day answer must still come from the pre-aggregates and equal
// the shards to the cent at the watermarks it reports — read right after
// the writes with after=, and without it — for bigint and uuid ids.
func TestRevenuePreaggregateNeverStale(t *testing.T) {
	for _, c := range []struct{ name, layout, ddl string }{
		{"bigint", "seed000", revOrdersDDL},
		{"uuid", "uuidv4", revOrdersUUIDDDL},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := setupPipelineWith(t, []int{0, 1}, nil, true, "orders_", fmt.Sprintf(revenueConfigJSON, c.layout), c.ddl)
			cfg := p.tables.Revenue
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			runCtx, runCancel := context.WithCancel(context.Background())
			defer runCancel()
			for _, s := range p.shards {
				p.startReader(runCtx, s)
			}
			// A loader that marks blocks of 2^30 ids (or of a uuid's first
			// 64 bits: the rows span many and a change dirties few) and
			// does not aggregate: the test runs the rounds.
			const bits = 30
			reg := p.startMeteredLoader(runCtx, "l1", func(c *loader.Config) { c.PreaggBlockBits = bits })
			tbl := pgx.Identifier{p.table()}.Sanitize()
			rng := rand.New(rand.NewPCG(2026, 12))
			ids := map[int][]string{}
			for _, s := range p.shards {
				ids[s] = p.insertRevenueOrdersText(ctx, s, revGenOrders(rng, 300))
			}
			p.waitRevenueFresh(ctx, p.revenueWALPositions(ctx))

			// One round.
			agg := preagg.New(preagg.Config{Revenue: cfg, IDColumn: "id", ShardKey: p.tables.Tables[0].ShardKey,
				Topic: p.topic(), BlockBits: bits}, p.store, p.log, prometheus.NewRegistry())
			outcome, err := agg.Round(ctx)
			if err != nil || outcome != "full" {
				t.Fatalf("first round: %s, %v; want full", outcome, err)
			}
			p.preagg = true
			p.waitRevenueFresh(ctx, p.revenueWALPositions(ctx)) // until the API's cached state is the round's
			p.compareRevenue(ctx, cfg, revFrom, revTo, []string{"day"}, nil, nil, nil)

			// Changes after the round: updates of state, amount, time and
			// currency, partial refunds, deletes, new rows.
			for _, s := range p.shards {
				own := ids[s]
				p.revenueTxText(ctx, s, []string{
					"UPDATE " + tbl + " SET state = 'paid' WHERE id::text = ANY($1)",
					"UPDATE " + tbl + " SET state = 'refunded' WHERE id::text = ANY($1)",
					"UPDATE " + tbl + " SET total = 9999999999.99 WHERE id::text = ANY($1)",
					"UPDATE " + tbl + " SET placed_at = placed_at + interval '31 days' WHERE id::text = ANY($1)",
					"UPDATE " + tbl + " SET currency_code = 'EUR' WHERE id::text = ANY($1)",
					"UPDATE " + tbl + " SET state = 'paid', refunded = round(total / 3, 2) WHERE id::text = ANY($1)",
					"DELETE FROM " + tbl + " WHERE id::text = ANY($1)",
				}, own[20:40], own[30:45], own[50:60], own[60:80], own[80:90], own[90:100], own[100:130])
				ids[s] = append(ids[s], p.insertRevenueOrdersText(ctx, s, revGenOrders(rng, 50))...)
			}
			pos := p.revenueWALPositions(ctx)
			st, err := query.New(p.store.Conn(), p.chDB).ReadPreaggState(ctx, cfg.Table)
			if err != nil || st == nil {
				t.Fatalf("pre-aggregate state: %+v, %v", st, err)
			}
			for _, f := range st.Shards {
				if f.LSN >= pos[f.Shard] {
					t.Fatalf("the aggregator is not behind on shard %d (%s >= %s): the test would prove nothing", f.Shard, f.LSN, pos[f.Shard])
				}
			}
			before := p.revenueOracle(ctx, cfg, revFrom, revTo, []string{"day", "currency"}, nil, nil, nil)

			// Right after the writes: after= waits for the watermarks, and
			// the answer must hold every write.
			for s, lsn := range pos {
				p.revAfter = append(p.revAfter, fmt.Sprintf("%d:%s", s, lsn))
			}
			written := time.Now()
			for i, groups := range [][]string{{"day"}, {"month", "shard"}, {"week"}, nil} {
				p.compareRevenue(ctx, cfg, revFrom, revTo, groups, nil, nil, nil)
				if i == 0 {
					t.Logf("the writes visible through after= %s after the position was read", time.Since(written).Round(time.Millisecond))
				}
			}
			p.revAfter = nil
			logFreshness(t, reg)
			// Without after=, once the freshness covers the writes.
			p.waitRevenueFresh(ctx, pos)
			p.compareRevenue(ctx, cfg, revFrom, revTo, []string{"day", "shard"}, nil, []string{"EUR", "USD"}, nil)
			if changed := revChanged(p.revenueOracle(ctx, cfg, revFrom, revTo, []string{"day", "currency"}, nil, nil, nil), before); changed > 0 {
				t.Fatalf("the shards changed by %d groups while comparing", changed)
			}
		})
	}
}

// logFreshness logs where the loader's watermarks spent their time
// (tributary_loader_freshness_seconds by stage, and the commit-to-watermark
// delay): the mean, and the bucket bound the slowest fell under.
func logFreshness(t *testing.T, reg *prometheus.Registry) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, mf := range mfs {
		if mf.GetName() != "tributary_loader_freshness_seconds" && mf.GetName() != "tributary_loader_watermark_delay_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			if h.GetSampleCount() == 0 {
				continue
			}
			name := "delay"
			for _, l := range m.GetLabel() {
				if l.GetName() == "stage" {
					name = l.GetValue()
				}
			}
			slowest := "+Inf"
			for _, b := range h.GetBucket() {
				if b.GetCumulativeCount() == h.GetSampleCount() {
					slowest = fmt.Sprintf("%gs", b.GetUpperBound())
					break
				}
			}
			parts = append(parts, fmt.Sprintf("%s mean %.3fs max <= %s", name,
				h.GetSampleSum()/float64(h.GetSampleCount()), slowest))
		}
	}
	t.Logf("loader freshness over %s", strings.Join(parts, "; "))
}

// revChanged counts the groups of a that differ from b.
func revChanged(a, b map[string]revMoney) int {
	n := 0
	for k, m := range a {
		if !m.equal(b[k]) {
			n++
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			n++
		}
	}
	return n
}

// insertRevenueOrdersText is insertRevenueOrders for ids of any type,
// returned as text.
func (p *pipeline) insertRevenueOrdersText(ctx context.Context, shard int, orders []revOrder) []string {
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
	ids := make([]string, len(orders))
	sql := fmt.Sprintf(`INSERT INTO %s (account_id, total, currency_code, state, placed_at)
		VALUES ($1, $2::numeric, $3, $4, $5) RETURNING id::text`, pgx.Identifier{p.table()}.Sanitize())
	for i, o := range orders {
		if err := tx.QueryRow(ctx, sql, o.account, o.total, o.currency, o.state, o.placed).Scan(&ids[i]); err != nil {
			p.t.Fatalf("insert on shard %d: %v", shard, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		p.t.Fatal(err)
	}
	return ids
}

// revenueTxText runs each statement with its text ids in one transaction.
func (p *pipeline) revenueTxText(ctx context.Context, shard int, stmts []string, args ...[]string) {
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
