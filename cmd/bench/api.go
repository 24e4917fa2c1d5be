package main

// The API benchmark: documents by id and revenue reports under
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
// five apiCurrencies, status issued or paid, then updates (issued -> paid or
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

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/shopspring/decimal"

	"github.com/tributary/tributary/internal/api"
	"github.com/tributary/tributary/internal/benchwork"
	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/compact"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/flagenv"
	"github.com/tributary/tributary/internal/ids"
	"github.com/tributary/tributary/internal/loader"
	"github.com/tributary/tributary/internal/preagg"
	"github.com/tributary/tributary/internal/query"
	"github.com/tributary/tributary/internal/tables"
)

const apiUsage = `bench api — GET /v1/documents/{id} and GET /v1/revenue under concurrent load.

Creates database --db (default bench_api_<run>), creates the documents and
invoices tables through chstore (the loader's DDL; columns as in
schema/postgres/10_demo.sql), inserts --docs and --invoices rows plus later
versions and deletes straight into ClickHouse, a move log of --moves
moves (of deleted documents: every by-id read searches it, as the API
reads the documents table's move log), writes complete watermarks,
then serves the API (internal/api, deploy/local/tables.json's configuration)
over HTTP on localhost and runs each scenario with --clients concurrent
clients for --duration:

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
  flock /tmp/tributary-bench.lock go run ./cmd/bench api --keep --db bench_api_10m`

// apiConfig is the configuration of `bench api`.
type apiConfig struct {
	compact    bool
	rate       float64
	chAddr     string
	chCluster  string
	db         string
	tablesFile string
	apiURL     string
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

func (c *apiConfig) validate() error {
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
		if !slices.Contains(apiScenarios, s) {
			errs = append(errs, fmt.Errorf("--scenarios: unknown %q (%s)", s, strings.Join(apiScenarios, ", ")))
		}
	}
	return errors.Join(errs...)
}

var apiScenarios = []string{"by-id", "by-id-miss", "revenue-month", "revenue-year"}

