// Package api is `bench api`: documents by id and revenue reports under
// concurrent HTTP load, over tables of --docs documents and --invoices
// invoices loaded straight into ClickHouse (not through Kafka: the loader
// has its own benchmark), with every answer checked against the data the
// benchmark generated.
//
// Data. Every value is a pure function of (--seed, table, row number i,
// version k), so a --keep run regenerates the ground truth without reading
// ClickHouse. Row i of a table is created at start + i·(365 days)/N on shard
// h(i) mod --shards with a seed000 Snowflake id (creation ms, shard, i mod
// 1024): ids are unique and, like real ones, increase with time. Loading
// happens in two phases, like a loader that keeps up with a live system:
// first every row's insert (version 0) in id order, then the later versions
// (updates and delete tombstones), shuffled, so that versions of one row
// land in different parts in either order and FINAL has real work.
// Versions increase with the change's time for each row, as LSNs do.
//
// Documents: 30% get 1-3 updates (title, body, updated_at), 3% are deleted;
// the body is --body-bytes on average. Invoices: amount in 1.00..9999.99,
// five currencies, status issued or paid, then updates (issued -> paid or
// void, paid -> refunded, amount corrections, 2% of updates move issued_at
// by up to 40 days, across months); 2% are deleted.
//
// Measurement: the API handler (internal/api, internal/query, as cmd/api
// builds it) serves HTTP on a localhost port in this process, or the API at
// --api-url; --clients goroutines send requests back to back for --duration
// per scenario, after --warmup. Latency is from request to fully read body.
//
// Exactness: before the timed runs, every month's revenue by day and the
// year's revenue by month are fetched and compared with the sums computed
// here in integer cents; --check-ids random ids (deleted ones included) are
// fetched and compared with their final version. A mismatch fails the run.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/bench/internal/benchwork"
	"github.com/tributary/tributary/internal/api"
	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/compact"
	"github.com/tributary/tributary/internal/flagenv"
	"github.com/tributary/tributary/internal/loader"
	"github.com/tributary/tributary/internal/preagg"
	"github.com/tributary/tributary/internal/query"
	"github.com/tributary/tributary/internal/tables"
)

const usage = `bench api — GET /v1/documents/{id} and GET /v1/revenue under concurrent load.

Creates database --db (default bench_api_<run>), creates the documents and
invoices tables through chstore (the loader's DDL; columns as in
schema/postgres/10_demo.sql), inserts --docs and --invoices rows plus later
versions and deletes straight into ClickHouse, a move log of --moves
moves (of deleted documents: every by-id read searches it, as the API
reads the documents table's move log), writes complete watermarks,
then serves the API (internal/api, deploy/local/tables.json's configuration)
over HTTP on localhost and runs each scenario with --clients concurrent
clients for --duration:

  select-1       SELECT 1 to the same ClickHouse server (the floor of the others)
  by-id          GET /v1/documents/{id} of a random live document
  by-id-miss     GET /v1/documents/{id} of a well-formed id that never existed (404)
  revenue-month  GET /v1/revenue, one random month of the year by day, all workspaces
  revenue-year   GET /v1/revenue, the whole year by month and currency

Before timing, every revenue answer used (12 months by day, the year by
month) is compared to the cent with sums computed here from the generated
data, and --check-ids ids with their final version; a mismatch fails.
Prints p50/p90/p99/max latency and requests/s per scenario and the load
average; --json writes them to a file.

--keep leaves the database in place; a later run with the same --db, data
flags and --seed reuses it without loading (the data is regenerated in
memory, not read back). Without --keep the database is dropped at the end.

See docs/benchmarks.md (API) for results.

Run against the local stack:
  set -a; . .stack/stack.env; set +a
  flock /tmp/tributary-bench.lock go run ./bench api --keep --db bench_api_10m`

// config is the configuration of `bench api`.
type config struct {
	compact    bool
	rate       float64
	chAddr     string
	chCluster  string
	db         string
	tablesFile string
	apiBase    string
	docs       int
	invoices   int
	shards     int
	bodyBytes  int
	seed       int
	batch      int
	clients    int
	clientList []int
	duration   time.Duration
	warmup     time.Duration
	scenarios  string
	checkIDs   int
	moves      int
	settle     time.Duration
	timeout    time.Duration
	keep       bool
	preagg     bool
	check      bool
	jsonOut    string
	cpuProfile string
	// clientsFlag is --clients as given.
	clientsFlag string
}

