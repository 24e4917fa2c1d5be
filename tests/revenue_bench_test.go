package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/loader"
)

// TestRevenueSecondsToExactBench is a measurement, not a check: it runs
// only with TRIBUTARY_BENCH_REVENUE_LAG=1 and prints numbers. A burst of
// order inserts and updates on two shards for TRIBUTARY_BENCH_BURST
// (default 10s), with the loader's revenue aggregator at
// TRIBUTARY_BENCH_AGG_INTERVAL (default 5s, the loader's default; 0: off),
// over 2,000 orders per shard plus TRIBUTARY_BENCH_ROWS more in bulk (a
// burst of at most TRIBUTARY_BENCH_TXNS transactions per shard, for equal
// work when comparing CPU);
// after the burst stops it polls GET /v1/revenue (whole days, by day and
// currency) every 250 ms and prints the seconds until the freshness covers
// the burst and until the answer equals the scatter-gather over the
// shards, and the CPU seconds ClickHouse and this process (readers,
// loader, API) spent from the burst's start to 30 s after its end.
func TestRevenueSecondsToExactBench(t *testing.T) {
	if os.Getenv("TRIBUTARY_BENCH_REVENUE_LAG") != "1" {
		t.Skip("a measurement: set TRIBUTARY_BENCH_REVENUE_LAG=1")
	}
	burst := benchDuration(t, "TRIBUTARY_BENCH_BURST", 10*time.Second)
	interval := benchDuration(t, "TRIBUTARY_BENCH_AGG_INTERVAL", 5*time.Second)
	p := setupRevenuePipeline(t, []int{0, 1}, true)
	cfg := p.tables.Revenue
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	runCtx, runCancel := context.WithCancel(context.Background())
	defer runCancel()
	for _, s := range p.shards {
		p.startReader(runCtx, s)
	}
	p.startMeteredLoader(runCtx, "l1", func(c *loader.Config) {
		c.RevenueAggregator, c.PreaggInterval = interval > 0, interval
	})
	rng := rand.New(rand.NewPCG(1, 2))
	ids := map[int][]int64{}
	for _, s := range p.shards {
		ids[s] = p.insertRevenueOrders(ctx, s, revGenOrders(rng, 2000))
		if n := os.Getenv("TRIBUTARY_BENCH_ROWS"); n != "" { // more rows, in bulk
			p.exec(ctx, s, fmt.Sprintf(`INSERT INTO %s (account_id, total, currency_code, state, placed_at)
				SELECT 1 + i %% 6, (i %% 100000) / 100.0, (ARRAY['EUR','USD','JPY'])[1 + i %% 3], (ARRAY['issued','paid','paid','refunded'])[1 + i %% 4],
				timestamptz '2026-09-26' + (i %% 100) * interval '1 day' + (i %% 86400) * interval '1 second'
				FROM generate_series(1, %s) AS i`, pgx.Identifier{p.table()}.Sanitize(), n))
		}
	}
	p.preagg = interval > 0
	p.waitRevenueFresh(ctx, p.revenueWALPositions(ctx))

	chPid := benchCHPid(t)
	ch0, self0 := benchCPU(t, chPid), benchCPU(t, os.Getpid())
	start := time.Now()
	rows, err := p.revenueBurst(ctx, burst, ids)
	if err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	pos := p.revenueWALPositions(ctx)
	from, to := revFrom.AddDate(0, 0, -10), revTo.AddDate(0, 0, 10)
	want := p.revenueOracle(ctx, cfg, from, to, []string{"day", "currency"}, nil, nil, nil)
	var fresh, exact time.Duration
	var source string
	diffAt := map[int]int{} // seconds after the burst -> groups different
	for time.Since(stopped) < 3*time.Minute && exact == 0 {
		if err := p.failed(); err != nil {
			t.Fatal(err)
		}
		if fresh == 0 && p.shardsCover(ctx, pos) {
			fresh = time.Since(stopped)
		}
		got, src := p.revenueByDay(ctx, from, to)
		d := revChanged(got, want)
		if s := int(time.Since(stopped).Seconds()); s%5 == 0 {
			if _, ok := diffAt[s]; !ok {
				diffAt[s] = d
			}
		}
		if d == 0 && fresh > 0 {
			exact, source = time.Since(stopped), src
		}
		time.Sleep(250 * time.Millisecond)
	}
	if wait := 30*time.Second - time.Since(stopped); wait > 0 {
		time.Sleep(wait)
	}
	chCPU, selfCPU := benchCPU(t, chPid)-ch0, benchCPU(t, os.Getpid())-self0
	t.Logf("aggregator interval %s: burst %s, %d row changes over 2 shards; after the burst: freshness covers it at %.1fs, "+
		"revenue equals the shards at %.1fs (source %s; groups different at 0,5,10,15,... s: %v); "+
		"CPU from burst start to 30 s after its end (%.0fs): ClickHouse %.1fs, test process %.1fs",
		interval, burst, rows, fresh.Seconds(), exact.Seconds(), source, diffAt, time.Since(start).Seconds(), chCPU, selfCPU)
	if exact == 0 {
		t.Logf("revenue never equalled the shards within 3 minutes")
	}
}