// benchAPI is `bench api`.
func benchAPI(ctx context.Context, args []string) error {
	var c apiConfig
	fs := flagenv.New("bench api", apiUsage)
	fs.String(&c.chAddr, "clickhouse-addr", "TRIBUTARY_CLICKHOUSE_ADDR", "", "ClickHouse native address")
	fs.String(&c.chCluster, "clickhouse-cluster", "TRIBUTARY_CLICKHOUSE_CLUSTER", "", "load the data in ClickHouse cluster mode over this cluster (the loader's --clickhouse-cluster); the API reads through the Distributed tables (empty: one server)")
	fs.String(&c.db, "db", "", "", "ClickHouse database (default bench_api_<run>; with --keep, reused when it holds the same data)")
	fs.String(&c.tablesFile, "tables", "", "deploy/local/tables.json", "table config the API serves (documents and invoices, revenue over invoices)")
	fs.String(&c.apiURL, "api-url", "", "", "measure this running API (serving --db) instead of one in this process")
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
	fs.String(&c.scenarios, "scenarios", "", strings.Join(apiScenarios, ","), "scenarios to run")
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
		if errors.Is(err, flag.ErrHelp) {
			return errUsage
		}
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
	if err := apiSettle(ctx, store.Conn(), c.db, c.settle); err != nil {
		return err
	}
	if c.compact {
		if err := apiCompact(ctx, store, tcfg, res); err != nil {
			return err
		}
	}
	if c.preagg {
		took, err := apiPreaggregate(ctx, store, tcfg)
		if err != nil {
			return err
		}
		res["preaggregate_full_round_seconds"] = took.Seconds()
	}
	st, err := apiTableStats(ctx, store)
	if err != nil {
		return err
	}
	res["tables"] = st
	for _, s := range st {
		fmt.Printf("table %-9s %d live rows, %d stored rows, %d active parts, %.0f MB on disk\n", s.Table, s.Live, s.Stored, s.Parts, float64(s.Bytes)/1e6)
	}

	base := c.apiURL
	if base == "" {
		srv, url, err := apiServeAPI(ctx, c, tcfg)
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

	stopProfile, err := startCPUProfile(c.cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	var results []apiScenarioResult
	for _, clients := range c.clientList {
		c.clients, gen.c.clients = clients, clients
		for _, name := range flagenv.List(c.scenarios) {
			r, err := apiRunScenario(ctx, c, name, gen.request(name, base), client)
			if err != nil {
				return err
			}
			results = append(results, r)
		}
	}
	apiPrintResults(results)
	res["scenarios"] = results
	if c.jsonOut != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(c.jsonOut, b, 0o644); err != nil {
			return err
		}
	}
	if c.keep {
		fmt.Printf("kept database %s (drop it with: clickhouse-client --port 59000 -q 'DROP DATABASE %s')\n", c.db, c.db)
	}
	return nil
}

// apiPreaggregate runs one full round of the revenue aggregator over the
// loaded data (the first round recomputes every block) and returns how long
// it took.
func apiPreaggregate(ctx context.Context, store *chstore.Store, tcfg *tables.Config) (time.Duration, error) {
	rev := tcfg.Revenue
	t, _ := tcfg.ByName(rev.Table)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	a := preagg.New(preagg.Config{Revenue: rev, IDColumn: t.IDColumn, ShardKey: t.ShardKey, Topic: t.Topic},
		store, log, prometheus.NewRegistry())
	if err := preagg.EnsureMarks(ctx, store); err != nil {
		return 0, err
	}
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

// apiServeAPI runs the API handler on a localhost port until ctx ends.
func apiServeAPI(ctx context.Context, c apiConfig, tcfg *tables.Config, opts ...func(*query.Queries)) (*http.Server, string, error) {
	q, err := query.Open(ctx, c.db, chstore.DialOptions{Addr: c.chAddr})
	if err != nil {
		return nil, "", err
	}
	for _, o := range opts {
		o(q)
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

// ---- data ----

// The year of data: [apiDataStart, apiDataEnd).
var (
	apiDataStart = time.Date(2025, 12, 1, 0, 0, 0, 0, time.UTC)
	apiDataEnd   = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
)

var apiCurrencies = []string{"USD", "EUR", "GBP", "JPY", "CHF"}

// Invoice statuses.
const (
	stIssued uint8 = iota
	stPaid
	stRefunded
	stVoid
)

var apiStatusText = []string{"issued", "paid", "refunded", "void"}

// apiData generates the benchmark's rows and knows their final state.
type apiData struct {
	c      apiConfig
	layout ids.Snowflake
	corpus string // bodies are slices of it
	// Ground truth, filled by load or truth.
	docDeleted []bool
	docLive    []int // live document rows
	// revenue[day][currency], day counted from dayBase, in cents.
	revenue [][]apiRevenueCell
	dayBase time.Time
	// tcfg is set by benchAPI.
	tcfg *tables.Config
}

type apiRevenueCell struct{ gross, refunds, invoices int64 }

func newAPIData(c apiConfig) (*apiData, error) {
	l, err := ids.Preset("seed000")
	if err != nil {
		return nil, err
	}
	d := &apiData{c: c, layout: l, dayBase: apiDataStart.AddDate(0, 0, -150)}
	words := strings.Fields("the a invoice report quarterly draft final review notes meeting plan budget design spec " +
		"customer order shipping roadmap security audit release summary team product launch metrics data " +
		"analysis proposal contract update changes approved pending archive index table migration shard")
	r := rand.New(rand.NewPCG(uint64(c.seed), 7))
	var b strings.Builder
	for b.Len() < 1<<20 {
		b.WriteString(words[r.IntN(len(words))])
		b.WriteByte(' ')
	}
	d.corpus = b.String()
	return d, nil
}

// h is a keyed hash of (seed, table, row, version, field): every random
// choice about a row, so that any of them can be recomputed alone.
func (d *apiData) h(table byte, i, k int, field byte) uint64 {
	x := uint64(d.c.seed)*0x9E3779B97F4A7C15 ^ uint64(table)<<56 ^ uint64(field)<<48 ^ uint64(k)<<40 ^ uint64(i)
	x ^= x >> 30
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 27
	x *= 0x94D049BB133111EB
	x ^= x >> 31
	return x
}

const (
	tDocs     = 'd'
	tInvoices = 'i'
)

// created is row i's creation time in ms: spread evenly over the year.
func (d *apiData) created(i, n int) int64 {
	span := apiDataEnd.UnixMilli() - apiDataStart.UnixMilli()
	return apiDataStart.UnixMilli() + int64(i)*span/int64(n)
}

func (d *apiData) shard(table byte, i int) int {
	return int(d.h(table, i, 0, 's') % uint64(d.c.shards))
}

func (d *apiData) id(table byte, i, n int) int64 {
	id, err := d.layout.Encode(ids.Parts{UnixMilli: d.created(i, n), Node: int64(d.shard(table, i)), Seq: int64(i & 1023)})
	if err != nil {
		panic(err) // validate() keeps every input in range
	}
	return id
}

// missID is a well-formed id next to row i's that no row has (sequence
// numbers are i mod 1024, one row per millisecond).
func (d *apiData) missID(i, n int) int64 {
	id := d.id(tDocs, i, n)
	if i&1023 == 1023 {
		return id - 1
	}
	return id + 1
}

// workspace: ws mod shards is the shard, as a placement map would give.
func (d *apiData) workspace(table byte, i int) int64 {
	return int64(d.shard(table, i)) + int64(d.c.shards)*int64(1+d.h(table, i, 0, 'w')%1000)
}

// updates is how many updates row i gets; deleted whether a delete follows.
func (d *apiData) updates(table byte, i int) (int, bool) {
	u := d.h(table, i, 0, 'u') % 100
	del := d.h(table, i, 0, 'x') % 100
	if table == tDocs {
		n := 0
		switch {
		case u >= 97:
			n = 3
		case u >= 90:
			n = 2
		case u >= 70:
			n = 1
		}
		return n, del < 3
	}
	n := 0
	switch {
	case u >= 95:
		n = 3
	case u >= 85:
		n = 2
	case u >= 60:
		n = 1
	}
	return n, del < 2
}

// versionTime is when version k of row i was written (ms): updates follow
// hours apart. The delete is version updates+1.
func (d *apiData) versionTime(table byte, i, k, n int) int64 {
	return d.created(i, n) + int64(k)*3_600_000 + int64(d.h(table, i, k, 't')%3_600_000)*int64(min(k, 1))
}

// version is the row version (an LSN stand-in): increasing with the
// change's time, distinct for distinct changes.
func (d *apiData) version(table byte, i, k, n int) uint64 {
	return uint64(d.versionTime(table, i, k, n)-apiDataStart.UnixMilli()+1)<<12 | uint64(i&1023)<<2 | uint64(k&3)
}

func (d *apiData) title(i, k int) string {
	return fmt.Sprintf("Document %d rev %d", i, k)
}

func (d *apiData) body(i, k int) string {
	l := d.c.bodyBytes/2 + int(d.h(tDocs, i, k, 'l')%uint64(d.c.bodyBytes+1))
	off := int(d.h(tDocs, i, k, 'o') % uint64(len(d.corpus)-l))
	return d.corpus[off : off+l]
}

// apiInvoice is one version of an invoice.
type apiInvoice struct {
	cents    int64
	currency int
	status   uint8
	issuedAt int64 // unix seconds
}

// invoiceAt returns version k of invoice i (k <= updates).
func (d *apiData) invoiceAt(i, k, n int) apiInvoice {
	cu := d.h(tInvoices, i, 0, 'c') % 100
	v := apiInvoice{cents: 100 + int64(d.h(tInvoices, i, 0, 'a')%999_900), issuedAt: d.created(i, n) / 1000}
	switch {
	case cu < 50:
		v.currency = 0
	case cu < 75:
		v.currency = 1
	case cu < 85:
		v.currency = 2
	case cu < 93:
		v.currency = 3
	default:
		v.currency = 4
	}
	if d.h(tInvoices, i, 0, 'p')%100 < 30 {
		v.status = stIssued
	} else {
		v.status = stPaid
	}
	for j := 1; j <= k; j++ {
		r := d.h(tInvoices, i, j, 'r') % 100
		switch v.status {
		case stIssued:
			if r < 80 {
				v.status = stPaid
			} else {
				v.status = stVoid
			}
		case stPaid:
			if r < 60 {
				v.status = stRefunded
			}
		}
		if d.h(tInvoices, i, j, 'a')%10 == 0 {
			v.cents = 100 + int64(d.h(tInvoices, i, j, 'b')%999_900) // a corrected amount
		}
		if m := d.h(tInvoices, i, j, 'm') % 100; m < 2 {
			days := int64(1 + d.h(tInvoices, i, j, 'n')%40)
			if m == 0 {
				days = -days
			}
			v.issuedAt += days * 86400 // a corrected issue date
		}
	}
	return v
}

// truth computes the final state of every row.
func (d *apiData) truth() {
	d.docDeleted = make([]bool, d.c.docs)
	d.docLive = d.docLive[:0]
	for i := range d.c.docs {
		_, del := d.updates(tDocs, i)
		d.docDeleted[i] = del
		if !del {
			d.docLive = append(d.docLive, i)
		}
	}
	days := int(apiDataEnd.Sub(d.dayBase).Hours()/24) + 151 // issued_at moves by at most 3·40 days
	d.revenue = make([][]apiRevenueCell, days)
	for j := range d.revenue {
		d.revenue[j] = make([]apiRevenueCell, len(apiCurrencies))
	}
	for i := range d.c.invoices {
		u, del := d.updates(tInvoices, i)
		if del {
			continue
		}
		v := d.invoiceAt(i, u, d.c.invoices)
		if v.status != stPaid && v.status != stRefunded {
			continue
		}
		day := int((v.issuedAt - d.dayBase.Unix()) / 86400)
		cell := &d.revenue[day][v.currency]
		cell.gross += v.cents
		cell.invoices++
		if v.status == stRefunded {
			cell.refunds += v.cents
		}
	}
}

// ---- loading ----

var apiDocColumns = []envelope.Column{
	{Name: "id", Type: "bigint", OID: 20, Key: true},
	{Name: "workspace_id", Type: "bigint", OID: 20},
	{Name: "title", Type: "text", OID: 25},
	{Name: "body", Type: "text", OID: 25},
	{Name: "created_at", Type: "timestamp with time zone", OID: 1184},
	{Name: "updated_at", Type: "timestamp with time zone", OID: 1184},
}

var apiInvoiceColumns = []envelope.Column{
	{Name: "id", Type: "bigint", OID: 20, Key: true},
	{Name: "workspace_id", Type: "bigint", OID: 20},
	{Name: "amount", Type: "numeric(12,2)", OID: 1700},
	{Name: "currency", Type: "text", OID: 25},
	{Name: "status", Type: "text", OID: 25},
	{Name: "issued_at", Type: "timestamp with time zone", OID: 1184},
	{Name: "paid_at", Type: "timestamp with time zone", OID: 1184},
}

const apiMetaTable = "_bench_api"

// fingerprint names the data: a kept database is reused only for the same.
func (d *apiData) fingerprint() string {
	return fmt.Sprintf("v1 docs=%d invoices=%d shards=%d body=%d seed=%d", d.c.docs, d.c.invoices, d.c.shards, d.c.bodyBytes, d.c.seed)
}

// loadedBefore reports whether the database holds a complete load of the
// same data.
func (d *apiData) loadedBefore(ctx context.Context, store *chstore.Store) (bool, error) {
	conn := store.Conn()
	if err := conn.Exec(ctx, fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s.%s (fingerprint String, loaded_at DateTime) ENGINE = TinyLog",
		chstore.Quote(d.c.db), apiMetaTable)); err != nil {
		return false, err
	}
	var n uint64
	if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT count() FROM %s.%s", chstore.Quote(d.c.db), apiMetaTable)).Scan(&n); err != nil {
		return false, err
	}
	if n == 0 {
		var tabs uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = ? AND name IN ('documents', 'invoices')", d.c.db).Scan(&tabs); err != nil {
			return false, err
		}
		if tabs > 0 {
			return false, fmt.Errorf("database %s has tables but no completed load: drop it or choose another --db", d.c.db)
		}
		return false, nil
	}
	var fp string
	if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT any(fingerprint) FROM %s.%s", chstore.Quote(d.c.db), apiMetaTable)).Scan(&fp); err != nil {
		return false, err
	}
	if fp != d.fingerprint() {
		return false, fmt.Errorf("database %s holds other data (%s), not %s: choose another --db", d.c.db, fp, d.fingerprint())
	}
	return true, nil
}

