// Package sustain is `bench sustain`: the rate the whole pipeline sustains over every shard
// without a growing backlog, measured against a running pipeline (make
// demo), with each process's CPU and memory.
//
// It offers loadgen's traffic (documents created, edited with TOASTed
// bodies, deleted; invoices issued, paid, refunded, corrected; hot
// workspaces) at each rate of --rates (row changes/s) for --step, sampling
// once a second:
// the changes the readers capture, the records the loader applies, the
// loader group's backlog in Kafka (records not yet in ClickHouse), the API's
// staleness, and /proc for CPU and resident memory. A step is sustained when
// the backlog did not grow over the step's second half by more than one
// second of the step's changes, and the API's answers were less than 5 s
// stale at its end. After each step the traffic stops and the backlog
// drains before the next one (the drain time is reported).
//
// With --rows-per-op N > 1 the traffic is loadgen's bulk mode: each
// operation is one transaction changing N rows (multi-row inserts, updates,
// deletes; small bodies), so the shards' per-transaction cost no longer
// caps the rate and what is measured is the pipeline behind them. Per step
// it also prints where the loader's time went (its stage counters) and the
// readers' produce-ack time.
package sustain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tributary/tributary/bench/internal/benchwork"
	"github.com/tributary/tributary/internal/flagenv"
	"github.com/tributary/tributary/internal/loadgen"
	"github.com/tributary/tributary/internal/ring"
)

const usage = `bench sustain — the rate the pipeline sustains over every shard without a
growing backlog, with CPU and memory per process (a running pipeline: make demo).

Offers loadgen's traffic at each of --rates (row changes/s over all shards)
for --step, then stops it and waits for the backlog to drain (a step also waits for a
backlog left by anything before it to drain first). By default
every operation is one realistic single-row transaction (TOASTed 8 kB
bodies): the shards' per-transaction cost dominates. --rows-per-op N makes
every operation one transaction that changes N rows (loadgen's bulk mode,
bodies of --bulk-body-bytes), at --rates/N transactions/s, so that the
pipeline behind the shards is what is measured. Per step it prints the
changes/s the readers captured, the records/s the loader applied, the
backlog's growth, the API's staleness, and each process's cores and peak
resident memory. Shard DSNs come from the
environment as deploy/local/stack.sh writes them; process ids from the
stack's and the demo's pid files under $TRIBUTARY_HOME.

Example:
  set -a; . .stack/stack.env; set +a
  flock /tmp/tributary-bench.lock go run ./bench sustain --rates 200,500,1000,2000 --step 60s
  flock /tmp/tributary-bench.lock go run ./bench sustain --rows-per-op 100 --rates 2000,5000,10000,20000 --step 60s`

type config struct {
	apiURL        string
	dsns          map[int]string // by shard number
	home          string
	ringFile      string
	rates         []int
	step          time.Duration
	drain         time.Duration
	workspaces    int
	bodyBytes     int
	rowsPerOp     int
	bulkBody      int
	workers       int
	loaderMetrics string
	readerMetrics []string
	keepGoing     bool
	jsonOut       string
}

