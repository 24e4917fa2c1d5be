// Package latency is `bench latency`: how long from a COMMIT on a shard until the API answers
// with the row, measured against a running pipeline (make demo).
//
// Each sample inserts one document on a random shard (a workspace the ring
// map places there), commits, reads pg_current_wal_lsn() in the same
// session, and from the moment COMMIT returned measures, concurrently:
//
//   - read-your-writes: one GET /v1/documents/{id}?after=S:LSN&wait=…, until
//     its 200 carrying the row (a 503 is a timeout; a 200 or 404 without the
//     row is a broken promise, counted as "missing");
//   - plain visibility: GET /v1/documents/{id} without after= every --poll
//     until a 200 carries the row.
//
// Samples start at --rate whatever the earlier ones are doing (open loop),
// so a slow pipeline shows up as latency, not as a lower sample rate.
// Failures are counted and listed, never dropped: percentiles are over the
// successful samples and the table says how many those are.
//
// With --kafka-brokers and --clickhouse-addr (stack.env sets both) it also
// measures the physical floor in the same run (floor.go): a Kafka
// produce acknowledgement plus a one-row ClickHouse insert, at the same
// rate, and prints the ratios read-your-writes p99 / visible p99 and
// visible p99 / floor p99.
//
// --background-rate adds loadgen's traffic in the same process, in row
// changes/s; with --rows-per-op N > 1 it is loadgen's bulk mode (each
// operation one transaction changing N rows, small bodies), so that the
// background can reach rates the shards could not take one row per
// transaction.
package latency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tributary/tributary/bench/internal/benchwork"
	"github.com/tributary/tributary/internal/flagenv"
	"github.com/tributary/tributary/internal/loadgen"
	"github.com/tributary/tributary/internal/ring"
)

const usage = `bench latency — commit on a shard -> visible through the API (a running pipeline: make demo).

The shards are the fleet file's (--fleet, $TRIBUTARY_FLEET: stack.env names
the local stack's); a bearer token, if the API
requires one, from $TRIBUTARY_API_TOKEN. Latencies are from COMMIT returning
to the API's 200 carrying the row.

Example:
  set -a; . .stack/stack.env; set +a
  flock /tmp/tributary-bench.lock go run ./bench latency --samples 300 --rate 10 --background-rate 200
  flock /tmp/tributary-bench.lock go run ./bench latency --poll 0 --background-rate 20000 --rows-per-op 100`

// config is the latency benchmark's configuration.
type config struct {
	demo          benchwork.Demo // where the demo's processes listen: the defaults
	apiURL        string
	token         string
	fleetFile     string
	dsns          map[int]string // by shard number
	ringFile      string
	workspaces    int
	samples       int
	rate          int
	wait          time.Duration // wait= of the read-your-writes request
	timeout       time.Duration // give up plain visibility after this long
	poll          time.Duration
	bgRate        int // row changes/s
	rowsPerOp     int
	bulkBody      int
	bgWorkers     int
	warmup        time.Duration
	loaderMetrics string
	readerMetrics string
	jsonOut       string
	// The physical floor's Kafka and ClickHouse (either empty: not measured).
	kafkaBrokers, chAddr, chUser, chPassword string
}

func (c *config) validate() error {
	switch {
	case c.samples < 1 || c.rate < 1:
		return errors.New("--samples and --rate must be >= 1")
	case c.workspaces < 1:
		return errors.New("--workspaces must be >= 1")
	case c.wait <= 0 || c.wait > 30*time.Second:
		return errors.New("--wait must be in (0, 30s] (the API's bound)")
	case c.timeout <= 0 || c.poll < 0:
		return errors.New("--timeout must be > 0 and --poll >= 0")
	case c.bgRate < 0:
		return errors.New("--background-rate must be >= 0")
	case c.rowsPerOp < 1 || c.bulkBody < 0 || c.bgWorkers < 1:
		return errors.New("--rows-per-op and --background-workers must be >= 1, --bulk-body-bytes >= 0")
	}
	u, err := url.Parse(c.apiURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--api %q is not an http(s) URL", c.apiURL)
	}
	c.apiURL = strings.TrimRight(c.apiURL, "/")
	if c.dsns, err = benchwork.ShardDSNs(c.fleetFile); err != nil {
		return err
	}
	if c.readerMetrics == "" {
		c.readerMetrics = strings.Join(c.demo.ReaderMetrics(c.dsns), ",")
	}
	return nil
}