// load creates the tables through chstore, inserts every version and
// writes the watermarks. It returns the number of rows inserted.
func (d *apiData) load(ctx context.Context, store *chstore.Store, tcfg *tables.Config) (int, error) {
	d.truth()
	docs, err := store.EnsureTable(ctx, "documents", []string{"id"}, apiDocColumns)
	if err != nil {
		return 0, err
	}
	inv, err := store.EnsureTable(ctx, "invoices", []string{"id"}, apiInvoiceColumns)
	if err != nil {
		return 0, err
	}
	total := 0
	var maxVersion uint64
	for _, t := range []struct {
		tab   *chstore.Table
		table byte
		n     int
	}{{docs, tDocs, d.c.docs}, {inv, tInvoices, d.c.invoices}} {
		w := &apiRowWriter{d: d, conn: store.Conn(), db: d.c.db, tab: t.tab, table: t.table, n: t.n, batch: d.c.batch}
		later, err := w.writeAll(ctx)
		if err != nil {
			return 0, err
		}
		total += w.rows
		maxVersion = max(maxVersion, w.maxVersion)
		fmt.Printf("  %s: %d rows (%d inserts, %d later versions)\n", t.tab.Name, w.rows, t.n, later)
	}
	var ws []chstore.Watermark
	for _, topic := range tcfg.Topics() {
		for p := range 4 {
			for s := range d.c.shards {
				ws = append(ws, chstore.Watermark{Topic: topic, Partition: int32(p), Partitions: 4, Shard: uint16(s),
					CommitLSN: maxVersion + 16, CommitTS: time.Now().UTC()})
			}
		}
	}
	if err := store.WriteWatermarks(ctx, ws); err != nil {
		return 0, err
	}
	b, err := store.Conn().PrepareBatch(ctx, fmt.Sprintf("INSERT INTO %s.%s (fingerprint, loaded_at)", chstore.Quote(d.c.db), apiMetaTable))
	if err != nil {
		return 0, err
	}
	if err := b.Append(d.fingerprint(), time.Now().UTC()); err != nil {
		return 0, err
	}
	return total, b.Send()
}