// Run is `bench sustain`: args are its flags.
func Run(ctx context.Context, args []string) error {
	var c config
	var rates, readerMetrics, fleetFile string
	demo, err := benchwork.DemoOf(os.Getenv)
	if err != nil {
		return err
	}
	fs := flagenv.New("bench sustain", usage)
	fs.String(&fleetFile, "fleet", "TRIBUTARY_FLEET", "", "fleet file: the shards loadgen writes to (required; the stack's is in stack.env)")
	fs.String(&c.apiURL, "api", "TRIBUTARY_API_URL", demo.APIURL, "the API's base URL (default: the demo's on this stack, 8080 + $TRIBUTARY_PORT_OFFSET)")
	fs.String(&c.ringFile, "ring-map", "", "deploy/local/ringmap.json", "the ring map the demo places workspaces by (loadgen writes each workspace on its owner)")
	fs.String(&rates, "rates", "", "200,500,1000,2000", "offered row changes/s over all shards (operations/s x --rows-per-op), one step each, in order")
	fs.Duration(&c.step, "step", "", 60*time.Second, "how long each rate is offered")
	fs.Duration(&c.drain, "drain", "", 2*time.Minute, "after a step, how long to wait at most for the backlog to drain")
	fs.Int(&c.workspaces, "workspaces", "", 50, "workspaces loadgen writes to (a few are hot)")
	fs.Int(&c.bodyBytes, "body-bytes", "", 8192, "size of a large document body (TOASTed above ~2 kB)")
	fs.Int(&c.rowsPerOp, "rows-per-op", "", 1, "rows changed by each operation (one transaction); > 1: loadgen's bulk mode (multi-row inserts, updates, deletes)")
	fs.Int(&c.bulkBody, "bulk-body-bytes", "", 200, "with --rows-per-op > 1: size of an inserted document's body (TOASTed above ~2 kB)")
	fs.Int(&c.workers, "workers", "", 16, "loadgen's concurrent writers")
	fs.String(&c.loaderMetrics, "loader-metrics", "", demo.LoaderMetrics, "the loader's metrics address (default: the demo's, 9101 + $TRIBUTARY_PORT_OFFSET)")
	fs.String(&readerMetrics, "reader-metrics", "", "", "the readers' metrics addresses, comma-separated (default: the demo's, 127.0.0.1:9110 + $TRIBUTARY_PORT_OFFSET + shard)")
	fs.BoolVar(&c.keepGoing, "keep-going", false, "offer every rate even after one was not sustained")
	fs.String(&c.jsonOut, "json", "", "", "also write the results (and every sample) as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, r := range flagenv.List(rates) {
		n, err := strconv.Atoi(r)
		if err != nil || n < 1 {
			return fmt.Errorf("--rates: %q is not a positive integer", r)
		}
		c.rates = append(c.rates, n)
	}
	if len(c.rates) == 0 {
		return errors.New("--rates: at least one rate")
	}
	if c.step < 10*time.Second {
		return fmt.Errorf("--step %s: at least 10s (the verdict compares the step's halves)", c.step)
	}
	if c.workers < 1 || c.workspaces < 1 || c.bodyBytes < 0 || c.rowsPerOp < 1 || c.bulkBody < 0 {
		return errors.New("--workers, --workspaces and --rows-per-op must be >= 1, --body-bytes and --bulk-body-bytes >= 0")
	}
	if c.dsns, err = benchwork.ShardDSNs(fleetFile); err != nil {
		return err
	}
	if c.home = os.Getenv("TRIBUTARY_HOME"); c.home == "" {
		return errors.New("TRIBUTARY_HOME is not set: set -a; . .stack/stack.env; set +a")
	}
	c.readerMetrics = flagenv.List(readerMetrics)
	if len(c.readerMetrics) == 0 {
		c.readerMetrics = demo.ReaderMetrics(c.dsns)
	}
	return runSustain(ctx, c)
}

// sample is one second of a step.
type sample struct {
	T          float64 `json:"t"` // seconds since the step began
	Ops        int64   `json:"loadgen_ops"`
	GenRows    int64   `json:"loadgen_rows"`        // rows changed by committed operations
	Changes    float64 `json:"reader_changes"`      // cumulative, all readers
	Records    float64 `json:"loader_records"`      // cumulative, consumed
	Rows       float64 `json:"loader_rows"`         // cumulative, inserted
	Backlog    float64 `json:"loader_backlog"`      // records in Kafka not yet in ClickHouse
	ReaderLagB float64 `json:"reader_lag_bytes"`    // all readers
	Staleness  float64 `json:"api_staleness_max_s"` // -1: the API did not answer
}

type proc struct {
	Name      string  `json:"name"`
	Cores     float64 `json:"cores"`
	PeakRSSMB float64 `json:"peak_rss_mb"` // max sampled VmRSS; 0 when not meaningful (PostgreSQL)
}