// sample is one measured write.
type sample struct {
	Shard     int    `json:"shard"`
	Workspace int64  `json:"workspace"`
	ID        int64  `json:"id"`
	LSN       string `json:"lsn"`
	// CommitMS is the INSERT + COMMIT round trip, before the clock starts.
	CommitMS float64 `json:"commit_ms"`
	// RYW* and Visible*: latency from COMMIT returning, and the outcome
	// (ok, timeout, missing, error).
	RYWMS          float64 `json:"ryw_ms"`
	RYWOutcome     string  `json:"ryw_outcome"`
	RYWError       string  `json:"ryw_error,omitempty"`
	VisibleMS      float64 `json:"visible_ms"`
	VisibleOutcome string  `json:"visible_outcome"`
	VisibleError   string  `json:"visible_error,omitempty"`
	VisiblePolls   int     `json:"visible_polls"`
	Err            string  `json:"write_error,omitempty"`
}

// summary is one row of the table.
type summary struct {
	Name   string         `json:"name"`
	N      int            `json:"n"`
	OK     int            `json:"ok"`
	Fails  map[string]int `json:"failures"`
	P50MS  float64        `json:"p50_ms"`
	P90MS  float64        `json:"p90_ms"`
	P99MS  float64        `json:"p99_ms"`
	MaxMS  float64        `json:"max_ms"`
	MeanMS float64        `json:"mean_ms"`
}

// bench holds the connections of one run.
type bench struct {
	cfg    config
	shards []int                 // the fleet's shard numbers, ascending
	pools  map[int]*pgxpool.Pool // by shard number
	owned  map[int][]int64       // by shard number: workspaces the ring map places there
	client *http.Client
}

// Run is `bench latency`: args are its flags.
func Run(ctx context.Context, args []string) error {
	var c config
	var err error
	if c.demo, err = benchwork.DemoOf(os.Getenv); err != nil {
		return err
	}
	fs := flagenv.New("bench latency", usage)
	fs.String(&c.apiURL, "api", "TRIBUTARY_API_URL", c.demo.APIURL, "the running API (default: the demo's on this stack, 8080 + $TRIBUTARY_PORT_OFFSET)")
	fs.Secret(&c.token, "TRIBUTARY_API_TOKEN")
	fs.String(&c.fleetFile, "fleet", "TRIBUTARY_FLEET", "", "fleet file: the shards to write to (required; the stack's is in stack.env)")
	fs.String(&c.ringFile, "ring-map", "TRIBUTARY_RING_MAP", "", "ring map JSON (default: generated, the fleet's shards x 64 vnodes — equal to deploy/local/ringmap.json for shards 0..3)")
	fs.Int(&c.workspaces, "workspaces", "", 50, "workspaces 1..n to place documents in (as loadgen)")
	fs.Int(&c.samples, "samples", "", 300, "writes to measure")
	fs.Int(&c.rate, "rate", "", 10, "samples started per second (open loop)")
	fs.Duration(&c.wait, "wait", "", 5*time.Second, "wait= of the read-your-writes request (503 after it: a timeout)")
	fs.Duration(&c.timeout, "timeout", "", 10*time.Second, "give up polling for plain visibility after this long (a timeout)")
	fs.Duration(&c.poll, "poll", "", 5*time.Millisecond, "pause between plain-visibility polls (0: measure read-your-writes alone, without the polling's load)")
	fs.Int(&c.bgRate, "background-rate", "", 0, "also run loadgen's traffic in this process at this many row changes/s (operations/s x --rows-per-op; 0: none)")
	fs.Int(&c.rowsPerOp, "rows-per-op", "", 1, "background: rows changed by each operation (one transaction); > 1: loadgen's bulk mode")
	fs.Int(&c.bulkBody, "bulk-body-bytes", "", 200, "background with --rows-per-op > 1: size of an inserted document's body")
	fs.Int(&c.bgWorkers, "background-workers", "", 16, "background: loadgen's concurrent writers")
	fs.Duration(&c.warmup, "warmup", "", 3*time.Second, "background traffic before the first sample")
	fs.String(&c.loaderMetrics, "loader-metrics", "", c.demo.LoaderMetrics, "loader /metrics address, for stage times (default: the demo's, 9101 + $TRIBUTARY_PORT_OFFSET; empty: skip)")
	fs.String(&c.readerMetrics, "reader-metrics", "", "", "readers' /metrics addresses, comma-separated (default demo.sh's 127.0.0.1:9110 + $TRIBUTARY_PORT_OFFSET + shard number)")
	fs.String(&c.jsonOut, "json", "", "", "also write the results (with every sample) as JSON to this file")
	fs.String(&c.kafkaBrokers, "kafka-brokers", "TRIBUTARY_KAFKA_BROKERS", "", "the pipeline's Kafka, for the physical floor (a produce ack; empty: no floor)")
	fs.String(&c.chAddr, "clickhouse-addr", "TRIBUTARY_CLICKHOUSE_ADDR", "", "the pipeline's ClickHouse (native), for the physical floor (a one-row insert; empty: no floor)")
	fs.String(&c.chUser, "clickhouse-user", "TRIBUTARY_CLICKHOUSE_USER", "default", "ClickHouse user for the floor's table (created and dropped in the default database)")
	fs.Secret(&c.chPassword, "TRIBUTARY_CLICKHOUSE_PASSWORD")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := c.validate(); err != nil {
		return err
	}
	b, err := newBench(ctx, c)
	if err != nil {
		return err
	}
	defer b.close()
	return b.run(ctx)
}