// writeAll inserts every version of the writer's table in the load's
// order and batches: phase 1 the inserts in id order, phase 2 the later
// versions (updates, tombstones) shuffled. It returns the number of later
// versions.
func (w *apiRowWriter) writeAll(ctx context.Context) (int, error) {
	d := w.d
	var later []uint64 // i<<3 | k
	for i := range w.n {
		u, del := d.updates(w.table, i)
		for k := 1; k <= u; k++ {
			later = append(later, uint64(i)<<3|uint64(k))
		}
		if del {
			later = append(later, uint64(i)<<3|uint64(u+1))
		}
	}
	r := rand.New(rand.NewPCG(uint64(d.c.seed), uint64(w.table)))
	r.Shuffle(len(later), func(a, b int) { later[a], later[b] = later[b], later[a] })
	for i := range w.n {
		if err := w.add(ctx, i, 0); err != nil {
			return 0, err
		}
	}
	for _, ik := range later {
		if err := w.add(ctx, int(ik>>3), int(ik&7)); err != nil {
			return 0, err
		}
	}
	return len(later), w.flush(ctx)
}

// apiRowWriter batches versions of one table column-wise.
type apiRowWriter struct {
	d          *apiData
	conn       driver.Conn
	db         string
	tab        *chstore.Table
	table      byte
	n, batch   int
	rows       int
	maxVersion uint64

	id                 []int64
	ws                 []*int64
	title, body        []*string
	created, updated   []*time.Time
	amount             []*decimal.Decimal
	currency, status   []*string
	issued, paid       []*time.Time
	shard              []uint16
	version, commitLSN []uint64
	deleted            []uint8
	commitTS, loadedAt []time.Time
}

