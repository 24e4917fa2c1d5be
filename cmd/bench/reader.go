package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/flagenv"
	"github.com/tributary/tributary/internal/reader"
	"github.com/tributary/tributary/internal/tables"
)

// The reader benchmark (issue 7): changes/s from one shard into Kafka
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

// readerConfig is the configuration of `bench reader`.
type readerConfig struct {
	shard          int
	dsn            string
	brokers        string
	kafkaLabel     string
	cases          string
	reps           int
	rows, txnRows  int
	titleBytes     int
	updateRows     int
	updates        int
	updateTxnRows  int
	rowBytes       int
	snapshotRows   int
	bigMB          int
	snapWorkers    int
	snapChunkRows  int
	partitions     int
	maxBuffered    int
	statusInterval time.Duration
	poll           time.Duration
	timeout        time.Duration
	recvlogical    string
	cpuProfile     string
	jsonOut        string
	verbose        bool
	recvlogicalV2  bool
	brokerPID      int
}

func (c *readerConfig) validate() error {
	var errs []error
	if c.dsn == "" {
		errs = append(errs, fmt.Errorf("$TRIBUTARY_SHARD_%d_DSN is not set (source .stack/stack.env)", c.shard))
	}
	if c.brokers == "" {
		errs = append(errs, errors.New("--kafka-brokers is required (source .stack/stack.env)"))
	}
	for _, k := range strings.Split(c.cases, ",") {
		if !slices.Contains([]string{"a", "b", "c", "d", "e"}, k) {
			errs = append(errs, fmt.Errorf("--cases: unknown case %q (a, b, c, d, e)", k))
		}
	}
	if c.rowBytes < 1 || c.bigMB < 1 || int64(c.bigMB)<<20 < int64(c.rowBytes) {
		errs = append(errs, errors.New("--row-bytes and --big-txn-mb must be >= 1, and one row must fit in --big-txn-mb"))
	}
	if c.reps < 1 || c.rows < 1 || c.txnRows < 1 || c.updateRows < 1 || c.updateTxnRows < 1 || c.snapshotRows < 1 {
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

// benchReader is `bench reader`.
func benchReader(ctx context.Context, args []string) error {
	var c readerConfig
	fs := flagenv.New("bench reader", `bench reader — changes/s from one shard into Kafka through internal/reader,
next to pg_recvlogical (the walsender's limit) on the same workload.
The shard DSN comes from $TRIBUTARY_SHARD_<shard>_DSN (a superuser DSN).`)
	fs.Int(&c.shard, "shard", "", 0, "shard whose DSN ($TRIBUTARY_SHARD_<n>_DSN) is used")
	fs.String(&c.brokers, "kafka-brokers", "TRIBUTARY_KAFKA_BROKERS", "", "Kafka brokers")
	fs.String(&c.kafkaLabel, "kafka-label", "", "", "name of the broker in the report (default: embedded if the brokers are $TRIBUTARY_EMBEDDED_KAFKA_BROKERS, else kafka)")
	fs.String(&c.cases, "cases", "", "a,b,c,d", "cases: a = 1 txn of --rows inserts, b = --rows inserts in --txn-rows txns, c = --updates of a --row-bytes row, d = snapshot of --snapshot-rows, e = 1 txn of --big-txn-mb MiB of --row-bytes rows (not in the default: the 1 GB transaction of issue 7)")
	fs.Int(&c.reps, "reps", "", 2, "repetitions of every client on every case")
	fs.Int(&c.rows, "rows", "", 1_000_000, "rows inserted by cases a and b")
	fs.Int(&c.txnRows, "txn-rows", "", 100, "rows per transaction in case b")
	fs.Int(&c.titleBytes, "title-bytes", "", 50, "length of the text column of the ~100 B rows")
	fs.Int(&c.updateRows, "update-rows", "", 10_000, "rows of the case c table (updated round-robin)")
	fs.Int(&c.updates, "updates", "", 200_000, "updates in case c")
	fs.Int(&c.updateTxnRows, "update-txn-rows", "", 100, "updates per transaction in case c")
	fs.Int(&c.rowBytes, "row-bytes", "", 1024, "length of the text column of case c (below the ~2 kB TOAST threshold: sent whole)")
	fs.Int(&c.snapshotRows, "snapshot-rows", "", 1_000_000, "rows of the case d table (issue 7 asks for 5000000)")
	fs.Int(&c.bigMB, "big-txn-mb", "", 1024, "MiB of row data (--row-bytes per row, text not compressed, below the TOAST threshold) in case e's one transaction")
	fs.Int(&c.snapWorkers, "snapshot-workers", "", 2, "reader SnapshotWorkers for case d (the cdc-reader default)")
	fs.Int(&c.snapChunkRows, "snapshot-chunk-rows", "", 10_000, "reader SnapshotChunkRows for case d (the cdc-reader default)")
	fs.Int(&c.partitions, "partitions", "", 4, "partitions of the topics the reader creates")
	fs.Int(&c.maxBuffered, "max-buffered", "", 100_000, "reader MaxBuffered (the cdc-reader default)")
	fs.Duration(&c.statusInterval, "status-interval", "", 50*time.Millisecond, "reader StatusInterval: how soon a confirmed position reaches the slot (cdc-reader default 1s)")
	fs.Duration(&c.poll, "poll", "", 20*time.Millisecond, "how often the slots (and, for d, Kafka's committed offsets) are polled")
	fs.Duration(&c.timeout, "timeout", "", 15*time.Minute, "give up a run after this long")
	fs.String(&c.recvlogical, "pg-recvlogical", "", "/usr/lib/postgresql/15/bin/pg_recvlogical", "pg_recvlogical binary (empty: skip the comparison)")
	fs.String(&c.cpuProfile, "cpuprofile", "", "", "write a CPU profile of every reader run to PREFIX-<case>-<rep>.pprof (profiling costs a few %)")
	fs.String(&c.jsonOut, "json", "", "", "also write the results as JSON to this file")
	fs.Int(&c.brokerPID, "broker-pid", "", 0, "pid of a local Kafka broker whose CPU to report for the reader's runs (0: none)")
	fs.BoolVar(&c.recvlogicalV2, "pg-recvlogical-v2", false, "also run pg_recvlogical with proto_version=2 and streaming=on (client pg_recvlogical_v2, its own slot): what protocol 2 streaming would give")
	fs.BoolVar(&c.verbose, "verbose", false, "print when the reader logged each milestone of every run")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errUsage
		}
		return err
	}
	c.dsn = os.Getenv(fmt.Sprintf("TRIBUTARY_SHARD_%d_DSN", c.shard))
	if c.kafkaLabel == "" {
		c.kafkaLabel = "kafka"
		if e := os.Getenv("TRIBUTARY_EMBEDDED_KAFKA_BROKERS"); e != "" && e == c.brokers {
			c.kafkaLabel = "embedded"
		}
	}
	if err := c.validate(); err != nil {
		return err
	}

	b, err := newReaderBench(ctx, c)
	if err != nil {
		return err
	}
	defer b.close()
	fmt.Printf("bench reader: shard %d, kafka %s (%s), %d cores (%s), load average %s, reps %d\n",
		c.shard, c.kafkaLabel, c.brokers, runtime.NumCPU(), cpuModel(), loadAvg(), c.reps)
	var runs []readerRun
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
			"machine": map[string]any{"nproc": runtime.NumCPU(), "cpu_model": cpuModel(), "go": runtime.Version(),
				"gomaxprocs": runtime.GOMAXPROCS(0)},
			"kafka": map[string]any{"label": c.kafkaLabel, "brokers": c.brokers},
			"config": map[string]any{"cases": c.cases, "reps": c.reps, "rows": c.rows, "txn_rows": c.txnRows,
				"title_bytes": c.titleBytes, "update_rows": c.updateRows, "updates": c.updates,
				"update_txn_rows": c.updateTxnRows, "row_bytes": c.rowBytes, "snapshot_rows": c.snapshotRows, "big_txn_mb": c.bigMB,
				"snapshot_workers": c.snapWorkers, "snapshot_chunk_rows": c.snapChunkRows,
				"partitions": c.partitions, "max_buffered": c.maxBuffered, "status_interval": c.statusInterval.String(),
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

// readerRun is one measured run of one client.
type readerRun struct {
	Case   string `json:"case"`
	Client string `json:"client"` // tributary, pg_recvlogical, pg_select
	Rep    int    `json:"rep"`
	Kafka  string `json:"kafka,omitempty"`
	// Changes is the number of row changes (or snapshot rows) the run moved.
	Changes  int64   `json:"changes"`
	WALBytes int64   `json:"wal_bytes,omitempty"`
	LoadAvg1 float64 `json:"load_avg_1m"`
	// Seconds is the measured window: for the reader, from START_REPLICATION
	// (or, for the snapshot, from the slot's creation) to the target; for
	// pg_recvlogical from its start to its exit at --endpos.
	Seconds float64 `json:"seconds"`
	// StartupSeconds is the reader's own start-up before that window
	// (connections, topics, state topic, slot); not in Seconds.
	StartupSeconds float64 `json:"startup_seconds,omitempty"`
	ChangesPerSec  float64 `json:"changes_per_second"`
	// CPUSeconds is user+system CPU of this process (reader) or of the
	// pg_recvlogical process, over Seconds.
	CPUSeconds float64 `json:"cpu_seconds"`
	Cores      float64 `json:"cores"`
	// WalsenderCPUSeconds is the walsender backend's CPU (server side).
	WalsenderCPUSeconds float64 `json:"walsender_cpu_seconds,omitempty"`
	// BrokerCPUSeconds is the local Kafka broker's CPU (--broker-pid).
	BrokerCPUSeconds float64 `json:"broker_cpu_seconds,omitempty"`
	// MachineBusyCores is how many of the machine's cores were busy on
	// average (everything, other users included), from /proc/stat.
	MachineBusyCores    float64 `json:"machine_busy_cores"`
	PeakRSSMB           float64 `json:"peak_rss_mb,omitempty"`
	AllocBytesPerChange float64 `json:"alloc_bytes_per_change,omitempty"`
	AllocsPerChange     float64 `json:"allocs_per_change,omitempty"`
}

// readerBench holds what every case shares.
type readerBench struct {
	cfg  readerConfig
	run  string // unique part of every name
	pg   *pgx.Conn
	kcl  *kgo.Client
	adm  *kadm.Client
	logs *logMarks
}

func newReaderBench(ctx context.Context, c readerConfig) (*readerBench, error) {
	pg, err := pgx.Connect(ctx, c.dsn)
	if err != nil {
		return nil, fmt.Errorf("connect shard %d: %w", c.shard, err)
	}
	// A short metadata age: the snapshot's topic is polled right after the
	// reader creates it (the default would hide it for 5 s).
	kcl, err := kgo.NewClient(kgo.SeedBrokers(flagenv.List(c.brokers)...), kgo.MetadataMinAge(50*time.Millisecond))
	if err != nil {
		pg.Close(ctx)
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return &readerBench{cfg: c, run: "bench_reader_" + strconv.FormatInt(time.Now().UnixMilli(), 36),
		pg: pg, kcl: kcl, adm: kadm.NewClient(kcl), logs: &logMarks{}}, nil
}

func (b *readerBench) close() {
	b.kcl.Close()
	b.pg.Close(context.Background())
}

// readerCase is one workload.
type readerCase struct {
	name, desc string
	changes    int64
	snapshot   bool
	// setup creates the table (and its rows, for c and d) before any slot.
	setup func(ctx context.Context, conn *pgx.Conn, table string) error
	// batches transactions of batch(k) (k an SQL integer expression) make
	// the workload, run after the slots exist.
	batches int
	batch   func(table, k string) string
}

func (b *readerBench) newCase(name string) *readerCase {
	c := b.cfg
	switch name {
	case "a":
		return &readerCase{name: "a", desc: fmt.Sprintf("%d inserts, one transaction", c.rows), changes: int64(c.rows),
			setup: b.createRows, batches: 1,
			batch: func(t, k string) string { return insertRows(t, k, c.rows, c.titleBytes) }}
	case "b":
		return &readerCase{name: "b", desc: fmt.Sprintf("%d inserts, %d per transaction", c.rows, c.txnRows), changes: int64(c.rows),
			setup: b.createRows, batches: c.rows / c.txnRows,
			batch: func(t, k string) string { return insertRows(t, k, c.txnRows, c.titleBytes) }}
	case "c":
		return &readerCase{name: "c", desc: fmt.Sprintf("%d updates of %d B rows, %d per transaction", c.updates, c.rowBytes, c.updateTxnRows),
			changes: int64(c.updates), batches: c.updates / c.updateTxnRows,
			setup: func(ctx context.Context, conn *pgx.Conn, t string) error {
				_, err := conn.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (id bigint PRIMARY KEY, version bigint NOT NULL, body text NOT NULL);
					INSERT INTO %s SELECT g, 0, left(repeat(md5(g::text), %d), %d) FROM generate_series(1, %d) g`,
					t, t, c.rowBytes/32+1, c.rowBytes, c.updateRows))
				return err
			},
			batch: func(t, k string) string {
				lo := fmt.Sprintf("((%s) * %d) %% %d + 1", k, c.updateTxnRows, c.updateRows)
				return fmt.Sprintf("UPDATE %s SET version = version + 1, body = left(repeat(md5((id + version + 1)::text), %d), %d) WHERE id BETWEEN %s AND %s + %d",
					t, c.rowBytes/32+1, c.rowBytes, lo, lo, c.updateTxnRows-1)
			}}
	case "e":
		return b.bigTxnCase()
	default: // "d", checked by validate
		return &readerCase{name: "d", desc: fmt.Sprintf("snapshot of %d rows", c.snapshotRows), changes: int64(c.snapshotRows), snapshot: true,
			setup: func(ctx context.Context, conn *pgx.Conn, t string) error {
				if err := b.createRows(ctx, conn, t); err != nil {
					return err
				}
				if _, err := conn.Exec(ctx, insertRows(t, "0", c.snapshotRows, c.titleBytes)); err != nil {
					return err
				}
				// Hint bits and the visibility map, so that no reader pays for them.
				_, err := conn.Exec(ctx, "VACUUM (ANALYZE) "+t)
				return err
			}}
	}
}

// bigTxnCase is case e: one transaction of --big-txn-mb MiB of row data,
// --row-bytes of text per row. The walsender (protocol 1) spills it to
// disk and sends it after its commit; the reader's memory must not grow
// with it (the producer's buffer is bounded in records and bytes).
func (b *readerBench) bigTxnCase() *readerCase {
	c := b.cfg
	rows := int(int64(c.bigMB) << 20 / int64(c.rowBytes))
	return &readerCase{name: "e", changes: int64(rows), batches: 1,
		desc: fmt.Sprintf("%d inserts of %d B rows (%d MiB of row text), one transaction", rows, c.rowBytes, c.bigMB),
		setup: func(ctx context.Context, conn *pgx.Conn, t string) error {
			_, err := conn.Exec(ctx, "CREATE TABLE "+t+" (id bigint PRIMARY KEY, body text NOT NULL)")
			return err
		},
		batch: func(t, k string) string {
			return fmt.Sprintf("INSERT INTO %s SELECT g, left(repeat(md5(g::text), %d), %d) FROM generate_series((%s) * %d + 1, ((%s) + 1) * %d) g",
				t, c.rowBytes/32+1, c.rowBytes, k, rows, k, rows)
		}}
}

func (b *readerBench) createRows(ctx context.Context, conn *pgx.Conn, t string) error {
	_, err := conn.Exec(ctx, "CREATE TABLE "+t+` (id bigint PRIMARY KEY, workspace_id bigint NOT NULL,
		title text NOT NULL, amount numeric(12,2) NOT NULL, created_at timestamptz NOT NULL)`)
	return err
}

// insertRows inserts ids k*n+1 .. (k+1)*n: about 100 bytes of text per row
// with the default 50-byte title.
func insertRows(t, k string, n, titleBytes int) string {
	return fmt.Sprintf(`INSERT INTO %s SELECT g, g %% 1000, left(repeat(md5(g::text), %d), %d), (g %% 10000000) / 100.0,
		timestamptz '2026-11-30 12:00:00+00' + g * interval '1 ms' FROM generate_series((%s) * %d + 1, ((%s) + 1) * %d) g`,
		t, titleBytes/32+1, titleBytes, k, n, k, n)
}

// names are the per-case (and per-repetition) object names.
type names struct{ table, pub, prefix string }

func (b *readerBench) names(c *readerCase) names {
	base := b.run + "_" + c.name
	return names{table: base, pub: base, prefix: base}
}

func (b *readerBench) tablesConfig(n names, rep int) (*tables.Config, error) {
	return tables.Parse([]byte(fmt.Sprintf(`{"topic_prefix":%q,"tables":[{"name":%q,"id_column":"id","id_layout":"serial"}]}`,
		n.prefix+"_"+strconv.Itoa(rep)+".", n.table)))
}

// runCase measures every client reps times on one workload; it always
// removes what it created.
func (b *readerBench) runCase(ctx context.Context, c *readerCase) (runs []readerRun, err error) {
	n := b.names(c)
	var cleanups []func(context.Context) error
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		for i := len(cleanups) - 1; i >= 0; i-- {
			if cerr := cleanups[i](cctx); cerr != nil {
				fmt.Fprintf(os.Stderr, "bench reader: cleanup: %v\n", cerr)
			}
		}
	}()
	table := pgx.Identifier{n.table}.Sanitize()
	fmt.Printf("case %s: %s (table %s)\n", c.name, c.desc, n.table)
	cleanups = append(cleanups, func(ctx context.Context) error {
		_, err := b.pg.Exec(ctx, "DROP TABLE IF EXISTS "+table)
		return err
	})
	start := time.Now()
	if err := c.setup(ctx, b.pg, table); err != nil {
		return nil, fmt.Errorf("setup: %w", err)
	}
	if _, err := b.pg.Exec(ctx, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pgx.Identifier{n.pub}.Sanitize(), table)); err != nil {
		return nil, fmt.Errorf("publication: %w", err)
	}
	cleanups = append(cleanups, func(ctx context.Context) error {
		_, err := b.pg.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{n.pub}.Sanitize())
		return err
	})
	if c.snapshot {
		fmt.Printf("  setup %s\n", time.Since(start).Round(time.Millisecond))
		for rep := 1; rep <= b.cfg.reps; rep++ {
			order := []func() (readerRun, error){
				func() (readerRun, error) { return b.selectAll(ctx, c, table, rep) },
				func() (readerRun, error) { return b.snapshotRun(ctx, c, n, rep, &cleanups) },
			}
			if rep%2 == 0 {
				slices.Reverse(order)
			}
			for _, f := range order {
				r, err := f()
				if err != nil {
					return runs, err
				}
				printRun(r)
				runs = append(runs, r)
			}
		}
		return runs, nil
	}

	// Slots before the workload: every client sees the same changes.
	for rep := 1; rep <= b.cfg.reps; rep++ {
		if err := b.primeReader(ctx, n, rep, &cleanups); err != nil {
			return nil, fmt.Errorf("prime reader slot: %w", err)
		}
		if b.cfg.recvlogical != "" {
			slot := n.table + "_p" + strconv.Itoa(rep)
			if _, err := b.pg.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", slot); err != nil {
				return nil, fmt.Errorf("create slot %s: %w", slot, err)
			}
			cleanups = append(cleanups, b.dropSlot(slot))
		}
		if b.cfg.recvlogical != "" && b.cfg.recvlogicalV2 {
			slot := n.table + "_s" + strconv.Itoa(rep)
			if _, err := b.pg.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", slot); err != nil {
				return nil, fmt.Errorf("create slot %s: %w", slot, err)
			}
			cleanups = append(cleanups, b.dropSlot(slot))
		}
	}
	fmt.Printf("  setup (table, publication, %d slot pairs) %s\n", b.cfg.reps, time.Since(start).Round(time.Millisecond))
	from, target, err := b.workload(ctx, c, table)
	if err != nil {
		return nil, fmt.Errorf("workload: %w", err)
	}
	for rep := 1; rep <= b.cfg.reps; rep++ {
		order := []func() (readerRun, error){
			func() (readerRun, error) { return b.streamRun(ctx, c, n, rep, target) },
		}
		if b.cfg.recvlogical != "" {
			recv := func() (readerRun, error) { return b.recvlogicalRun(ctx, c, n, rep, target, false) }
			// Alternate who reads the WAL first (page cache, spill files).
			if rep%2 == 1 {
				order = append([]func() (readerRun, error){recv}, order...)
			} else {
				order = append(order, recv)
			}
		}
		if b.cfg.recvlogical != "" && b.cfg.recvlogicalV2 {
			order = append(order, func() (readerRun, error) { return b.recvlogicalRun(ctx, c, n, rep, target, true) })
		}
		for _, f := range order {
			r, err := f()
			if err != nil {
				return runs, err
			}
			r.WALBytes = int64(target - from)
			printRun(r)
			runs = append(runs, r)
		}
	}
	return runs, nil
}

// workload runs the case's transactions with synchronous_commit off (the
// consumers start after it, so commit latency does not matter) and returns
// the WAL insert position before it and the target: the insert position
// just before the last COMMIT, which only that commit's end passes.
func (b *readerBench) workload(ctx context.Context, c *readerCase, table string) (from, target envelope.LSN, err error) {
	conn, err := pgx.Connect(ctx, b.cfg.dsn)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	start := time.Now()
	if _, err := conn.Exec(ctx, "SET synchronous_commit = off"); err != nil {
		return 0, 0, err
	}
	if from, err = lsnQuery(ctx, conn, "SELECT pg_current_wal_insert_lsn()::text"); err != nil {
		return 0, 0, err
	}
	if c.batches > 1 {
		do := fmt.Sprintf("DO $bench$ BEGIN FOR k IN 0..%d LOOP %s; COMMIT; END LOOP; END $bench$", c.batches-2, c.batch(table, "k"))
		if _, err := conn.Exec(ctx, do); err != nil {
			return 0, 0, err
		}
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit: no-op
	if _, err := tx.Exec(ctx, c.batch(table, strconv.Itoa(c.batches-1))); err != nil {
		return 0, 0, err
	}
	if target, err = lsnQuery(ctx, tx, "SELECT pg_current_wal_insert_lsn()::text"); err != nil {
		return 0, 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, 0, err
	}
	// The walsender only sends flushed WAL: do not charge the WAL writer's
	// delay to whichever client runs first.
	for {
		flushed, err := lsnQuery(ctx, conn, "SELECT pg_current_wal_flush_lsn()::text")
		if err != nil {
			return 0, 0, err
		}
		if flushed > target {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Printf("  workload: %d changes in %d transactions, %.1f MB of WAL, %s (target %s)\n",
		c.changes, c.batches, float64(target-from)/1e6, time.Since(start).Round(time.Millisecond), target)
	return from, target, nil
}

type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func lsnQuery(ctx context.Context, q queryRower, sql string, args ...any) (envelope.LSN, error) {
	var s *string
	if err := q.QueryRow(ctx, sql, args...).Scan(&s); err != nil {
		return 0, err
	}
	if s == nil {
		return 0, nil
	}
	return envelope.ParseLSN(*s)
}

func (b *readerBench) dropSlot(slot string) func(context.Context) error {
	return func(ctx context.Context) error {
		var err error
		// The walsender of a client that just left may still hold the slot.
		for range 50 {
			_, err = b.pg.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", slot)
			if err == nil {
				return nil
			}
			time.Sleep(200 * time.Millisecond)
		}
		return fmt.Errorf("drop slot %s: %w", slot, err)
	}
}

func (b *readerBench) deleteTopics(topics ...string) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := b.adm.DeleteTopics(ctx, topics...)
		return err
	}
}

// readerInstance is one reader.Run in a goroutine.
type readerInstance struct {
	cancel  context.CancelFunc
	stopped chan struct{}
	err     error
	started time.Time
	stopAt  time.Time
}

func (b *readerBench) startReader(ctx context.Context, n names, rep int, slot string) (*readerInstance, []string, error) {
	tcfg, err := b.tablesConfig(n, rep)
	if err != nil {
		return nil, nil, err
	}
	state := n.prefix + "_" + strconv.Itoa(rep) + ".state"
	r := reader.New(reader.Config{
		Shard: b.cfg.shard, DSN: b.cfg.dsn, Slot: slot, Publication: n.pub, Tables: tcfg,
		Brokers: flagenv.List(b.cfg.brokers), Partitions: int32(b.cfg.partitions),
		StatusInterval: b.cfg.statusInterval, WatermarkInterval: 500 * time.Millisecond,
		HeartbeatInterval: 5 * time.Second, MaxBuffered: b.cfg.maxBuffered, StateTopic: state,
		SnapshotWorkers: b.cfg.snapWorkers, SnapshotChunkRows: b.cfg.snapChunkRows,
	}, slog.New(&markHandler{marks: b.logs, out: slog.NewTextHandler(os.Stderr, nil)}), prometheus.NewRegistry())
	rctx, cancel := context.WithCancel(ctx)
	ri := &readerInstance{cancel: cancel, stopped: make(chan struct{}), started: time.Now()}
	go func() {
		ri.err = r.Run(rctx)
		ri.stopAt = time.Now()
		close(ri.stopped)
	}()
	return ri, append(tcfg.Topics(), state), nil
}

func (ri *readerInstance) stop() error {
	ri.cancel()
	<-ri.stopped
	return ri.err
}

// primeReader creates the reader's slot the way a new reader does (slot,
// snapshot of the still-empty table, state "snapshot done")
// and stops it once it streams, so that the measured run resumes from the
// slot like a restarted reader.
func (b *readerBench) primeReader(ctx context.Context, n names, rep int, cleanups *[]func(context.Context) error) error {
	slot := n.table + "_r" + strconv.Itoa(rep)
	b.logs.reset()
	ri, topics, err := b.startReader(ctx, n, rep, slot)
	if err != nil {
		return err
	}
	*cleanups = append(*cleanups, b.deleteTopics(topics...), b.dropSlot(slot))
	_, err = waitFor(ctx, b.cfg.poll, b.cfg.timeout, ri.stopped, func(context.Context) (bool, error) {
		_, ok := b.logs.get("streaming")
		return ok, nil
	})
	if serr := ri.stop(); err == nil && serr != nil {
		err = serr
	}
	return err
}

// streamRun resumes the primed reader slot and measures it to the target.
func (b *readerBench) streamRun(ctx context.Context, c *readerCase, n names, rep int, target envelope.LSN) (readerRun, error) {
	slot := n.table + "_r" + strconv.Itoa(rep)
	res := readerRun{Case: c.name, Client: "tributary", Rep: rep, Kafka: b.cfg.kafkaLabel, Changes: c.changes, LoadAvg1: loadAvg1()}
	m := b.beginMeasure(c, rep)
	ri, _, err := b.startReader(ctx, n, rep, slot)
	if err != nil {
		return res, err
	}
	var ws procUsage
	done, err := waitFor(ctx, b.cfg.poll, b.cfg.timeout, ri.stopped, func(ctx context.Context) (bool, error) {
		confirmed, u, err := b.slotProgress(ctx, slot)
		if u.cpu > 0 {
			ws = u
		}
		return confirmed >= target, err
	})
	if err != nil {
		ri.stop() //nolint:errcheck // reporting the first error
		return res, fmt.Errorf("reader: %w", err)
	}
	streaming, ok := b.logs.get("streaming")
	if !ok {
		return res, errors.New("reader reached the target without logging \"streaming\"")
	}
	m.end(&res, streaming, done)
	b.printMarks(streaming, done)
	res.StartupSeconds = streaming.at.Sub(ri.started).Seconds()
	ws.fill(&res)
	if err := ri.stop(); err != nil {
		return res, fmt.Errorf("reader stop: %w", err)
	}
	return res, nil
}

// snapshotRun starts a reader on a new slot, which snapshots the table,
// and measures from the slot's creation until the reader logs "snapshot
// complete": every chunk acknowledged by Kafka and the state stored. Kafka's
// end offsets must then cover every row (a sanity check).
func (b *readerBench) snapshotRun(ctx context.Context, c *readerCase, n names, rep int, cleanups *[]func(context.Context) error) (readerRun, error) {
	slot := n.table + "_r" + strconv.Itoa(rep)
	res := readerRun{Case: c.name, Client: "tributary", Rep: rep, Kafka: b.cfg.kafkaLabel, Changes: c.changes, LoadAvg1: loadAvg1()}
	m := b.beginMeasure(c, rep)
	ri, topics, err := b.startReader(ctx, n, rep, slot)
	if err != nil {
		return res, err
	}
	*cleanups = append(*cleanups, b.deleteTopics(topics...), b.dropSlot(slot))
	var done time.Time
	_, err = waitFor(ctx, b.cfg.poll, b.cfg.timeout, ri.stopped, func(context.Context) (bool, error) {
		mk, ok := b.logs.get("snapshot complete")
		done = mk.at
		return ok, nil
	})
	if err != nil {
		ri.stop() //nolint:errcheck // reporting the first error
		return res, fmt.Errorf("reader: %w", err)
	}
	created, ok := b.logs.get("slot created; taking initial snapshot")
	if !ok {
		return res, errors.New("snapshot complete without the reader logging the slot's creation")
	}
	m.end(&res, created, done)
	b.printMarks(created, done)
	res.StartupSeconds = created.at.Sub(ri.started).Seconds()
	offs, err := b.adm.ListEndOffsets(ctx, topics[0])
	if err != nil {
		ri.stop() //nolint:errcheck // reporting the first error
		return res, fmt.Errorf("end offsets: %w", err)
	}
	var total int64
	offs.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total < c.changes {
		ri.stop() //nolint:errcheck // reporting the first error
		return res, fmt.Errorf("snapshot complete with %d records in Kafka, want %d", total, c.changes)
	}
	// Stop only once it streams: stopping between the snapshot and
	// START_REPLICATION would fail its start-up.
	if _, err := waitFor(ctx, b.cfg.poll, time.Minute, ri.stopped, func(context.Context) (bool, error) {
		_, ok := b.logs.get("streaming")
		return ok, nil
	}); err != nil {
		ri.stop() //nolint:errcheck // reporting the first error
		return res, fmt.Errorf("reader after the snapshot: %w", err)
	}
	if err := ri.stop(); err != nil {
		return res, fmt.Errorf("reader stop: %w", err)
	}
	return res, nil
}

// selectAll is the snapshot's reference: the reader's query, text format,
// rows discarded.
func (b *readerBench) selectAll(ctx context.Context, c *readerCase, table string, rep int) (readerRun, error) {
	res := readerRun{Case: c.name, Client: "pg_select", Rep: rep, Changes: c.changes, LoadAvg1: loadAvg1()}
	conn, err := pgx.Connect(ctx, b.cfg.dsn)
	if err != nil {
		return res, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0) //nolint:errcheck // Linux
	busy0 := readMachineCPU()
	start := time.Now()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return res, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	rr := conn.PgConn().ExecParams(ctx, "SELECT * FROM "+table, nil, nil, nil, []int16{0})
	var rows int64
	for rr.NextRow() {
		rows++
	}
	if _, err := rr.Close(); err != nil {
		return res, err
	}
	secs := time.Since(start).Seconds()
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1) //nolint:errcheck // Linux
	if rows != c.changes {
		return res, fmt.Errorf("select returned %d rows, want %d", rows, c.changes)
	}
	res.Seconds, res.ChangesPerSec = secs, float64(rows)/secs
	res.CPUSeconds = cpuSeconds(ru0, ru1)
	res.Cores = res.CPUSeconds / secs
	res.MachineBusyCores = readMachineCPU().busyCoresSince(busy0)
	return res, nil
}

// recvlogicalRun runs pg_recvlogical on its slot, with the reader's plugin
// options, until it has received the final commit. --endpos makes it exit
// on the first message past the target, which is that commit (its changes
// are all before the target). Its slot's confirmed position cannot be the
// criterion: pg_recvlogical confirms only what it wrote, and at --endpos it
// stops without writing the commit, so the slot stays just short of the
// target (and without --endpos it confirms once per --status-interval, in
// whole seconds).
//
// v2: protocol 2 with streaming=on instead (its own slot): the walsender
// streams a large transaction while decoding it instead of spilling it.
func (b *readerBench) recvlogicalRun(ctx context.Context, c *readerCase, n names, rep int, target envelope.LSN, v2 bool) (readerRun, error) {
	slot, client, proto := n.table+"_p"+strconv.Itoa(rep), "pg_recvlogical", []string{"-o", "proto_version=1"}
	if v2 {
		slot, client, proto = n.table+"_s"+strconv.Itoa(rep), "pg_recvlogical_v2", []string{"-o", "proto_version=2", "-o", "streaming=on"}
	}
	res := readerRun{Case: c.name, Client: client, Rep: rep, Changes: c.changes, LoadAvg1: loadAvg1()}
	env, db, err := libpqEnv(b.cfg.dsn)
	if err != nil {
		return res, err
	}
	args := append([]string{"--start", "--slot", slot, "--no-loop", "-d", db}, proto...)
	cmd := exec.CommandContext(ctx, b.cfg.recvlogical, append(args, "-o", "publication_names="+n.pub, "-o", "messages=true",
		"-f", "/dev/null", "-F", "0", "-s", "1", "-E", target.String(), "-v")...)
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return res, fmt.Errorf("pg_recvlogical: %w", err)
	}
	busy0 := readMachineCPU()
	stopped := make(chan struct{})
	var exitAt time.Time
	var werr error
	go func() {
		werr = cmd.Wait()
		exitAt = time.Now()
		close(stopped)
	}()
	var ws procUsage
	tick := time.NewTicker(b.cfg.poll)
	defer tick.Stop()
	deadline := time.After(b.cfg.timeout)
wait:
	for {
		select {
		case <-stopped:
			break wait
		case <-ctx.Done():
		case <-deadline:
		case <-tick.C:
			if _, u, err := b.slotProgress(ctx, slot); err == nil && u.cpu > 0 {
				ws = u
			}
			continue
		}
		cmd.Process.Signal(os.Interrupt) //nolint:errcheck // our child
		<-stopped
		return res, fmt.Errorf("pg_recvlogical interrupted before the target (stderr: %s)", lastLines(stderr.String(), 3))
	}
	if werr != nil || !strings.Contains(stderr.String(), "end position "+target.String()+" reached") {
		return res, fmt.Errorf("pg_recvlogical did not reach %s: %v (stderr: %s)", target, werr, lastLines(stderr.String(), 3))
	}
	secs := exitAt.Sub(start).Seconds()
	res.Seconds, res.ChangesPerSec = secs, float64(c.changes)/secs
	ps := cmd.ProcessState
	res.CPUSeconds = (ps.UserTime() + ps.SystemTime()).Seconds()
	res.Cores = res.CPUSeconds / secs
	ws.fill(&res)
	res.MachineBusyCores = readMachineCPU().busyCoresSince(busy0)
	return res, nil
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(l[max(0, len(l)-n):], " | ")
}

// libpqEnv turns a DSN into libpq environment variables, so that nothing
// secret is in pg_recvlogical's argv; it also returns the database name,
// which pg_recvlogical wants as -d.
func libpqEnv(dsn string) ([]string, string, error) {
	pc, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, "", fmt.Errorf("parse DSN: %w", err)
	}
	ssl := "disable"
	if pc.TLSConfig != nil {
		ssl = "require"
	}
	return []string{"PGHOST=" + pc.Host, "PGPORT=" + strconv.Itoa(int(pc.Port)), "PGUSER=" + pc.User,
		"PGPASSWORD=" + pc.Password, "PGDATABASE=" + pc.Database, "PGSSLMODE=" + ssl}, pc.Database, nil
}

// slotProgress returns the slot's confirmed position and, while a client
// is connected, what its walsender has used so far.
func (b *readerBench) slotProgress(ctx context.Context, slot string) (envelope.LSN, procUsage, error) {
	var confirmed *string
	var pid *int32
	err := b.pg.QueryRow(ctx, "SELECT confirmed_flush_lsn::text, active_pid FROM pg_replication_slots WHERE slot_name = $1", slot).
		Scan(&confirmed, &pid)
	if err != nil {
		return 0, procUsage{}, fmt.Errorf("slot %s: %w", slot, err)
	}
	var lsn envelope.LSN
	if confirmed != nil {
		if lsn, err = envelope.ParseLSN(*confirmed); err != nil {
			return 0, procUsage{}, err
		}
	}
	var u procUsage
	if pid != nil {
		u = readProcUsage(int(*pid))
	}
	return lsn, u, nil
}

// waitFor polls check until it is true, the timeout passes, or stopped is
// closed; in the last case check gets one more chance.
func waitFor(ctx context.Context, every, timeout time.Duration, stopped <-chan struct{}, check func(context.Context) (bool, error)) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		ok, err := check(ctx)
		if err != nil {
			return time.Time{}, err
		}
		if ok {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-stopped:
			if ok, err := check(ctx); err == nil && ok {
				return time.Now(), nil
			}
			return time.Time{}, errors.New("stopped before reaching the target")
		case <-t.C:
			if time.Now().After(deadline) {
				return time.Time{}, fmt.Errorf("target not reached in %s", timeout)
			}
		}
	}
}

// measure is what a reader run is measured against.
type measure struct {
	profile   bool
	ms0       runtime.MemStats
	broker    time.Duration
	brokerPID int
	busy      machineCPU
}

func (b *readerBench) beginMeasure(c *readerCase, rep int) *measure {
	m := &measure{}
	runtime.GC()
	runtime.ReadMemStats(&m.ms0)
	// Resets VmHWM to the current RSS (Linux >= 4.0).
	os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) //nolint:errcheck // not fatal: VmHWM then covers the process
	b.logs.reset()
	if b.cfg.brokerPID > 0 {
		m.broker, m.brokerPID = procCPU(b.cfg.brokerPID), b.cfg.brokerPID
	}
	m.busy = readMachineCPU()
	if b.cfg.cpuProfile != "" {
		f, err := os.Create(fmt.Sprintf("%s-%s-%d.pprof", b.cfg.cpuProfile, c.name, rep))
		if err == nil {
			if pprof.StartCPUProfile(f) == nil {
				m.profile = true
			}
		}
	}
	return m
}

// end fills res for the window from (a log mark with its rusage) to done.
func (m *measure) end(res *readerRun, from mark, done time.Time) {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru) //nolint:errcheck // Linux
	if m.profile {
		pprof.StopCPUProfile()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	secs := done.Sub(from.at).Seconds()
	res.Seconds, res.ChangesPerSec = secs, float64(res.Changes)/secs
	res.CPUSeconds = cpuSeconds(from.ru, ru)
	res.Cores = res.CPUSeconds / secs
	res.PeakRSSMB = float64(peakRSS()) / 1024
	if m.brokerPID > 0 {
		res.BrokerCPUSeconds = (procCPU(m.brokerPID) - m.broker).Seconds()
	}
	// From the start of the measurement (a little before the window).
	res.MachineBusyCores = readMachineCPU().busyCoresSince(m.busy)
	res.AllocBytesPerChange = float64(ms.TotalAlloc-m.ms0.TotalAlloc) / float64(res.Changes)
	res.AllocsPerChange = float64(ms.Mallocs-m.ms0.Mallocs) / float64(res.Changes)
}

// machineCPU is the first line of /proc/stat, in clock ticks.
type machineCPU struct {
	at         time.Time
	busy, idle int64
}

func readMachineCPU() machineCPU {
	m := machineCPU{at: time.Now()}
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return m
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseInt(f, 10, 64)
		switch i {
		case 3, 4: // idle, iowait
			m.idle += v
		case 8, 9: // guest time is already in user
		default:
			m.busy += v
		}
	}
	return m
}

// busyCoresSince is the average number of busy cores since a.
func (m machineCPU) busyCoresSince(a machineCPU) float64 {
	secs := m.at.Sub(a.at).Seconds()
	if secs <= 0 {
		return 0
	}
	return float64(m.busy-a.busy) / 100 / secs
}

func cpuSeconds(a, b syscall.Rusage) float64 {
	return time.Duration(b.Utime.Nano() + b.Stime.Nano() - a.Utime.Nano() - a.Stime.Nano()).Seconds()
}

// procUsage is what a process (the walsender) used so far.
type procUsage struct{ cpu time.Duration }

func readProcUsage(pid int) procUsage { return procUsage{cpu: procCPU(pid)} }

func (u procUsage) fill(res *readerRun) { res.WalsenderCPUSeconds = u.cpu.Seconds() }

// procCPU returns utime+stime of a process (0 if it is gone).
func procCPU(pid int) time.Duration {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	// Fields 14 and 15 of stat (utime, stime) in clock ticks; USER_HZ is 100 on Linux.
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// mark is when a log message was first seen, with the process's rusage then.
type mark struct {
	at time.Time
	ru syscall.Rusage
}

// logMarks records the first occurrence of each reader log message: the
// reader says when it starts streaming and when it created its slot, which
// bound the measured windows.
type logMarks struct {
	mu   sync.Mutex
	seen map[string]mark
}

func (l *logMarks) reset() {
	l.mu.Lock()
	l.seen = map[string]mark{}
	l.mu.Unlock()
}

func (l *logMarks) note(msg string) {
	m := mark{at: time.Now()}
	syscall.Getrusage(syscall.RUSAGE_SELF, &m.ru) //nolint:errcheck // Linux
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[string]mark{}
	}
	if _, ok := l.seen[msg]; !ok {
		l.seen[msg] = m
	}
}

// printMarks prints, with --verbose, when the reader logged each message
// relative to the start of the measured window.
func (b *readerBench) printMarks(from mark, done time.Time) {
	if !b.cfg.verbose {
		return
	}
	b.logs.mu.Lock()
	type line struct {
		at  time.Duration
		msg string
	}
	var ls []line
	for msg, m := range b.logs.seen {
		ls = append(ls, line{m.at.Sub(from.at), msg})
	}
	b.logs.mu.Unlock()
	ls = append(ls, line{done.Sub(from.at), "(target reached)"})
	slices.SortFunc(ls, func(a, b line) int { return int(a.at - b.at) })
	for _, l := range ls {
		fmt.Printf("    %+8.3fs  %s\n", l.at.Seconds(), l.msg)
	}
}

func (l *logMarks) get(msg string) (mark, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m, ok := l.seen[msg]
	return m, ok
}

// markHandler notes every record's message and passes warnings and errors
// on to out.
type markHandler struct {
	marks *logMarks
	out   slog.Handler
}

func (h *markHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *markHandler) Handle(ctx context.Context, r slog.Record) error {
	h.marks.note(r.Message)
	if r.Level >= slog.LevelWarn {
		return h.out.Handle(ctx, r)
	}
	return nil
}

func (h *markHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &markHandler{marks: h.marks, out: h.out.WithAttrs(as)}
}

func (h *markHandler) WithGroup(name string) slog.Handler {
	return &markHandler{marks: h.marks, out: h.out.WithGroup(name)}
}

// readerSummary is one (case, client) over its repetitions.
type readerSummary struct {
	Case               string    `json:"case"`
	Client             string    `json:"client"`
	Reps               int       `json:"reps"`
	Changes            int64     `json:"changes"`
	MedianPerSec       float64   `json:"median_changes_per_second"`
	MinPerSec          float64   `json:"min_changes_per_second"`
	MaxPerSec          float64   `json:"max_changes_per_second"`
	MedianSeconds      float64   `json:"median_seconds"`
	MedianCores        float64   `json:"median_cores"`
	MedianCPUPerM      float64   `json:"median_cpu_seconds_per_million"`
	MaxPeakRSSMB       float64   `json:"max_peak_rss_mb,omitempty"`
	MedianWalsenderCPU float64   `json:"median_walsender_cpu_seconds,omitempty"`
	MedianBrokerCPU    float64   `json:"median_broker_cpu_seconds,omitempty"`
	MachineBusyCores   []float64 `json:"machine_busy_cores"`
	// Ratio is this client's median changes/s over the reference's
	// (pg_recvlogical, or pg_select for the snapshot); set on tributary rows.
	Ratio   float64   `json:"ratio_to_reference,omitempty"`
	LoadAvg []float64 `json:"load_avg_1m"`
}

func summarize(runs []readerRun) []readerSummary {
	var out []readerSummary
	idx := map[[2]string]int{}
	groups := map[[2]string][]readerRun{}
	for _, r := range runs {
		k := [2]string{r.Case, r.Client}
		if _, ok := idx[k]; !ok {
			idx[k] = len(idx)
		}
		groups[k] = append(groups[k], r)
	}
	keys := make([][2]string, len(idx))
	for k, i := range idx {
		keys[i] = k
	}
	for _, k := range keys {
		g := groups[k]
		s := readerSummary{Case: k[0], Client: k[1], Reps: len(g), Changes: g[0].Changes}
		pick := func(f func(readerRun) float64) []float64 {
			v := make([]float64, len(g))
			for i, r := range g {
				v[i] = f(r)
			}
			return v
		}
		per := pick(func(r readerRun) float64 { return r.ChangesPerSec })
		s.MedianPerSec, s.MinPerSec, s.MaxPerSec = median(per), slices.Min(per), slices.Max(per)
		s.MedianSeconds = median(pick(func(r readerRun) float64 { return r.Seconds }))
		s.MedianCores = median(pick(func(r readerRun) float64 { return r.Cores }))
		s.MedianCPUPerM = median(pick(func(r readerRun) float64 { return r.CPUSeconds / float64(r.Changes) * 1e6 }))
		s.MaxPeakRSSMB = slices.Max(pick(func(r readerRun) float64 { return r.PeakRSSMB }))
		s.MedianWalsenderCPU = median(pick(func(r readerRun) float64 { return r.WalsenderCPUSeconds }))
		s.MedianBrokerCPU = median(pick(func(r readerRun) float64 { return r.BrokerCPUSeconds }))
		s.LoadAvg = pick(func(r readerRun) float64 { return r.LoadAvg1 })
		s.MachineBusyCores = pick(func(r readerRun) float64 { return r.MachineBusyCores })
		out = append(out, s)
	}
	for i := range out {
		if out[i].Client != "tributary" {
			continue
		}
		for _, ref := range out {
			if ref.Case == out[i].Case && (ref.Client == "pg_recvlogical" || ref.Client == "pg_select") && ref.MedianPerSec > 0 {
				out[i].Ratio = out[i].MedianPerSec / ref.MedianPerSec
			}
		}
	}
	return out
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func printRun(r readerRun) {
	fmt.Printf("  %-15s rep %d: %9.0f changes/s  %7.2f s  cpu %6.2f s (%.2f cores)", r.Client, r.Rep, r.ChangesPerSec, r.Seconds, r.CPUSeconds, r.Cores)
	if r.WalsenderCPUSeconds > 0 {
		fmt.Printf("  walsender cpu %.2f s", r.WalsenderCPUSeconds)
	}
	if r.PeakRSSMB > 0 {
		fmt.Printf("  peak RSS %.0f MB  alloc %.0f B / %.1f objects per change  startup %.2f s", r.PeakRSSMB, r.AllocBytesPerChange, r.AllocsPerChange, r.StartupSeconds)
	}
	if r.BrokerCPUSeconds > 0 {
		fmt.Printf("  broker cpu %.2f s", r.BrokerCPUSeconds)
	}
	fmt.Printf("  machine busy %.2f cores  load %.2f\n", r.MachineBusyCores, r.LoadAvg1)
}

func printSummary(w io.Writer, sum []readerSummary) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "case\tclient\treps\tchanges\tchanges/s (median)\tmin..max\ts\tcores\tCPU s/M\tpeak RSS MB\twalsender CPU s\tbroker CPU s\tmachine busy\tratio\t")
	opt := func(v float64, f string) string {
		if v <= 0 {
			return ""
		}
		return fmt.Sprintf(f, v)
	}
	for _, s := range sum {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.0f\t%.0f..%.0f\t%.2f\t%.2f\t%.2f\t%s\t%s\t%s\t%.1f..%.1f\t%s\t\n", s.Case, s.Client, s.Reps, s.Changes,
			s.MedianPerSec, s.MinPerSec, s.MaxPerSec, s.MedianSeconds, s.MedianCores, s.MedianCPUPerM,
			opt(s.MaxPeakRSSMB, "%.0f"), opt(s.MedianWalsenderCPU, "%.2f"), opt(s.MedianBrokerCPU, "%.2f"),
			slices.Min(s.MachineBusyCores), slices.Max(s.MachineBusyCores), opt(s.Ratio, "%.2f"))
	}
	tw.Flush()
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func loadAvg1() float64 {
	v, _ := strconv.ParseFloat(strings.Fields(loadAvg() + " ")[0], 64)
	return v
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}