type step struct {
	OfferedChanges int      `json:"offered_changes_per_s"`
	RowsPerOp      int      `json:"rows_per_op"`
	OfferedOps     float64  `json:"offered_ops_per_s"`
	AchievedOps    float64  `json:"achieved_ops_per_s"`
	AchievedRows   float64  `json:"loadgen_rows_per_s"`
	OpErrors       int64    `json:"op_errors"`
	ChangesPerS    float64  `json:"reader_changes_per_s"`
	RecordsPerS    float64  `json:"loader_records_per_s"`
	RowsPerS       float64  `json:"loader_rows_per_s"`
	BacklogStart   float64  `json:"backlog_at_half"`
	BacklogEnd     float64  `json:"backlog_at_end"`
	BacklogMax     float64  `json:"backlog_max"`
	StalenessEnd   float64  `json:"staleness_at_end_s"`
	StalenessMax   float64  `json:"staleness_max_s"`
	Sustained      bool     `json:"sustained"`
	Why            string   `json:"why"`
	DrainSeconds   float64  `json:"drain_seconds"` // -1: did not drain within --drain
	MachineCores   float64  `json:"machine_busy_cores"`
	Load1          float64  `json:"load1_at_end"`
	Procs          []proc   `json:"processes"`
	Samples        []sample `json:"samples"`
	WallSeconds    float64  `json:"wall_seconds"`
	ChangesPerOpAv float64  `json:"changes_per_op"`
	Pipeline       pipeline `json:"pipeline"`
}

func runSustain(ctx context.Context, c config) error {
	m, err := ring.Load(c.ringFile)
	if err != nil {
		return err
	}
	procs, err := procs(c.home)
	if err != nil {
		return err
	}
	if _, err := scrape(ctx, c); err != nil {
		return err
	}
	// One generator for every step: later steps edit, pay and delete what
	// earlier ones created.
	gen, err := loadgen.New(ctx, loadgen.Config{DSNs: c.dsns, Ring: m, Workspaces: c.workspaces,
		BodyBytes: c.bodyBytes, Workers: c.workers, Rate: 1, RowsPerOp: c.rowsPerOp, BulkBodyBytes: c.bulkBody},
		slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		return err
	}
	defer gen.Close()
	mode := "single-row operations"
	if c.rowsPerOp > 1 {
		mode = fmt.Sprintf("bulk operations of %d rows (bodies %d B)", c.rowsPerOp, c.bulkBody)
	}
	fmt.Printf("sustain: %d shards, rates %v changes/s, %s each, %s; %s; load average %s\n",
		len(c.dsns), c.rates, c.step, mode, benchwork.CPUModel(), benchwork.LoadAvg())
	fmt.Printf("processes: %s\n", strings.Join(procNames(procs), ", "))

	var steps []step
	for _, r := range c.rates {
		st, err := sustainStep(ctx, c, gen, procs, r)
		if err != nil {
			return err
		}
		steps = append(steps, st)
		printStep(st)
		if !st.Sustained && !c.keepGoing {
			fmt.Println("not sustained: stopping (--keep-going offers the remaining rates)")
			break
		}
	}
	printSustainTable(os.Stdout, steps)
	if c.jsonOut != "" {
		b, err := json.MarshalIndent(map[string]any{
			"benchmark": "sustain", "shards": len(c.dsns), "step_seconds": c.step.Seconds(),
			"rows_per_op": c.rowsPerOp, "bulk_body_bytes": c.bulkBody, "body_bytes": c.bodyBytes,
			"cpu": benchwork.CPUModel(), "steps": steps,
		}, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(c.jsonOut, b, 0o644); err != nil {
			return err
		}
		fmt.Println("json:", c.jsonOut)
	}
	return nil
}

// sustainStep offers rate ops/s for c.step, then drains.
func sustainStep(ctx context.Context, c config, gen *loadgen.Generator, procs []process, rate int) (step, error) {
	st := step{OfferedChanges: rate, RowsPerOp: c.rowsPerOp, OfferedOps: float64(rate) / float64(c.rowsPerOp)}
	// A backlog left by whatever ran before (another benchmark's traffic)
	// would drain during the step and hide its own: wait for it first.
	settle, err := waitDrained(ctx, c, 2000)
	if err != nil {
		return st, err
	}
	if settle < 0 {
		return st, fmt.Errorf("the loader's backlog did not fall below 2000 records with fresh answers within --drain %s: the pipeline is still busy", c.drain)
	}
	ops0, errs0, rows0 := gen.Stats.Ops.Load(), gen.Stats.Errors.Load(), gen.Stats.Rows.Load()
	full0, err := scrapeFull(ctx, c)
	if err != nil {
		return st, err
	}
	cpu0 := make([]time.Duration, len(procs))
	for i, p := range procs {
		cpu0[i] = p.cpu()
	}
	peak := make([]int64, len(procs))
	mach0 := benchwork.ReadMachineCPU()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- gen.RunFor(ctx, st.OfferedOps, c.step) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	sample := func() error {
		s, err := scrape(ctx, c)
		if err != nil {
			return err
		}
		s.T, s.Ops, s.GenRows = time.Since(start).Seconds(), gen.Stats.Ops.Load()-ops0, gen.Stats.Rows.Load()-rows0
		st.Samples = append(st.Samples, s)
		for i, p := range procs {
			peak[i] = max(peak[i], p.rssKB())
		}
		return nil
	}
	if err := sample(); err != nil {
		return st, err
	}
	running := true
	for running {
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case err := <-done:
			if err != nil {
				return st, err
			}
			running = false
		case <-tick.C:
		}
		if err := sample(); err != nil {
			return st, err
		}
	}
	wall := time.Since(start)
	full1, err := scrapeFull(ctx, c)
	if err != nil {
		return st, err
	}
	st.Pipeline = derive(full0, full1, wall)
	st.WallSeconds = wall.Seconds()
	st.MachineCores = benchwork.ReadMachineCPU().BusyCoresSince(mach0)
	st.Load1 = benchwork.LoadAvg1()
	groups := map[string]*proc{}
	var order []string
	for i, p := range procs {
		g, ok := groups[p.group]
		if !ok {
			g = &proc{Name: p.group}
			groups[p.group] = g
			order = append(order, p.group)
		}
		g.Cores += (p.cpu() - cpu0[i]).Seconds() / wall.Seconds()
		if p.rss {
			g.PeakRSSMB = max(g.PeakRSSMB, float64(peak[i])/1024)
		}
	}
	for _, n := range order {
		st.Procs = append(st.Procs, *groups[n])
	}
	st.OpErrors = gen.Stats.Errors.Load() - errs0
	verdict(&st)

	// Drain: until the backlog is back to what it was before the step (the
	// readers' watermark records keep it from reaching zero) and the API is
	// fresh, or --drain runs out.
	st.DrainSeconds, err = waitDrained(ctx, c, st.Samples[0].Backlog+100)
	return st, err
}