func (c *config) validate() error {
	var errs []error
	if c.chAddr == "" {
		errs = append(errs, errors.New("--clickhouse-addr is required (source .stack/stack.env)"))
	}
	if c.moves < 0 {
		errs = append(errs, errors.New("--moves must not be negative"))
	}
	if c.docs < 1 || c.invoices < 1 || c.shards < 1 || c.shards > 1024 || c.batch < 1 {
		errs = append(errs, errors.New("--docs, --invoices, --clients, --batch must be >= 1 and --shards in 1..1024"))
	}
	if c.docs > 1_000_000_000 || c.invoices > 1_000_000_000 {
		errs = append(errs, errors.New("at most 1e9 rows per table (one id per millisecond of the year)"))
	}
	for _, s := range flagenv.List(c.clientsFlag) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("--clients: %q is not a count >= 1", s))
			continue
		}
		c.clientList = append(c.clientList, n)
		c.clients = max(c.clients, n)
	}
	if len(c.clientList) == 0 {
		errs = append(errs, errors.New("--clients: at least one count"))
	}
	for _, s := range flagenv.List(c.scenarios) {
		if !slices.Contains(scenarioNames, s) {
			errs = append(errs, fmt.Errorf("--scenarios: unknown %q (%s)", s, strings.Join(scenarioNames, ", ")))
		}
	}
	return errors.Join(errs...)
}

var scenarioNames = []string{"select-1", "by-id", "by-id-miss", "revenue-month", "revenue-year"}

