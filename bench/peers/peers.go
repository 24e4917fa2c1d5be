// Package peers is `bench peers`: it runs Tributary's reader
// (cmd/cdc-reader) and Debezium's PostgreSQL connector (embedded engine,
// bench/peers/debezium) on the same committed workload of one shard into
// the same Kafka, one after the other, measures both from outside the same
// way and prints the ratios.
// bench/peers/run.sh builds everything and runs it; docs/peers.md has the
// method and results. It is a benchmark: it prints numbers, asserts none.
package peers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tributary/tributary/bench/internal/benchwork"
	"github.com/tributary/tributary/internal/flagenv"
)

type config struct {
	shard      int
	dsn        string
	brokers    string
	cases      []string
	systems    []string
	work       benchwork.Params // the throughput cases
	partitions int
	poll       time.Duration
	timeout    time.Duration
	cdcReader  string
	java       string
	javaOpts   []string
	jar        string
	workDir    string
	jsonOut    string
	keep       bool
	tuned      map[string]string // properties of the debezium-tuned run
	lowlat     map[string]string // properties of the debezium-lowlat run
	lat        latencyConfig
}

const usage = `bench peers — Tributary's cdc-reader and Debezium's PostgreSQL connector on the
same shard, workload and Kafka, measured alike from outside; prints a table
and the ratios (docs/peers.md). Run it through bench/peers/run.sh (or make
bench-peers), which builds the cdc-reader and the Debezium jar and takes
/tmp/tributary-bench.lock.

Two parts, in one run:

  throughput  for each --cases workload, committed once before any system
              runs: each --systems system alone drains it from its own slot;
              changes/s, CPU per change, peak RSS, start-up.
  latency     for each --latency-systems system alone, streaming live while
              a paced workload commits --latency-rates changes/s (one phase
              per rate, --latency-seconds each, after --latency-warmup):
              commit → Kafka latency of every change, p50/p95/p99/max.
              Commit time: the harness's clock when the INSERT's implicit
              COMMIT returned; Kafka time: the broker's LogAppendTime (the
              data topics are created with message.timestamp.type=
              LogAppendTime). --latency-rates "" skips this part.

Systems: tributary (cmd/cdc-reader, its defaults); debezium (the connector's
and the JVM's defaults: max heap 1/4 of RAM); debezium-xmx<size>, e.g.
debezium-xmx128m (the same with -Xmx<size> -XX:+ExitOnOutOfMemoryError;
such a run may fail, which is reported, not fatal); debezium-tuned (the
--debezium-tuned properties); debezium-lowlat (the --debezium-lowlat
properties). --java-opts applies to every Debezium run.`