// waitDrained waits until the loader's backlog is at most limit records
// and the API's answers are less than 5 s stale, for at most --drain; it
// returns how long that took (-1: it did not happen in time).
func waitDrained(ctx context.Context, c config, limit float64) (float64, error) {
	start := time.Now()
	for time.Since(start) < c.drain {
		s, err := scrape(ctx, c)
		if err != nil {
			return -1, err
		}
		if s.Backlog <= limit && s.Staleness >= 0 && s.Staleness < 5 {
			return time.Since(start).Seconds(), nil
		}
		select {
		case <-ctx.Done():
			return -1, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return -1, nil
}

// verdict fills the rates and decides whether the step was sustained.
func verdict(st *step) {
	first, last := st.Samples[0], st.Samples[len(st.Samples)-1]
	secs := last.T - first.T
	if secs <= 0 {
		st.Why = "no samples"
		return
	}
	st.AchievedOps = float64(last.Ops-first.Ops) / secs
	st.AchievedRows = float64(last.GenRows-first.GenRows) / secs
	st.ChangesPerS = (last.Changes - first.Changes) / secs
	st.RecordsPerS = (last.Records - first.Records) / secs
	st.RowsPerS = (last.Rows - first.Rows) / secs
	if last.Ops > first.Ops {
		st.ChangesPerOpAv = (last.Changes - first.Changes) / float64(last.Ops-first.Ops)
	}
	half := st.Samples[len(st.Samples)/2]
	st.BacklogStart, st.BacklogEnd, st.StalenessEnd = half.Backlog, last.Backlog, last.Staleness
	for _, s := range st.Samples {
		st.BacklogMax = max(st.BacklogMax, s.Backlog)
		st.StalenessMax = max(st.StalenessMax, s.Staleness)
	}
	allowed := math.Max(st.ChangesPerS, 100) // one second of the step's changes
	switch {
	case last.Staleness < 0:
		st.Why = "the API did not answer /v1/shards at the end"
	case st.BacklogEnd-st.BacklogStart > allowed:
		st.Why = fmt.Sprintf("backlog grew by %.0f records over the second half (allowed %.0f)", st.BacklogEnd-st.BacklogStart, allowed)
	case last.Staleness >= 5:
		st.Why = fmt.Sprintf("answers %.1f s stale at the end (allowed < 5 s)", last.Staleness)
	case st.AchievedRows < 0.9*float64(st.OfferedChanges):
		// The pipeline kept up with what the generator managed; say so.
		st.Sustained = true
		st.Why = fmt.Sprintf("kept up, but the generator reached only %.0f of %d changes/s (%.0f of %.0f ops/s)",
			st.AchievedRows, st.OfferedChanges, st.AchievedOps, st.OfferedOps)
	default:
		st.Sustained = true
		st.Why = "kept up"
	}
}

func printStep(st step) {
	fmt.Printf("step %d changes/s (%.0f ops/s of %d rows): achieved %.0f ops/s, %.0f rows/s (%d errors), readers %.0f changes/s (%.2f per op), loader %.0f records/s, %.0f rows/s;"+
		" backlog %.0f -> %.0f (max %.0f); staleness %.1f s at end (max %.1f); machine %.2f cores busy, load %.1f; drained in %s: %s\n",
		st.OfferedChanges, st.OfferedOps, st.RowsPerOp, st.AchievedOps, st.AchievedRows, st.OpErrors, st.ChangesPerS, st.ChangesPerOpAv, st.RecordsPerS, st.RowsPerS,
		st.BacklogStart, st.BacklogEnd, st.BacklogMax, st.StalenessEnd, st.StalenessMax, st.MachineCores, st.Load1,
		drainText(st.DrainSeconds), st.Why)
	p := st.Pipeline
	fmt.Printf("  loader: %.0f batches of %.0f records, applying stages busy %.0f%% of the time (above 100%%: they overlap); busy per stage (s/s): %s\n",
		p.LoaderBatches, p.LoaderRecordsPerBatch, 100*p.LoaderApplyBusy, stageList(p.LoaderStageBusy, "%.2f"))
	fmt.Printf("  loader per batch (ms): %s\n", stageList(p.LoaderStageMSPerBatch, "%.0f"))
	fmt.Printf("  readers: %.0f records/s produced, mean produce ack %.1f ms, lag at end %.1f s (largest shard)\n",
		p.ReaderRecordsPerS, p.ReaderProduceMS, p.ReaderLagSecondsMax)
}

func drainText(s float64) string {
	if s < 0 {
		return "not within --drain"
	}
	return strconv.FormatFloat(s, 'f', 0, 64) + " s"
}

func printSustainTable(w io.Writer, steps []step) {
	if len(steps) == 0 {
		return
	}
	benchwork.Table(w, "offered changes/s\tops/s\tgenerated rows/s\tcaptured changes/s\tloader rec/s\tbacklog half->end\tstale end s\tloader stages busy\tsustained\tload1\t", steps, func(st step) string {
		return fmt.Sprintf("%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f->%.0f\t%.1f\t%.0f%%\t%v\t%.1f\t", st.OfferedChanges, st.AchievedOps, st.AchievedRows, st.ChangesPerS,
			st.RecordsPerS, st.BacklogStart, st.BacklogEnd, st.StalenessEnd, 100*st.Pipeline.LoaderApplyBusy, st.Sustained, st.Load1)
	})
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := "process"
	for _, st := range steps {
		header += fmt.Sprintf("\t%d: cores\tpeak MB", st.OfferedChanges)
	}
	fmt.Fprintln(tw, header+"\t")
	defer fmt.Fprintln(w, "(readers: cores of all of them together, MB of the largest; PostgreSQL: every backend's CPU, memory not shown — it is mostly shared buffers)")
	for i, p := range steps[0].Procs {
		row := p.Name
		for _, st := range steps {
			q := st.Procs[i]
			mb := "—"
			if q.PeakRSSMB > 0 {
				mb = strconv.FormatFloat(q.PeakRSSMB, 'f', 0, 64)
			}
			row += fmt.Sprintf("\t%.2f\t%s", q.Cores, mb)
		}
		fmt.Fprintln(tw, row+"\t")
	}
	tw.Flush()
}
