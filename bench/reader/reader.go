// Package reader is `bench reader`: changes/s from one shard into Kafka
// through internal/reader, next to pg_recvlogical on the same workload,
// which is how fast the walsender can decode and send it.
//
// Method, per case: a fresh table, publication and, per repetition, two
// slots created before the workload (ours, primed by one short reader run
// that snapshots the still-empty table, and pg_recvlogical's), so that every
// client sees exactly the same changes. The workload runs server-side with
// synchronous_commit off and ends with a client transaction that reads
// pg_current_wal_insert_lsn() just before its COMMIT: the target, which
// only the end of that commit passes. Then each client runs alone, in
// alternating order: the reader until its slot's confirmed_flush_lsn
// reaches the target (it confirms only what Kafka acknowledged),
// pg_recvlogical until it exits at --endpos (see recvlogicalRun). The
// reader runs in this process, so getrusage and VmHWM measure it (plus the
// bench's 20 ms polling); the workload is generated before it starts.
//
// The snapshot case has no pg_recvlogical equivalent; its reference is a
// plain SELECT * of the table in text format with the rows discarded (the
// reader reads the same rows in keyset chunks, --snapshot-workers at once).
package reader

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/tributary/tributary/bench/internal/benchwork"
	"github.com/tributary/tributary/internal/flagenv"
	"github.com/tributary/tributary/internal/kafkaconn"
)

// config is the configuration of `bench reader`.
type config struct {
	shard          int
	dsn            string
	brokers        string
	kafka          kafkaconn.Security
	kafkaLabel     string
	cases          string
	reps           int
	work           benchwork.Params // cases a, b, c and the row size of e
	snapshotRows   int
	bigMB          int
	snapWorkers    int
	snapChunkRows  int
	partitions     int
	maxBuffered    int
	maxBufBytes    int
	statusInterval time.Duration
	poll           time.Duration
	timeout        time.Duration
	recvlogical    string
	cpuProfile     string
	jsonOut        string
	verbose        bool
	brokerPID      int
}

func (c *config) validate() error {
	var errs []error
	errs = append(errs, kafkaconn.ValidateClient(c.brokers, c.kafka)...)
	for _, k := range strings.Split(c.cases, ",") {
		if !slices.Contains([]string{"a", "b", "c", "d", "e"}, k) {
			errs = append(errs, fmt.Errorf("--cases: unknown case %q (a, b, c, d, e)", k))
		}
	}
	if c.work.RowBytes < 1 || c.bigMB < 1 || int64(c.bigMB)<<20 < int64(c.work.RowBytes) {
		errs = append(errs, errors.New("--row-bytes and --big-txn-mb must be >= 1, and one row must fit in --big-txn-mb"))
	}
	if c.reps < 1 || c.snapshotRows < 1 {
		errs = append(errs, errors.New("--reps and --snapshot-rows must be >= 1"))
	}
	errs = append(errs, c.work.Validate()...)
	return errors.Join(errs...)
}

// fleetShard returns the number and DSN of shard of the fleet file at
// path; shard -1 is the fleet's lowest.
func fleetShard(path string, shard int) (int, string, error) {
	dsns, err := benchwork.ShardDSNs(path)
	if err != nil {
		return 0, "", err
	}
	if shard == -1 {
		shard = slices.Min(slices.Collect(maps.Keys(dsns)))
	}
	dsn, ok := dsns[shard]
	if !ok {
		return 0, "", fmt.Errorf("--shard %d: not in the fleet file %s (shards %v)", shard, path, slices.Sorted(maps.Keys(dsns)))
	}
	return shard, dsn, nil
}