func parseFlags(args []string) (config, error) {
	var c config
	var cases, systems, javaOpts, tuned, lowlat, rates, latSystems string
	fs := flagenv.New("bench peers", usage)
	fs.SetOutput(os.Stdout)
	fs.Int(&c.shard, "shard", "", 0, "shard whose superuser DSN ($TRIBUTARY_SHARD_<n>_DSN) is used")
	fs.String(&c.brokers, "kafka-brokers", "TRIBUTARY_KAFKA_BROKERS", "", "Kafka brokers (required)")
	fs.String(&cases, "cases", "", "a,b", "throughput cases: a = --rows inserts in one transaction, b = --rows inserts in --txn-rows transactions, c = --updates of --row-bytes rows (\"\": none)")
	c.work.AddFlags(fs, 500_000)
	fs.String(&systems, "systems", "", "tributary,debezium,debezium-xmx128m", "systems of the throughput part, run in this order on every case (also: debezium-tuned, debezium-lowlat, debezium-xmx<any size>)")
	fs.Int(&c.partitions, "partitions", "", 4, "partitions of every data topic")
	fs.Duration(&c.poll, "poll", "", 20*time.Millisecond, "how often CPU, the slot and Kafka's high watermarks are sampled")
	fs.Duration(&c.timeout, "timeout", "", 15*time.Minute, "give up a run (or a latency phase's drain) after this long")
	fs.String(&c.cdcReader, "cdc-reader", "", "", "cdc-reader binary (run.sh builds it)")
	fs.String(&c.java, "java", "", "java", "java binary (Java 17)")
	fs.String(&javaOpts, "java-opts", "", "", "JVM options for every Debezium run, space-separated (default: none, the JVM's own defaults)")
	fs.String(&c.jar, "jar", "", "", "bench/peers/debezium/target/peers-debezium.jar (run.sh builds it)")
	fs.String(&c.workDir, "work-dir", "", "", "directory for configs, offsets and logs (default: a new one under /tmp)")
	fs.String(&c.jsonOut, "json", "", "", "also write the results as JSON to this file")
	fs.String(&tuned, "debezium-tuned", "", debeziumTunedDefault, "connector properties of the debezium-tuned run (k=v,k=v)")
	fs.String(&lowlat, "debezium-lowlat", "", debeziumLowlatDefault, "connector properties of the debezium-lowlat run (k=v,k=v)")
	fs.String(&rates, "latency-rates", "", "1000,5000,10000,20000", "latency part: target changes/s of the paced phases, in this order (\"\": skip the latency part)")
	fs.String(&latSystems, "latency-systems", "", "tributary,debezium,debezium-lowlat", "systems of the latency part, run in this order")
	fs.Duration(&c.lat.phase, "latency-seconds", "", 15*time.Second, "latency part: how long each rate's phase commits")
	fs.Duration(&c.lat.warmup, "latency-warmup", "", 10*time.Second, "latency part: unmeasured phase at the median rate before the measured ones (JIT, connections, caches)")
	fs.Int(&c.lat.txnRows, "latency-txn-rows", "", 10, "latency part: rows inserted per transaction (one INSERT, autocommit)")
	fs.Int(&c.lat.workers, "latency-workers", "", 8, "latency part: connections committing the paced transactions")
	fs.String(&c.lat.csv, "latency-csv", "", "", "latency part: also append every measured change (system, rate, id, partition, commit and append time, latency) to this CSV file")
	fs.BoolVar(&c.keep, "keep", false, "keep tables, slots, publications and topics (for debugging)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.dsn = os.Getenv(fmt.Sprintf("TRIBUTARY_SHARD_%d_DSN", c.shard))
	c.cases = flagenv.List(cases)
	c.systems = flagenv.List(systems)
	c.lat.systems = flagenv.List(latSystems)
	c.javaOpts = strings.Fields(javaOpts)
	var err error
	if c.tuned, err = parseTuning("--debezium-tuned", tuned); err != nil {
		return c, err
	}
	if c.lowlat, err = parseTuning("--debezium-lowlat", lowlat); err != nil {
		return c, err
	}
	for _, r := range flagenv.List(rates) {
		n, err := strconv.Atoi(r)
		if err != nil || n < 1 {
			return c, fmt.Errorf("--latency-rates: %q is not a positive integer", r)
		}
		c.lat.rates = append(c.lat.rates, n)
	}
	return c, c.validate()
}

func (c *config) validate() error {
	var errs []error
	if c.dsn == "" {
		errs = append(errs, fmt.Errorf("$TRIBUTARY_SHARD_%d_DSN is not set (source .stack/stack.env)", c.shard))
	}
	if c.brokers == "" {
		errs = append(errs, errors.New("--kafka-brokers or $TRIBUTARY_KAFKA_BROKERS is required"))
	}
	var all []string
	if len(c.cases) > 0 {
		all = c.systems
	}
	if len(c.lat.rates) > 0 {
		all = append(append([]string(nil), all...), c.lat.systems...)
	}
	for _, s := range all {
		if !knownSystem(s) {
			errs = append(errs, fmt.Errorf("unknown system %q (%s)", s, strings.Join(systemNames, ", ")))
		}
		if s == "tributary" && c.cdcReader == "" {
			errs = append(errs, errors.New("--cdc-reader is required to run tributary"))
		}
		if strings.HasPrefix(s, "debezium") && c.jar == "" {
			errs = append(errs, errors.New("--jar is required to run debezium"))
		}
	}
	if c.partitions < 1 {
		errs = append(errs, errors.New("--partitions must be >= 1"))
	}
	errs = append(errs, c.work.Validate()...)
	if c.lat.txnRows < 1 || c.lat.workers < 1 || c.lat.phase <= 0 || c.lat.warmup < 0 {
		errs = append(errs, errors.New("--latency-txn-rows and --latency-workers must be >= 1, --latency-seconds > 0, --latency-warmup >= 0"))
	}
	if len(c.cases) == 0 && len(c.lat.rates) == 0 {
		errs = append(errs, errors.New("nothing to run: no --cases and no --latency-rates"))
	}
	return errors.Join(errs...)
}

// Run is `bench peers`: args are its flags. run.sh builds the cdc-reader
// and the Debezium jar and passes them (--cdc-reader, --jar).
func Run(ctx context.Context, args []string) error {
	c, err := parseFlags(args)
	if err != nil {
		return err
	}
	return run(ctx, c)
}

func run(ctx context.Context, c config) error {
	if c.workDir == "" {
		d, err := os.MkdirTemp("", "tributary-peers-")
		if err != nil {
			return err
		}
		c.workDir = d
	}
	b, err := newBench(ctx, c)
	if err != nil {
		return err
	}
	defer b.close()
	fmt.Printf("bench peers: shard %d, kafka %s, cases %s, systems %s, latency rates %v of %s, logs in %s, load average %s\n",
		c.shard, c.brokers, strings.Join(c.cases, ","), strings.Join(c.systems, ","), c.lat.rates,
		strings.Join(c.lat.systems, ","), c.workDir, benchwork.LoadAvg())
	var results []runResult
	var lats []latResult
	report := func() error {
		printTable(os.Stdout, results)
		printLatency(os.Stdout, lats)
		if c.jsonOut != "" {
			return writeJSON(c, results, lats)
		}
		return nil
	}
	for _, name := range c.cases {
		wc, err := newCase(name, c)
		if err != nil {
			return err
		}
		rs, err := b.runCase(ctx, wc)
		results = append(results, rs...)
		if err != nil {
			_ = report()
			return fmt.Errorf("case %s: %w", name, err)
		}
	}
	if len(c.lat.rates) > 0 {
		for i, name := range c.lat.systems {
			ls, err := b.runLatency(ctx, name, i)
			lats = append(lats, ls...)
			if err != nil {
				_ = report()
				return fmt.Errorf("latency, %s: %w", name, err)
			}
		}
	}
	return report()
}

// runCase creates the case's table, primes every system (slot and
// publication of its own), commits the workload once, then runs each system
// alone on it.
func (b *bench) runCase(ctx context.Context, wc *workCase) ([]runResult, error) {
	table := fmt.Sprintf("peers_%s_%s", b.runID, wc.name)
	fmt.Printf("case %s: %s (table %s)\n", wc.name, wc.desc, table)
	cl := &cleanups{}
	defer func() {
		if !b.cfg.keep {
			cl.run(b)
		}
	}()
	if err := b.createTable(ctx, wc, table, cl); err != nil {
		return nil, err
	}
	var systems []*system
	for _, name := range b.cfg.systems {
		s, err := newSystem(name, table, filepath.Join(b.cfg.workDir, table), b.cfg)
		if err != nil {
			return nil, err
		}
		if err := b.prepare(ctx, s, cl, nil); err != nil {
			return nil, err
		}
		if err := b.prime(ctx, s); err != nil {
			return nil, err
		}
		systems = append(systems, s)
	}
	target, err := runWorkload(ctx, b.cfg.dsn, wc, table)
	if err != nil {
		return nil, err
	}
	var results []runResult
	for _, s := range systems {
		r, err := b.measure(ctx, s, wc, target)
		if err != nil && (ctx.Err() != nil || s.kind == "tributary") {
			return results, err
		}
		if err != nil {
			// A Debezium variant that fails (e.g. out of heap under a small
			// -Xmx) is a result, not the end of the bench.
			r.Error = err.Error()
			fmt.Printf("  %-15s FAILED: %v\n", s.name, err)
			results = append(results, r)
			continue
		}
		printRun(r)
		results = append(results, r)
	}
	return results, nil
}