func (w *apiRowWriter) add(ctx context.Context, i, k int) error {
	d := w.d
	u, _ := d.updates(w.table, i)
	del := k > u
	ver := d.version(w.table, i, k, w.n)
	ts := time.UnixMilli(d.versionTime(w.table, i, k, w.n)).UTC().Truncate(time.Second)
	if w.table == tInvoices {
		var v apiInvoice
		if !del {
			v = d.invoiceAt(i, k, w.n)
		}
		return w.addInvoice(ctx, i, ver, ts, del, v)
	}
	w.meta(d.id(tDocs, i, w.n), d.shard(tDocs, i), ver, ts, del)
	if del { // a tombstone: the key only
		w.ws, w.title, w.body, w.created, w.updated = append(w.ws, nil), append(w.title, nil), append(w.body, nil), append(w.created, nil), append(w.updated, nil)
	} else {
		ws := d.workspace(tDocs, i)
		title, body := d.title(i, k), d.body(i, k)
		created := time.UnixMilli(d.created(i, w.n)).UTC().Truncate(time.Second)
		w.ws, w.title, w.body, w.created, w.updated = append(w.ws, &ws), append(w.title, &title), append(w.body, &body), append(w.created, &created), append(w.updated, &ts)
	}
	return w.maybeFlush(ctx)
}

// addInvoice appends one version of invoice row i (a tombstone if del).
func (w *apiRowWriter) addInvoice(ctx context.Context, i int, ver uint64, ts time.Time, del bool, v apiInvoice) error {
	d := w.d
	w.meta(d.id(tInvoices, i, w.n), d.shard(tInvoices, i), ver, ts, del)
	if del {
		w.ws, w.amount, w.currency, w.status, w.issued, w.paid = append(w.ws, nil), append(w.amount, nil), append(w.currency, nil), append(w.status, nil), append(w.issued, nil), append(w.paid, nil)
		return w.maybeFlush(ctx)
	}
	ws := d.workspace(tInvoices, i)
	amt := decimal.New(v.cents, -2)
	cur, st := apiCurrencies[v.currency], apiStatusText[v.status]
	issued := time.Unix(v.issuedAt, 0).UTC()
	var paid *time.Time
	if v.status == stPaid || v.status == stRefunded {
		p := issued.Add(24 * time.Hour)
		paid = &p
	}
	w.ws, w.amount, w.currency, w.status, w.issued, w.paid = append(w.ws, &ws), append(w.amount, &amt), append(w.currency, &cur), append(w.status, &st), append(w.issued, &issued), append(w.paid, paid)
	return w.maybeFlush(ctx)
}

func (w *apiRowWriter) meta(id int64, shard int, ver uint64, ts time.Time, del bool) {
	w.maxVersion = max(w.maxVersion, ver)
	w.id = append(w.id, id)
	w.shard = append(w.shard, uint16(shard))
	w.version = append(w.version, ver)
	w.commitLSN = append(w.commitLSN, ver|3)
	w.commitTS = append(w.commitTS, ts)
	w.loadedAt = append(w.loadedAt, time.Now().UTC().Truncate(time.Second))
	var flag uint8
	if del {
		flag = 1
	}
	w.deleted = append(w.deleted, flag)
}

func (w *apiRowWriter) maybeFlush(ctx context.Context) error {
	if len(w.id) >= w.batch {
		return w.flush(ctx)
	}
	return nil
}

func (w *apiRowWriter) flush(ctx context.Context) error {
	if len(w.id) == 0 {
		return nil
	}
	b, err := w.conn.PrepareBatch(ctx, fmt.Sprintf("INSERT INTO %s.%s (%s)", chstore.Quote(w.db), chstore.Quote(w.tab.Name),
		strings.Join(apiQuoteAll(w.tab.InsertColumns()), ", ")))
	if err != nil {
		return fmt.Errorf("prepare %s: %w", w.tab.Name, err)
	}
	defer b.Abort() //nolint:errcheck // no-op after Send
	byName := map[string]any{"id": w.id, "workspace_id": w.ws, "_shard": w.shard, "_version": w.version, "_deleted": w.deleted,
		"_commit_lsn": w.commitLSN, "_commit_ts": w.commitTS, "_loaded_at": w.loadedAt}
	if w.table == tDocs {
		byName["title"], byName["body"], byName["created_at"], byName["updated_at"] = w.title, w.body, w.created, w.updated
	} else {
		byName["amount"], byName["currency"], byName["status"], byName["issued_at"], byName["paid_at"] = w.amount, w.currency, w.status, w.issued, w.paid
	}
	for j, name := range w.tab.InsertColumns() {
		col, ok := byName[name]
		if !ok {
			return fmt.Errorf("%s: no generated values for column %s", w.tab.Name, name)
		}
		if err := b.Column(j).Append(col); err != nil {
			return fmt.Errorf("append %s.%s: %w", w.tab.Name, name, err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("insert %s: %w", w.tab.Name, err)
	}
	w.rows += len(w.id)
	w.id, w.ws, w.title, w.body, w.created, w.updated = w.id[:0], w.ws[:0], w.title[:0], w.body[:0], w.created[:0], w.updated[:0]
	w.amount, w.currency, w.status, w.issued, w.paid = w.amount[:0], w.currency[:0], w.status[:0], w.issued[:0], w.paid[:0]
	w.shard, w.version, w.commitLSN, w.deleted, w.commitTS, w.loadedAt = w.shard[:0], w.version[:0], w.commitLSN[:0], w.deleted[:0], w.commitTS[:0], w.loadedAt[:0]
	return nil
}

func apiQuoteAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = chstore.Quote(n)
	}
	return out
}