// Run is `bench api`: args are its flags.
func Run(ctx context.Context, args []string) error {
	var c config
	fs := flagenv.New("bench api", usage)
	fs.String(&c.chAddr, "clickhouse-addr", "TRIBUTARY_CLICKHOUSE_ADDR", "", "ClickHouse native address")
	fs.String(&c.chCluster, "clickhouse-cluster", "TRIBUTARY_CLICKHOUSE_CLUSTER", "", "load the data in ClickHouse cluster mode over this cluster (the loader's --clickhouse-cluster); the API reads through the Distributed tables (empty: one server)")
	fs.String(&c.db, "db", "", "", "ClickHouse database (default bench_api_<run>; with --keep, reused when it holds the same data)")
	fs.String(&c.tablesFile, "tables", "", "deploy/local/tables.json", "table config the API serves (documents and invoices, revenue over invoices)")
	fs.String(&c.apiBase, "api-url", "", "", "measure this running API (serving --db) instead of one in this process")
	fs.Int(&c.docs, "docs", "", 10_000_000, "documents (rows before updates and deletes)")
	fs.Int(&c.invoices, "invoices", "", 10_000_000, "invoices (rows before updates and deletes)")
	fs.Int(&c.shards, "shards", "", 4, "source shards the rows come from")
	fs.Int(&c.bodyBytes, "body-bytes", "", 300, "average document body length")
	fs.Int(&c.seed, "seed", "", 1, "data seed")
	fs.Int(&c.batch, "batch", "", 200_000, "rows per INSERT while loading")
	fs.String(&c.clientsFlag, "clients", "", "8", "concurrent clients; a list (1,4,8) runs every scenario at each")
	fs.Duration(&c.duration, "duration", "", 20*time.Second, "measured time per scenario")
	fs.Float64Var(&c.rate, "rate", 0, "HTTP scenarios: send this many requests/s in all, each due at its time whichever client is free, and count a request's latency from when it was due (open loop, free of coordinated omission; --clients bounds the requests in flight); 0: each client sends its next request when answered (closed loop)")
	fs.Duration(&c.warmup, "warmup", "", 3*time.Second, "unmeasured load before each scenario")
	fs.String(&c.scenarios, "scenarios", "", strings.Join(scenarioNames, ","), "scenarios to run")
	fs.Int(&c.checkIDs, "check-ids", "", 2000, "random ids whose answers are checked before timing")
	fs.Int(&c.moves, "moves", "", 100_000, "moves in the document_moves log (of deleted documents, two versions each; every by-id read searches the log)")
	fs.Duration(&c.settle, "settle", "", 10*time.Minute, "wait up to this long for ClickHouse's background merges of the load to finish")
	fs.Duration(&c.timeout, "query-timeout", "", time.Minute, "the in-process API's --query-timeout (the revenue baseline takes seconds at 10M)")
	fs.BoolVar(&c.check, "check", true, "check answers against the generated data before timing (every revenue report takes seconds at 10M)")
	fs.BoolVar(&c.keep, "keep", false, "keep the database (and reuse it when it holds the same data)")
	fs.BoolVar(&c.preagg, "preaggregate", false, "compute the revenue pre-aggregates (one full round of internal/preagg, timed) before checking and timing, so that the API answers whole-day revenue from them")
	fs.BoolVar(&c.compact, "compact", true, "before timing, run one round of the loader's compaction keeper (internal/compact, its defaults): tables of more than 3 parts are merged whole, as a loader keeps them (false: as ClickHouse's own merges leave them)")
	fs.String(&c.jsonOut, "json", "", "", "also write the results as JSON to this file")
	fs.String(&c.cpuProfile, "cpuprofile", "", "", "write a CPU profile of the timed scenarios (API, clients and driver: one process) to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := c.validate(); err != nil {
		return err
	}
	if c.db == "" {
		c.db = "bench_api_" + strconv.FormatInt(time.Now().Unix(), 36)
	}
	tcfg, err := tables.Load(c.tablesFile)
	if err != nil {
		return err
	}
	gen, err := newAPIData(c)
	if err != nil {
		return err
	}

	store, err := chstore.Open(ctx, chstore.Options{Addr: c.chAddr, Database: c.db, Cluster: c.chCluster})
	if err != nil {
		return err
	}
	if c.chCluster != "" {
		fmt.Printf("ClickHouse cluster mode: cluster %s, %d nodes; parts below are node 1's local tables\n", c.chCluster, len(store.Nodes()))
	}
	defer func() {
		if !c.keep {
			store.DropDatabase(context.Background()) //nolint:errcheck
		}
		store.Close()
	}()
	res := map[string]any{"db": c.db, "docs": c.docs, "invoices": c.invoices, "shards": c.shards,
		"body_bytes": c.bodyBytes, "seed": c.seed, "clients": c.clientList, "duration_seconds": c.duration.Seconds()}

	gen.tcfg = tcfg
	loaded, err := gen.loadedBefore(ctx, store)
	if err != nil {
		return err
	}
	if loaded {
		fmt.Printf("database %s already holds this data (--keep): not loading\n", c.db)
		gen.truth() // the ground truth, without inserting
	} else {
		start := time.Now()
		n, err := gen.load(ctx, store, tcfg)
		if err != nil {
			return err
		}
		res["load_rows"], res["load_seconds"] = n, time.Since(start).Seconds()
		fmt.Printf("loaded %d rows (inserts, updates, tombstones) in %s: %.0f rows/s\n", n,
			time.Since(start).Round(time.Millisecond), float64(n)/time.Since(start).Seconds())
	}
	nMoves, err := gen.loadMoves(ctx, store)
	if err != nil {
		return err
	}
	res["moves"] = nMoves
	if err := settleMerges(ctx, store.Conn(), c.db, c.settle); err != nil {
		return err
	}
	if c.compact {
		if err := compactRound(ctx, store, tcfg, res); err != nil {
			return err
		}
	}
	if c.preagg {
		took, err := preaggregate(ctx, store, tcfg)
		if err != nil {
			return err
		}
		res["preaggregate_full_round_seconds"] = took.Seconds()
	}
	st, err := tableStats(ctx, store)
	if err != nil {
		return err
	}
	res["tables"] = st
	for _, s := range st {
		fmt.Printf("table %-9s %d live rows, %d stored rows, %d active parts, %.0f MB on disk\n", s.Table, s.Live, s.Stored, s.Parts, float64(s.Bytes)/1e6)
	}

	base := c.apiBase
	if base == "" {
		srv, url, err := serveAPI(ctx, c, tcfg)
		if err != nil {
			return err
		}
		defer srv.Close()
		base = url
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c.clients * 2, MaxConnsPerHost: c.clients * 2}, Timeout: c.timeout + 10*time.Second}
	if c.check {
		if err := gen.checkIDs(ctx, client, base, c.checkIDs); err != nil {
			return err
		}
		if err := gen.checkRevenue(ctx, client, base); err != nil {
			return err
		}
		fmt.Printf("exact: by-id answers of %d random ids and every revenue report equal the generated data\n", c.checkIDs)
		res["exact"] = true
	}

	stopProfile, err := benchwork.StartCPUProfile(c.cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	var results []scenarioResult
	for _, clients := range c.clientList {
		c.clients, gen.c.clients = clients, clients
		for _, name := range flagenv.List(c.scenarios) {
			var r scenarioResult
			var err error
			if name == "select-1" {
				r, err = runSelect1(ctx, c)
			} else {
				r, err = runScenario(ctx, c, name, gen.request(name, base), client)
			}
			if err != nil {
				return err
			}
			results = append(results, r)
		}
	}
	printResults(results)
	res["scenarios"] = results
	if c.jsonOut != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(c.jsonOut, b, 0o644); err != nil {
			return err
		}
	}
	if c.keep {
		host, port, _ := net.SplitHostPort(c.chAddr)
		fmt.Printf("kept database %s (drop it with: clickhouse-client --host %s --port %s -q 'DROP DATABASE %s')\n", c.db, host, port, c.db)
	}
	return nil
}