func benchDuration(t *testing.T, env string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	if v == "0" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", env, v, err)
	}
	return d
}

// revenueBurst writes on every shard at once for d: transactions of 50 new
// orders and 20 updates of earlier ones (state, amount). It returns the
// row changes written.
func (p *pipeline) revenueBurst(ctx context.Context, d time.Duration, ids map[int][]int64) (int, error) {
	var mu sync.Mutex
	var firstErr error
	total := 0
	var wg sync.WaitGroup
	tbl := pgx.Identifier{p.table()}.Sanitize()
	for _, s := range p.shards {
		wg.Add(1)
		go func(s int, own []int64) {
			defer wg.Done()
			err := func() error {
				conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[s])
				if err != nil {
					return err
				}
				defer conn.Close(ctx)
				rng := rand.New(rand.NewPCG(uint64(s), 9))
				deadline := time.Now().Add(d)
				txns, _ := strconv.Atoi(os.Getenv("TRIBUTARY_BENCH_TXNS")) // 0: as many as d allows
				for i := 0; time.Now().Before(deadline) && (txns == 0 || i < txns); i++ {
					tx, err := conn.Begin(ctx)
					if err != nil {
						return err
					}
					for _, o := range revGenOrders(rng, 50) {
						if _, err := tx.Exec(ctx, "INSERT INTO "+tbl+" (account_id, total, currency_code, state, placed_at) VALUES ($1, $2::numeric, $3, $4, $5)",
							o.account, o.total, o.currency, o.state, o.placed); err != nil {
							return err
						}
					}
					upd := make([]int64, 20)
					for i := range upd {
						upd[i] = own[rng.IntN(len(own))]
					}
					if _, err := tx.Exec(ctx, "UPDATE "+tbl+" SET state = CASE WHEN state = 'paid' THEN 'refunded' ELSE 'paid' END, total = CASE WHEN total < 1000000 THEN total + 1 ELSE total - 1 END WHERE id = ANY($1)", upd); err != nil {
						return err
					}
					if err := tx.Commit(ctx); err != nil {
						return err
					}
					mu.Lock()
					total += 70
					mu.Unlock()
				}
				return nil
			}()
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("burst on shard %d: %w", s, err)
				}
				mu.Unlock()
			}
		}(s, ids[s])
	}
	wg.Wait()
	return total, firstErr
}

// shardsCover says whether GET /v1/shards reports every shard complete at
// or past pos.
func (p *pipeline) shardsCover(ctx context.Context, pos map[int]envelope.LSN) bool {
	req, _ := http.NewRequestWithContext(ctx, "GET", p.api.URL+"/v1/shards", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var a struct {
		Shards []struct {
			Shard     int    `json:"shard"`
			CommitLSN string `json:"commit_lsn"`
			Complete  bool   `json:"complete"`
		} `json:"shards"`
	}
	if json.NewDecoder(resp.Body).Decode(&a) != nil {
		return false
	}
	covered := 0
	for _, f := range a.Shards {
		lsn, err := envelope.ParseLSN(f.CommitLSN)
		if want, ok := pos[f.Shard]; ok && err == nil && f.Complete && lsn >= want {
			covered++
		}
	}
	return covered == len(pos)
}

// revenueByDay is GET /v1/revenue by day and currency, keyed as the oracle
// keys it, and its source.
func (p *pipeline) revenueByDay(ctx context.Context, from, to time.Time) (map[string]revMoney, string) {
	status, body := p.getRevenue(ctx, url.Values{"from": {from.Format(time.DateOnly)}, "to": {to.Format(time.DateOnly)}, "group_by": {"day"}}, "")
	var a revenueAnswer
	if status != http.StatusOK || json.Unmarshal(body, &a) != nil {
		return nil, ""
	}
	out := map[string]revMoney{}
	for _, r := range a.Rows {
		m := revRowMoney(p.t, r["gross"].(string), r["refunds"].(string), r["net"].(string), int64(r["invoices"].(float64)))
		out[fmt.Sprint(r["day"])+"|"+fmt.Sprint(r["currency"])] = m
	}
	return out, a.Source
}

// benchCHPid is the stack's ClickHouse server.
func benchCHPid(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(filepath.Dir(os.Getenv("TRIBUTARY_STACK_ENV")), "clickhouse", "clickhouse-server.pid"))
	if err != nil {
		t.Fatalf("ClickHouse pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// benchCPU is a process's user+system CPU seconds so far.
func benchCPU(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}
