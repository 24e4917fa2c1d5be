// Command peers runs Tributary's reader (cmd/cdc-reader) and Debezium's
// PostgreSQL connector (embedded engine, bench/peers/debezium) on the same
// committed workload of one shard into the same Kafka, one after the other,
// measures both from outside the same way and prints the ratios.
// bench/peers/run.sh builds everything and runs it; docs/peers.md has the
// method and results. It is a benchmark: it prints numbers, asserts none.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

type config struct {
	shard         int
	dsn           string
	brokers       string
	cases         []string
	systems       []string
	rows, txnRows int
	titleBytes    int
	updates       int
	updateRows    int
	updateTxnRows int
	rowBytes      int
	partitions    int
	poll          time.Duration
	timeout       time.Duration
	cdcReader     string
	java          string
	javaOpts      []string
	jar           string
	workDir       string
	jsonOut       string
	keep          bool
	tuned         map[string]string // properties of the debezium-tuned run
}

func parseFlags(args []string) (config, error) {
	var c config
	var cases, systems, javaOpts, tuned string
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	fs.IntVar(&c.shard, "shard", 0, "shard whose superuser DSN ($TRIBUTARY_SHARD_<n>_DSN) is used")
	fs.StringVar(&c.brokers, "kafka-brokers", os.Getenv("TRIBUTARY_KAFKA_BROKERS"), "Kafka brokers (default $TRIBUTARY_KAFKA_BROKERS)")
	fs.StringVar(&cases, "cases", "a,b", "cases: a = --rows inserts in one transaction, b = --rows inserts in --txn-rows transactions, c = --updates of --row-bytes rows")
	fs.StringVar(&systems, "systems", "tributary,debezium,debezium-tuned", "systems, run in this order on every case")
	fs.IntVar(&c.rows, "rows", 500_000, "rows inserted by cases a and b")
	fs.IntVar(&c.txnRows, "txn-rows", 100, "rows per transaction in case b")
	fs.IntVar(&c.titleBytes, "title-bytes", 50, "length of the text column of the ~100 B rows")
	fs.IntVar(&c.updates, "updates", 200_000, "updates in case c")
	fs.IntVar(&c.updateRows, "update-rows", 10_000, "rows of the case c table (updated round-robin)")
	fs.IntVar(&c.updateTxnRows, "update-txn-rows", 100, "updates per transaction in case c")
	fs.IntVar(&c.rowBytes, "row-bytes", 1024, "length of the text column of case c")
	fs.IntVar(&c.partitions, "partitions", 4, "partitions of every data topic")
	fs.DurationVar(&c.poll, "poll", 20*time.Millisecond, "how often CPU, the slot and Kafka's high watermarks are sampled")
	fs.DurationVar(&c.timeout, "timeout", 15*time.Minute, "give up a run after this long")
	fs.StringVar(&c.cdcReader, "cdc-reader", "", "cdc-reader binary (run.sh builds it)")
	fs.StringVar(&c.java, "java", "java", "java binary (Java 17)")
	fs.StringVar(&javaOpts, "java-opts", "", "JVM options for Debezium, space-separated (default: none, the JVM's own defaults)")
	fs.StringVar(&c.jar, "jar", "", "bench/peers/debezium/target/peers-debezium.jar (run.sh builds it)")
	fs.StringVar(&c.workDir, "work-dir", "", "directory for configs, offsets and logs (default: a new one under /tmp)")
	fs.StringVar(&c.jsonOut, "json", "", "also write the results as JSON to this file")
	fs.StringVar(&tuned, "debezium-tuned", debeziumTunedDefault, "connector properties of the debezium-tuned run (k=v,k=v)")
	fs.BoolVar(&c.keep, "keep", false, "keep tables, slots, publications and topics (for debugging)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.dsn = os.Getenv(fmt.Sprintf("TRIBUTARY_SHARD_%d_DSN", c.shard))
	c.cases = strings.Split(cases, ",")
	c.systems = strings.Split(systems, ",")
	c.javaOpts = strings.Fields(javaOpts)
	var err error
	if c.tuned, err = parseTuning(tuned); err != nil {
		return c, err
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
	for _, s := range c.systems {
		if s == "tributary" && c.cdcReader == "" {
			errs = append(errs, errors.New("--cdc-reader is required to run tributary"))
		}
		if strings.HasPrefix(s, "debezium") && c.jar == "" {
			errs = append(errs, errors.New("--jar is required to run debezium"))
		}
	}
	if c.rows < 1 || c.txnRows < 1 || c.updates < 1 || c.updateRows < 1 || c.updateTxnRows < 1 || c.partitions < 1 {
		errs = append(errs, errors.New("counts must be >= 1"))
	}
	if c.rows%c.txnRows != 0 {
		errs = append(errs, errors.New("--rows must be a multiple of --txn-rows"))
	}
	if c.updates%c.updateTxnRows != 0 || c.updateRows%c.updateTxnRows != 0 {
		errs = append(errs, errors.New("--updates and --update-rows must be multiples of --update-txn-rows"))
	}
	return errors.Join(errs...)
}

func main() {
	c, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
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
	fmt.Printf("bench peers: shard %d, kafka %s, cases %s, systems %s, logs in %s, load average %s\n",
		c.shard, c.brokers, strings.Join(c.cases, ","), strings.Join(c.systems, ","), c.workDir, loadAvg())
	var results []runResult
	for _, name := range c.cases {
		wc, err := newCase(name, c)
		if err != nil {
			return err
		}
		rs, err := b.runCase(ctx, wc)
		results = append(results, rs...)
		if err != nil {
			printTable(os.Stdout, results)
			return fmt.Errorf("case %s: %w", name, err)
		}
	}
	printTable(os.Stdout, results)
	if c.jsonOut != "" {
		return writeJSON(c, results)
	}
	return nil
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
		s, err := newSystem(name, table, filepath.Join(b.cfg.workDir, table), b.cfg.tuned)
		if err != nil {
			return nil, err
		}
		if err := b.prepare(ctx, s, cl); err != nil {
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
		if err != nil {
			return results, err
		}
		printRun(r)
		results = append(results, r)
	}
	return results, nil
}