// preaggregate runs one full round of the revenue aggregator over the
// loaded data (the first round recomputes every block) and returns how long
// it took.
func preaggregate(ctx context.Context, store *chstore.Store, tcfg *tables.Config) (time.Duration, error) {
	rev := tcfg.Revenue
	t, _ := tcfg.ByName(rev.Table)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	a := preagg.New(preagg.Config{Revenue: rev, IDColumn: t.IDColumn, ShardKey: t.ShardKey, Topic: t.Topic},
		store, log, prometheus.NewRegistry())
	start := time.Now()
	outcome, err := a.Round(ctx)
	if err != nil {
		return 0, err
	}
	// idle: a kept database whose pre-aggregates an earlier run computed
	// and nothing changed since (the check below still compares them with
	// the generated data).
	if outcome != "full" && outcome != "idle" {
		return 0, fmt.Errorf("pre-aggregate round: %s, want a full round", outcome)
	}
	took := time.Since(start)
	fmt.Printf("revenue pre-aggregates: %s round over %s in %s\n", outcome, rev.Table, took.Round(time.Millisecond))
	return took, nil
}

// serveAPI runs the API handler on a localhost port until ctx ends.
func serveAPI(ctx context.Context, c config, tcfg *tables.Config) (*http.Server, string, error) {
	q, err := query.Open(ctx, c.db, chstore.DialOptions{Addr: c.chAddr})
	if err != nil {
		return nil, "", err
	}
	// The API logs every request at info; the benchmark keeps warnings
	// and errors only, so that stderr stays readable.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	h := api.New(api.Config{Tables: tcfg, DocumentsTable: "documents", QueryTimeout: c.timeout}, q, log, prometheus.NewRegistry())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		q.Close()
		return nil, "", err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	srv.RegisterOnShutdown(func() { q.Close() })
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	return srv, "http://" + ln.Addr().String(), nil
}

// compactRound runs one round of the loader's compaction keeper over the
// tables it keeps, on every node in cluster mode, and records what it did
// in res.
func compactRound(ctx context.Context, store *chstore.Store, tcfg *tables.Config, res map[string]any) error {
	k := compact.ForStore(compact.Config{Tables: loader.CompactTables(tcfg)}, store, slog.Default(), nil)
	start := time.Now()
	out, err := k.Round(ctx)
	if err != nil {
		return fmt.Errorf("compaction round: %w", err)
	}
	done := map[string]float64{}
	for _, o := range out {
		if o.Result == compact.ResultDone {
			done[o.Table] = o.Took.Seconds()
			fmt.Printf("compacted %s: %d parts (%.0f MB) merged to one in %s\n", o.Table, o.Parts, float64(o.Bytes)/1e6, o.Took.Round(time.Millisecond))
		}
	}
	fmt.Printf("compaction round: %d tables looked at, %d merged, %s\n", len(out), len(done), time.Since(start).Round(time.Millisecond))
	res["compacted_seconds"] = done
	return nil
}

// settleMerges waits until ClickHouse runs no merge of db (at most max).
func settleMerges(ctx context.Context, conn driver.Conn, db string, maxWait time.Duration) error {
	deadline := time.Now().Add(maxWait)
	start := time.Now()
	quiet := 0
	for time.Now().Before(deadline) {
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM system.merges WHERE database = ?", db).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			quiet++
			if quiet == 3 {
				if d := time.Since(start); d > 3*time.Second {
					fmt.Printf("merges settled after %s\n", d.Round(time.Second))
				}
				return nil
			}
		} else {
			quiet = 0
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	fmt.Printf("merges still running after %s; measuring anyway\n", maxWait)
	return nil
}

// tableStat describes one loaded table.
type tableStat struct {
	Table  string `json:"table"`
	Live   uint64 `json:"live_rows"`
	Stored uint64 `json:"stored_rows"`
	Parts  uint64 `json:"active_parts"`
	Bytes  uint64 `json:"bytes_on_disk"`
}

func tableStats(ctx context.Context, store *chstore.Store) ([]tableStat, error) {
	var out []tableStat
	conn, db := store.Conn(), store.Database()
	for _, t := range []string{"documents", "invoices"} {
		s := tableStat{Table: t}
		if err := conn.QueryRow(ctx, "SELECT sum(rows), count(), sum(bytes_on_disk) FROM system.parts WHERE database = ? AND table = ? AND active",
			db, store.LocalTable(t)).Scan(&s.Stored, &s.Parts, &s.Bytes); err != nil {
			return nil, fmt.Errorf("parts of %s: %w", t, err)
		}
		if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT count() FROM %s.%s FINAL WHERE _deleted = 0", chstore.Quote(db), t)).Scan(&s.Live); err != nil {
			return nil, fmt.Errorf("count %s: %w", t, err)
		}
		out = append(out, s)
	}
	return out, nil
}