// Run is `bench reader`: args are its flags.
func Run(ctx context.Context, args []string) error {
	var c config
	fs := flagenv.New("bench reader", `bench reader — changes/s from one shard into Kafka through internal/reader,
next to pg_recvlogical (the walsender's limit) on the same workload.
The shard is --shard of the fleet file (--fleet; its dsn_env or dsn_file,
a superuser DSN for the local stack).`)
	var fleetFile string
	fs.String(&fleetFile, "fleet", "TRIBUTARY_FLEET", "", "fleet file (required; the stack's is in stack.env)")
	fs.Int(&c.shard, "shard", "", -1, "number of the fleet's shard to run on (default: its lowest)")
	kafkaconn.AddClientFlags(fs, &c.brokers, &c.kafka)
	fs.String(&c.kafkaLabel, "kafka-label", "", "", "name of the broker in the report (default: embedded if the brokers are $TRIBUTARY_EMBEDDED_KAFKA_BROKERS, else kafka)")
	fs.String(&c.cases, "cases", "", "a,b,c,d", "cases: a = 1 txn of --rows inserts, b = --rows inserts in --txn-rows txns, c = --updates of a --row-bytes row, d = snapshot of --snapshot-rows, e = 1 txn of --big-txn-mb MiB of --row-bytes rows (not in the default: the 1 GiB transaction of docs/benchmarks.md)")
	fs.Int(&c.reps, "reps", "", 2, "repetitions of every client on every case")
	c.work.AddFlags(fs, 1_000_000)
	fs.Int(&c.snapshotRows, "snapshot-rows", "", 1_000_000, "rows of the case d table (the snapshot goal in docs/benchmarks.md is measured at 5000000)")
	fs.Int(&c.bigMB, "big-txn-mb", "", 1024, "MiB of row data (--row-bytes per row, text not compressed, below the TOAST threshold) in case e's one transaction")
	fs.Int(&c.snapWorkers, "snapshot-workers", "", 2, "reader SnapshotWorkers for case d (the cdc-reader default)")
	fs.Int(&c.snapChunkRows, "snapshot-chunk-rows", "", 10_000, "reader SnapshotChunkRows for case d (the cdc-reader default)")
	fs.Int(&c.partitions, "partitions", "", 4, "partitions of the topics the reader creates")
	fs.Int(&c.maxBuffered, "max-buffered", "", 100_000, "reader MaxBuffered (the cdc-reader default)")
	fs.Int(&c.maxBufBytes, "max-buffered-bytes", "", 0, "reader MaxBufferedBytes (0: the reader's default)")
	fs.Duration(&c.statusInterval, "status-interval", "", 50*time.Millisecond, "reader StatusInterval: how soon a confirmed position reaches the slot (cdc-reader default 1s)")
	fs.Duration(&c.poll, "poll", "", 20*time.Millisecond, "how often the slots (and, for d, Kafka's committed offsets) are polled")
	fs.Duration(&c.timeout, "timeout", "", 15*time.Minute, "give up a run after this long")
	fs.String(&c.recvlogical, "pg-recvlogical", "", "/usr/lib/postgresql/15/bin/pg_recvlogical", "pg_recvlogical binary (empty: skip the comparison)")
	fs.String(&c.cpuProfile, "cpuprofile", "", "", "write a CPU profile of every reader run to PREFIX-<case>-<rep>.pprof (profiling costs a few %)")
	fs.String(&c.jsonOut, "json", "", "", "also write the results as JSON to this file")
	fs.Int(&c.brokerPID, "broker-pid", "", 0, "pid of a local Kafka broker whose CPU to report for the reader's runs (0: none)")
	fs.BoolVar(&c.verbose, "verbose", false, "print when the reader logged each milestone of every run")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if c.shard, c.dsn, err = fleetShard(fleetFile, c.shard); err != nil {
		return err
	}
	if c.kafkaLabel == "" {
		c.kafkaLabel = "kafka"
		if e := os.Getenv("TRIBUTARY_EMBEDDED_KAFKA_BROKERS"); e != "" && e == c.brokers {
			c.kafkaLabel = "embedded"
		}
	}
	if err := c.validate(); err != nil {
		return err
	}

	b, err := newBench(ctx, c)
	if err != nil {
		return err
	}
	defer b.close()
	fmt.Printf("bench reader: shard %d, kafka %s (%s), %d cores (%s), load average %s, reps %d\n",
		c.shard, c.kafkaLabel, c.brokers, runtime.NumCPU(), benchwork.CPUModel(), benchwork.LoadAvg(), c.reps)
	var runs []run
	for _, name := range strings.Split(c.cases, ",") {
		rs, err := b.runCase(ctx, b.newCase(name))
		runs = append(runs, rs...)
		if err != nil {
			return fmt.Errorf("case %s: %w", name, err)
		}
	}
	sum := summarize(runs)
	printSummary(os.Stdout, sum)
	if c.jsonOut != "" {
		out := map[string]any{
			"machine": map[string]any{"nproc": runtime.NumCPU(), "cpu_model": benchwork.CPUModel(), "go": runtime.Version(),
				"gomaxprocs": runtime.GOMAXPROCS(0)},
			"kafka": map[string]any{"label": c.kafkaLabel, "brokers": c.brokers},
			"config": map[string]any{"cases": c.cases, "reps": c.reps, "rows": c.work.Rows, "txn_rows": c.work.TxnRows,
				"title_bytes": c.work.TitleBytes, "update_rows": c.work.UpdateRows, "updates": c.work.Updates,
				"update_txn_rows": c.work.UpdateTxnRows, "row_bytes": c.work.RowBytes, "snapshot_rows": c.snapshotRows, "big_txn_mb": c.bigMB,
				"snapshot_workers": c.snapWorkers, "snapshot_chunk_rows": c.snapChunkRows,
				"partitions": c.partitions, "max_buffered": c.maxBuffered, "max_buffered_bytes": c.maxBufBytes, "status_interval": c.statusInterval.String(),
				"poll": c.poll.String()},
			"runs": runs, "summary": sum,
		}
		j, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(c.jsonOut, j, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", c.jsonOut, err)
		}
	}
	return nil
}