// apiCompact runs one round of the loader's compaction keeper over the
// served tables and records what it did in res.
func apiCompact(ctx context.Context, store *chstore.Store, tcfg *tables.Config, res map[string]any) error {
	k := compact.New(compact.Config{Tables: loader.CompactTables(tcfg)}, store.Conn(), store.Database(), slog.Default(), nil)
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

// apiSettle waits until ClickHouse runs no merge of db (at most max).
func apiSettle(ctx context.Context, conn driver.Conn, db string, maxWait time.Duration) error {
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

// apiTableStat describes one loaded table.
type apiTableStat struct {
	Table  string `json:"table"`
	Live   uint64 `json:"live_rows"`
	Stored uint64 `json:"stored_rows"`
	Parts  uint64 `json:"active_parts"`
	Bytes  uint64 `json:"bytes_on_disk"`
}

func apiTableStats(ctx context.Context, store *chstore.Store) ([]apiTableStat, error) {
	var out []apiTableStat
	conn, db := store.Conn(), store.Database()
	for _, t := range []string{"documents", "invoices"} {
		s := apiTableStat{Table: t}
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

// ---- exactness ----

func apiGetJSON(ctx context.Context, client *http.Client, url string, out any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s: %w", url, err)
		}
	}
	return resp.StatusCode, nil
}

// checkIDs fetches n random documents (deleted ones and misses included)
// and compares them with their final version.
func (d *apiData) checkIDs(ctx context.Context, client *http.Client, base string, n int) error {
	r := rand.New(rand.NewPCG(uint64(d.c.seed), 99))
	for range n {
		i := r.IntN(d.c.docs)
		var doc struct {
			Copies []struct {
				Shard int            `json:"shard"`
				Row   map[string]any `json:"row"`
			} `json:"copies"`
		}
		id := d.id(tDocs, i, d.c.docs)
		code, err := apiGetJSON(ctx, client, fmt.Sprintf("%s/v1/documents/%d", base, id), &doc)
		if err != nil {
			return err
		}
		if d.docDeleted[i] {
			if code != http.StatusNotFound {
				return fmt.Errorf("inexact: deleted document %d (row %d) answered %d", id, i, code)
			}
		} else {
			u, _ := d.updates(tDocs, i)
			if code != http.StatusOK || len(doc.Copies) != 1 {
				return fmt.Errorf("inexact: document %d (row %d) answered %d with %d copies", id, i, code, len(doc.Copies))
			}
			cp := doc.Copies[0]
			if cp.Shard != d.shard(tDocs, i) || cp.Row["title"] != d.title(i, u) || cp.Row["body"] != d.body(i, u) ||
				cp.Row["id"] != strconv.FormatInt(id, 10) {
				return fmt.Errorf("inexact: document %d (row %d): shard %d title %v, want shard %d title %q",
					id, i, cp.Shard, cp.Row["title"], d.shard(tDocs, i), d.title(i, u))
			}
		}
		code, err = apiGetJSON(ctx, client, fmt.Sprintf("%s/v1/documents/%d", base, d.missID(i, d.c.docs)), nil)
		if err != nil {
			return err
		}
		if code != http.StatusNotFound {
			return fmt.Errorf("inexact: missing id %d answered %d", d.missID(i, d.c.docs), code)
		}
	}
	return nil
}

// apiRevenueAnswer is the part of a revenue answer that is checked.
type apiRevenueAnswer struct {
	Rows   []map[string]any `json:"rows"`
	Source string           `json:"source"`
}

// wantSource checks which path answered a revenue report: with
// --preaggregate every report the check asks for is whole days.
func (d *apiData) wantSource(url string, got apiRevenueAnswer) error {
	want := "live"
	if d.c.preagg {
		want = "preaggregate"
	}
	if got.Source != want {
		return fmt.Errorf("%s answered from %q, want %q", url, got.Source, want)
	}
	return nil
}

// expectRevenue sums the truth over [from, to) into buckets.
func (d *apiData) expectRevenue(from, to time.Time, bucket func(time.Time) string) map[string]apiRevenueCell {
	out := map[string]apiRevenueCell{}
	for day := range d.revenue {
		t := d.dayBase.AddDate(0, 0, day)
		if t.Before(from) || !t.Before(to) {
			continue
		}
		for cu, cell := range d.revenue[day] {
			if cell.invoices == 0 {
				continue
			}
			k := bucket(t) + "/" + apiCurrencies[cu]
			c := out[k]
			c.gross += cell.gross
			c.refunds += cell.refunds
			c.invoices += cell.invoices
			out[k] = c
		}
	}
	return out
}

func apiCents(v int64) string { return fmt.Sprintf("%d.%02d", v/100, v%100) }

// apiCompareRevenue checks an answer's rows against want, to the cent.
func apiCompareRevenue(what string, got apiRevenueAnswer, timeKey string, want map[string]apiRevenueCell) error {
	seen := map[string]bool{}
	for _, row := range got.Rows {
		k := fmt.Sprint(row[timeKey]) + "/" + fmt.Sprint(row["currency"])
		w, ok := want[k]
		if !ok {
			return fmt.Errorf("inexact: %s: unexpected row %v", what, row)
		}
		seen[k] = true
		if row["gross"] != apiCents(w.gross) || row["refunds"] != apiCents(w.refunds) || row["net"] != apiCents(w.gross-w.refunds) ||
			row["invoices"] != float64(w.invoices) {
			return fmt.Errorf("inexact: %s: row %v, want gross %s refunds %s invoices %d", what, row, apiCents(w.gross), apiCents(w.refunds), w.invoices)
		}
	}
	if len(seen) != len(want) {
		return fmt.Errorf("inexact: %s: %d rows, want %d", what, len(seen), len(want))
	}
	return nil
}

func apiDayKey(t time.Time) string { return t.Format(time.DateOnly) }
func apiMonthKey(t time.Time) string {
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC).Format(time.DateOnly)
}

// checkRevenue compares every month by day and the year by month.
func (d *apiData) checkRevenue(ctx context.Context, client *http.Client, base string) error {
	for m := range 12 {
		from := apiDataStart.AddDate(0, m, 0)
		to := from.AddDate(0, 1, 0)
		var got apiRevenueAnswer
		url := fmt.Sprintf("%s/v1/revenue?from=%s&to=%s&group_by=day", base, from.Format(time.DateOnly), to.Format(time.DateOnly))
		if code, err := apiGetJSON(ctx, client, url, &got); err != nil || code != http.StatusOK {
			return fmt.Errorf("%s: %d %v", url, code, err)
		}
		if err := apiCompareRevenue(url, got, "day", d.expectRevenue(from, to, apiDayKey)); err != nil {
			return err
		}
		if err := d.wantSource(url, got); err != nil {
			return err
		}
	}
	var got apiRevenueAnswer
	url := fmt.Sprintf("%s/v1/revenue?from=%s&to=%s&group_by=month,currency", base, apiDataStart.Format(time.DateOnly), apiDataEnd.Format(time.DateOnly))
	if code, err := apiGetJSON(ctx, client, url, &got); err != nil || code != http.StatusOK {
		return fmt.Errorf("%s: %d %v", url, code, err)
	}
	if err := apiCompareRevenue(url, got, "month", d.expectRevenue(apiDataStart, apiDataEnd, apiMonthKey)); err != nil {
		return err
	}
	return d.wantSource(url, got)
}

// ---- load generation ----

// request returns a scenario's next URL for a client's random source and
// the status it must answer.
func (d *apiData) request(name, base string) func(r *rand.Rand) (string, int) {
	switch name {
	case "by-id":
		return func(r *rand.Rand) (string, int) {
			i := d.docLive[r.IntN(len(d.docLive))]
			return fmt.Sprintf("%s/v1/documents/%d", base, d.id(tDocs, i, d.c.docs)), http.StatusOK
		}
	case "by-id-miss":
		return func(r *rand.Rand) (string, int) {
			return fmt.Sprintf("%s/v1/documents/%d", base, d.missID(r.IntN(d.c.docs), d.c.docs)), http.StatusNotFound
		}
	case "revenue-month":
		return func(r *rand.Rand) (string, int) {
			from := apiDataStart.AddDate(0, r.IntN(12), 0)
			return fmt.Sprintf("%s/v1/revenue?from=%s&to=%s&group_by=day", base, from.Format(time.DateOnly),
				from.AddDate(0, 1, 0).Format(time.DateOnly)), http.StatusOK
		}
	case "revenue-year":
		return func(*rand.Rand) (string, int) {
			return fmt.Sprintf("%s/v1/revenue?from=%s&to=%s&group_by=month,currency", base, apiDataStart.Format(time.DateOnly),
				apiDataEnd.Format(time.DateOnly)), http.StatusOK
		}
	}
	return nil
}

// apiScenarioResult is one scenario's numbers.
type apiScenarioResult struct {
	Name     string  `json:"name"`
	Via      string  `json:"via"`
	Clients  int     `json:"clients"`
	Requests int     `json:"requests"`
	Errors   int     `json:"errors"`
	RPS      float64 `json:"requests_per_second"`
	P50      float64 `json:"p50_ms"`
	P90      float64 `json:"p90_ms"`
	P99      float64 `json:"p99_ms"`
	Max      float64 `json:"max_ms"`
	Load1    float64 `json:"load1_after"`
	FirstErr string  `json:"first_error,omitempty"`
}

// apiRunLoad runs fn from clients goroutines for warmup+duration and returns
// the latencies of the measured part.
func apiRunLoad(ctx context.Context, clients int, rate float64, warmup, duration time.Duration, seed uint64,
	fn func(ctx context.Context, r *rand.Rand) error) (lat []time.Duration, errs int, firstErr error, wall time.Duration) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	measureFrom, end := start.Add(warmup), start.Add(warmup+duration)
	// With a rate, request i is due at start + i/rate whoever is free to
	// send it (open loop, as wrk2): a request that waits for a free client
	// counts its wait, so a slow answer cannot hide the ones it delayed
	// (coordinated omission). Without one, each client sends its next
	// request when it has its answer (closed loop).
	var slot atomic.Int64
	due := func() time.Time {
		if rate <= 0 {
			return time.Now()
		}
		at := start.Add(time.Duration(float64(slot.Add(1)-1) / rate * float64(time.Second)))
		time.Sleep(time.Until(at))
		return at
	}
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(c)))
			var mine []time.Duration
			var mineErrs int
			var mineFirst error
			for {
				t0 := due()
				if !t0.Before(end) || ctx.Err() != nil {
					break
				}
				err := fn(ctx, r)
				t1 := time.Now()
				if t0.Before(measureFrom) {
					continue
				}
				if err != nil {
					mineErrs++
					if mineFirst == nil {
						mineFirst = err
					}
					continue
				}
				mine = append(mine, t1.Sub(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			errs += mineErrs
			if firstErr == nil {
				firstErr = mineFirst
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return lat, errs, firstErr, time.Since(measureFrom)
}

func apiSummarize(name, via string, clients int, lat []time.Duration, errs int, firstErr error, wall time.Duration) apiScenarioResult {
	slices.Sort(lat)
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		i := int(p * float64(len(lat)))
		i = min(i, len(lat)-1)
		return float64(lat[i].Microseconds()) / 1000
	}
	r := apiScenarioResult{Name: name, Via: via, Clients: clients, Requests: len(lat), Errors: errs, RPS: float64(len(lat)) / wall.Seconds(),
		P50: pct(0.50), P90: pct(0.90), P99: pct(0.99), Load1: benchwork.LoadAvg1()}
	if len(lat) > 0 {
		r.Max = float64(lat[len(lat)-1].Microseconds()) / 1000
	}
	if firstErr != nil {
		r.FirstErr = firstErr.Error()
	}
	return r
}

func apiRunScenario(ctx context.Context, c apiConfig, name string, next func(*rand.Rand) (string, int), client *http.Client) (apiScenarioResult, error) {
	paced := ""
	if c.rate > 0 {
		paced = fmt.Sprintf(" at %.0f req/s (open loop)", c.rate)
	}
	fmt.Printf("scenario %s: %d clients%s, %s (+%s warm-up), load average before %.2f\n", name, c.clients, paced, c.duration, c.warmup, benchwork.LoadAvg1())
	lat, errs, first, wall := apiRunLoad(ctx, c.clients, c.rate, c.warmup, c.duration, uint64(c.seed), func(ctx context.Context, r *rand.Rand) error {
		url, want := next(r)
		code, err := apiGetJSON(ctx, client, url, nil)
		if err != nil {
			return err
		}
		if code != want {
			return fmt.Errorf("%s answered %d, want %d", url, code, want)
		}
		return nil
	})
	if ctx.Err() != nil {
		return apiScenarioResult{}, ctx.Err()
	}
	r := apiSummarize(name, "http", c.clients, lat, errs, first, wall)
	r.print()
	return r, nil
}

// print writes the result as one line as soon as it is known (a shared
// ClickHouse may be restarted by someone's test before the table is printed).
func (r apiScenarioResult) print() {
	fmt.Printf("  -> %s via %s, %d clients: %d requests, %d errors, %.1f req/s, p50 %.2f p90 %.2f p99 %.2f max %.2f ms, load1 %.2f\n",
		r.Name, r.Via, r.Clients, r.Requests, r.Errors, r.RPS, r.P50, r.P90, r.P99, r.Max, r.Load1)
}

func apiPrintResults(rs []apiScenarioResult) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tvia\tclients\trequests\terrors\treq/s\tp50 ms\tp90 ms\tp99 ms\tmax ms\tload1\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.1f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", r.Name, r.Via, r.Clients, r.Requests, r.Errors, r.RPS, r.P50, r.P90, r.P99, r.Max, r.Load1)
	}
	tw.Flush()
	for _, r := range rs {
		if r.FirstErr != "" {
			fmt.Printf("%s: first error: %s\n", r.Name, r.FirstErr)
		}
	}
}