func newBench(ctx context.Context, c config) (*bench, error) {
	b := &bench{cfg: c, shards: slices.Sorted(maps.Keys(c.dsns)), pools: map[int]*pgxpool.Pool{}, owned: map[int][]int64{},
		client: &http.Client{Timeout: c.wait + 10*time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
	m, err := b.ringMap()
	if err != nil {
		return nil, err
	}
	// Workspaces 1..n as loadgen uses them; further ones only for a shard
	// that owns none of those.
	ownsNone := func() bool {
		return slices.ContainsFunc(b.shards, func(s int) bool { return len(b.owned[s]) == 0 })
	}
	for ws := int64(1); ws <= int64(c.workspaces) || ownsNone(); ws++ {
		s := m.OwnerInt64(ws)
		if _, ok := c.dsns[s]; !ok {
			return nil, fmt.Errorf("ring map places workspace %d on shard %d, which is not in the fleet (shards %v)", ws, s, b.shards)
		}
		if ws <= int64(c.workspaces) || len(b.owned[s]) == 0 {
			b.owned[s] = append(b.owned[s], ws)
		}
		if ws > 100_000 {
			return nil, errors.New("the ring map leaves a shard without any workspace up to 100000")
		}
	}
	for _, i := range b.shards {
		pc, err := pgxpool.ParseConfig(c.dsns[i])
		if err != nil {
			b.close()
			return nil, fmt.Errorf("shard %d dsn: %w", i, err)
		}
		pc.MaxConns = 16
		p, err := pgxpool.NewWithConfig(ctx, pc)
		if err == nil {
			err = p.Ping(ctx)
		}
		if err != nil {
			b.close()
			return nil, fmt.Errorf("shard %d: %w", i, err)
		}
		b.pools[i] = p
	}
	return b, nil
}

func (b *bench) close() {
	for _, p := range b.pools {
		if p != nil {
			p.Close()
		}
	}
}

func (b *bench) run(ctx context.Context) error {
	c := b.cfg
	resp, err := b.get(ctx, c.apiURL+"/readyz")
	if err != nil {
		return fmt.Errorf("api not reachable (is the demo running? make demo): %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("api %s/readyz: %s", c.apiURL, resp.Status)
	}

	// Background traffic, in this process, on its own pools.
	var bg *loadgen.Generator
	bgDone := make(chan error, 1)
	bgCtx, stopBG := context.WithCancel(ctx)
	defer stopBG()
	if c.bgRate > 0 {
		m, err := b.ringMap()
		if err != nil {
			return err
		}
		bg, err = loadgen.New(ctx, loadgen.Config{DSNs: c.dsns, Ring: m, Rate: float64(c.bgRate) / float64(c.rowsPerOp),
			Workspaces: c.workspaces, BodyBytes: 8192, Workers: c.bgWorkers, RowsPerOp: c.rowsPerOp, BulkBodyBytes: c.bulkBody},
			slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
		if err != nil {
			return fmt.Errorf("background traffic: %w", err)
		}
		defer bg.Close()
		go func() { bgDone <- bg.Run(bgCtx) }()
		select {
		case <-time.After(c.warmup):
		case <-ctx.Done():
			return ctx.Err()
		}
	}

	var floor *floor
	if c.kafkaBrokers != "" && c.chAddr != "" {
		if floor, err = newFloor(ctx, c.kafkaBrokers, c.chAddr, c.chUser, c.chPassword); err != nil {
			return err
		}
		defer floor.close(ctx)
	}

	load0 := benchwork.LoadAvg()
	before := b.scrape(ctx)
	fmt.Printf("latency: %d samples at %d/s over %d shards, api %s, background %d changes/s (%d rows per operation); load average %s\n",
		c.samples, c.rate, len(c.dsns), c.apiURL, c.bgRate, c.rowsPerOp, load0)
	samples := make([]sample, c.samples)
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(c.rate))
	defer tick.Stop()
	start := time.Now()
	floorDone := make(chan []floorSample, 1)
	if floor != nil {
		go func() { floorDone <- runFloor(ctx, floor, c.samples, c.rate) }()
	} else {
		floorDone <- nil
	}
	rnd := rand.New(rand.NewPCG(uint64(start.UnixNano()), 7))
	started := 0
	for ; started < c.samples; started++ {
		if started > 0 {
			select {
			case <-tick.C:
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			break
		}
		shard := b.shards[rnd.IntN(len(b.shards))]
		ws := b.owned[shard][rnd.IntN(len(b.owned[shard]))]
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			samples[i] = b.sample(ctx, shard, ws, i)
		}(started)
	}
	wg.Wait()
	floorSamples := <-floorDone
	wall := time.Since(start)
	after := b.scrape(ctx)
	load1 := benchwork.LoadAvg()
	var bgOps, bgErrs, bgRows int64
	if bg != nil {
		stopBG()
		<-bgDone
		bgOps, bgErrs, bgRows = bg.Stats.Ops.Load(), bg.Stats.Errors.Load(), bg.Stats.Rows.Load()
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	samples = samples[:started]

	rows := append(summaries(samples, c.poll > 0), floorSummaries(floorSamples)...)
	fmt.Printf("\n%-34s %5s %5s  %-22s %8s %8s %8s %8s %8s\n", "from COMMIT returning to", "n", "ok", "failures", "p50", "p90", "p99", "max", "mean")
	for _, r := range rows {
		fmt.Printf("%-34s %5d %5d  %-22s %8s %8s %8s %8s %8s\n", r.Name, r.N, r.OK, fails(r.Fails),
			ms(r.P50MS), ms(r.P90MS), ms(r.P99MS), ms(r.MaxMS), ms(r.MeanMS))
	}
	fmt.Println("(percentiles over the ok samples; failures: timeout = 503 not_yet_visible / no row within --timeout, missing = answered without the row, error = anything else, e.g. 503 backend_unavailable)")
	ratios := ratiosOf(rows)
	if ratios.RYWToVisibleP99 > 0 || ratios.VisibleToFloorP99 > 0 {
		fmt.Printf("ratios of p99s: read-your-writes / visible %.2f (goal <= 1.2), visible / physical floor %.2f (goal <= 3)\n",
			ratios.RYWToVisibleP99, ratios.VisibleToFloorP99)
	}
	listed, more := 0, 0
	for _, s := range samples {
		for _, e := range []string{s.Err, s.RYWError, s.VisibleError} {
			switch {
			case e == "":
			case listed < 10:
				listed++
				fmt.Printf("failed: shard %d id %d lsn %s: %s\n", s.Shard, s.ID, s.LSN, e)
			default:
				more++
			}
		}
	}
	for _, s := range floorSamples {
		if s.Err != "" {
			fmt.Printf("failed: %s (the first floor failure)\n", s.Err)
			break
		}
	}
	if more > 0 {
		fmt.Printf("failed: %d more (every sample is in --json)\n", more)
	}
	if bg != nil {
		secs := (wall + c.warmup).Seconds()
		fmt.Printf("background: %d ops (%d errors), %d rows changed over the run: %.0f ops/s, %.0f changes/s\n",
			bgOps, bgErrs, bgRows, float64(bgOps)/secs, float64(bgRows)/secs)
	}
	derived := derive(before, after, wall)
	printDerived(derived)
	stages := stageSummaries(before, after)
	printStages(stages)
	fmt.Printf("wall %s; load average before %s, after %s\n", wall.Round(time.Millisecond), load0, load1)

	if c.jsonOut != "" {
		out := map[string]any{
			"api": c.apiURL, "shards": len(c.dsns), "samples": c.samples, "rate_per_second": c.rate,
			"wait": c.wait.String(), "poll": c.poll.String(), "background_rate": c.bgRate,
			"rows_per_op": c.rowsPerOp, "bulk_body_bytes": c.bulkBody, "background_rows": bgRows,
			"background_ops": bgOps, "background_errors": bgErrs, "wall_seconds": wall.Seconds(),
			"load_average_before": load0, "load_average_after": load1, "results": rows,
			"pipeline_metrics": derived, "stages": stages, "raw": samples, "ratios": ratios, "floor_raw": floorSamples,
		}
		js, _ := json.MarshalIndent(out, "", "  ")
		if err := os.WriteFile(c.jsonOut, js, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) ringMap() (*ring.Map, error) {
	if b.cfg.ringFile != "" {
		return ring.Load(b.cfg.ringFile)
	}
	return loadgen.DefaultRing(b.shards)
}

// sample writes one document and measures both latencies.
func (b *bench) sample(ctx context.Context, shard int, ws int64, i int) sample {
	s := sample{Shard: shard, Workspace: ws}
	t0 := time.Now()
	committed, err := b.write(ctx, &s, i)
	s.CommitMS = msOf(committed.Sub(t0))
	if err != nil {
		s.Err = err.Error()
		s.RYWOutcome, s.VisibleOutcome = "error", "error"
		return s
	}
	var wg sync.WaitGroup
	wg.Go(func() { b.readYourWrites(ctx, &s, committed) })
	if b.cfg.poll > 0 {
		wg.Go(func() { b.visible(ctx, &s, committed) })
	} else {
		s.VisibleOutcome = "skipped"
	}
	wg.Wait()
	return s
}

// write inserts and commits one document, then reads the WAL position in
// the same session; it returns when COMMIT returned.
func (b *bench) write(ctx context.Context, s *sample, i int) (time.Time, error) {
	conn, err := b.pools[s.Shard].Acquire(ctx)
	if err != nil {
		return time.Now(), fmt.Errorf("shard %d: %w", s.Shard, err)
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return time.Now(), fmt.Errorf("shard %d begin: %w", s.Shard, err)
	}
	err = tx.QueryRow(ctx, `INSERT INTO documents (workspace_id, title, body) VALUES ($1, $2, $3) RETURNING id`,
		s.Workspace, fmt.Sprintf("bench latency %d", i), "bench latency sample").Scan(&s.ID)
	if err != nil {
		tx.Rollback(ctx) //nolint:errcheck
		return time.Now(), fmt.Errorf("shard %d insert: %w", s.Shard, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return time.Now(), fmt.Errorf("shard %d commit: %w", s.Shard, err)
	}
	committed := time.Now()
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&s.LSN); err != nil {
		return committed, fmt.Errorf("shard %d wal position: %w", s.Shard, err)
	}
	return committed, nil
}

// readYourWrites is one after= request: 200 with the row is ok.
func (b *bench) readYourWrites(ctx context.Context, s *sample, committed time.Time) {
	u := fmt.Sprintf("%s/v1/documents/%d?after=%d:%s&wait=%s", b.cfg.apiURL, s.ID, s.Shard, s.LSN, b.cfg.wait)
	found, status, code, err := b.lookup(ctx, u, s.Shard)
	s.RYWMS = msOf(time.Since(committed))
	switch {
	case err != nil:
		s.RYWOutcome, s.RYWError = "error", "read-your-writes: "+err.Error()
	case found:
		s.RYWOutcome = "ok"
	case status == http.StatusServiceUnavailable && code == "not_yet_visible":
		s.RYWOutcome, s.RYWError = "timeout", fmt.Sprintf("read-your-writes: 503 not_yet_visible after %.0f ms", s.RYWMS)
	case status == http.StatusOK || status == http.StatusNotFound:
		// The API said the shard was past the LSN, yet the row is absent.
		s.RYWOutcome, s.RYWError = "missing", fmt.Sprintf("read-your-writes: %d %s without the row", status, code)
	default:
		s.RYWOutcome, s.RYWError = "error", fmt.Sprintf("read-your-writes: %d %s after %.0f ms", status, code, s.RYWMS)
	}
}

// visible polls without after= until a 200 carries the row.
func (b *bench) visible(ctx context.Context, s *sample, committed time.Time) {
	u := fmt.Sprintf("%s/v1/documents/%d", b.cfg.apiURL, s.ID)
	for {
		s.VisiblePolls++
		found, status, code, err := b.lookup(ctx, u, s.Shard)
		el := time.Since(committed)
		s.VisibleMS = msOf(el)
		switch {
		case err != nil:
			s.VisibleOutcome, s.VisibleError = "error", "visible: "+err.Error()
			return
		case found:
			s.VisibleOutcome = "ok"
			return
		case status != http.StatusNotFound && status != http.StatusOK:
			s.VisibleOutcome, s.VisibleError = "error", fmt.Sprintf("visible: %d %s after %s", status, code, el.Round(time.Millisecond))
			return
		case el >= b.cfg.timeout:
			s.VisibleOutcome, s.VisibleError = "timeout", fmt.Sprintf("visible: not visible after %s", el.Round(time.Millisecond))
			return
		}
		select {
		case <-ctx.Done():
			s.VisibleOutcome, s.VisibleError = "error", "visible: "+ctx.Err().Error()
			return
		case <-time.After(b.cfg.poll):
		}
	}
}

func (b *bench) get(ctx context.Context, u string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if b.cfg.token != "" {
		req.Header.Set("Authorization", "Bearer "+b.cfg.token)
	}
	return b.client.Do(req)
}

// lookup GETs a document URL and reports whether the answer holds a copy
// of the row on shard; for other answers, the status and the error code
// (not_found, not_yet_visible, backend_unavailable, ...).
func (b *bench) lookup(ctx context.Context, u string, shard int) (found bool, status int, code string, err error) {
	resp, err := b.get(ctx, u)
	if err != nil {
		return false, 0, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&e) //nolint:errcheck // the status alone is enough
		io.Copy(io.Discard, resp.Body)                               //nolint:errcheck
		return false, resp.StatusCode, e.Error, nil
	}
	var doc struct {
		Copies []struct {
			Shard int `json:"shard"`
		} `json:"copies"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return false, resp.StatusCode, "", fmt.Errorf("decode answer: %w", err)
	}
	return slices.ContainsFunc(doc.Copies, func(c struct {
		Shard int `json:"shard"`
	}) bool {
		return c.Shard == shard
	}), resp.StatusCode, "", nil
}

// The rows the ratios compare.
const (
	rywRow     = "read-your-writes (after=, 1 GET)"
	visibleRow = "visible (GET without after=, poll)"
)
