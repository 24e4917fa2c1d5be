package reader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/bench/internal/benchwork"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/flagenv"
	"github.com/tributary/tributary/internal/reader"
)

// The clients `bench reader` measures (the reader, pg_recvlogical,
// the snapshot's SELECT reference) and the per-case run order.

// bench holds what every case shares.
type bench struct {
	cfg  config
	run  string // unique part of every name
	pg   *pgx.Conn
	kcl  *kgo.Client
	adm  *kadm.Client
	logs *logMarks
}

func newBench(ctx context.Context, c config) (*bench, error) {
	pg, err := pgx.Connect(ctx, c.dsn)
	if err != nil {
		return nil, fmt.Errorf("connect shard %d: %w", c.shard, err)
	}
	// A short metadata age: the snapshot's topic is polled right after the
	// reader creates it (the default would hide it for 5 s).
	kcl, err := c.kafka.NewClient(flagenv.List(c.brokers), kgo.MetadataMinAge(50*time.Millisecond))
	if err != nil {
		pg.Close(ctx)
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return &bench{cfg: c, run: "bench_reader_" + strconv.FormatInt(time.Now().UnixMilli(), 36),
		pg: pg, kcl: kcl, adm: kadm.NewClient(kcl), logs: &logMarks{}}, nil
}

func (b *bench) close() {
	b.kcl.Close()
	b.pg.Close(context.Background())
}

// runCase measures every client reps times on one workload; it always
// removes what it created.
func (b *bench) runCase(ctx context.Context, c *workCase) (runs []run, err error) {
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
			order := []func() (run, error){
				func() (run, error) { return b.selectAll(ctx, c, table, rep) },
				func() (run, error) { return b.snapshotRun(ctx, c, n, rep, &cleanups) },
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
			cleanups = append(cleanups, benchwork.DropSlot(b.pg, slot))
		}
	}
	fmt.Printf("  setup (table, publication, %d slot pairs) %s\n", b.cfg.reps, time.Since(start).Round(time.Millisecond))
	from, target, err := b.workload(ctx, c, table)
	if err != nil {
		return nil, fmt.Errorf("workload: %w", err)
	}
	for rep := 1; rep <= b.cfg.reps; rep++ {
		order := []func() (run, error){
			func() (run, error) { return b.streamRun(ctx, c, n, rep, target) },
		}
		if b.cfg.recvlogical != "" {
			recv := func() (run, error) { return b.recvlogicalRun(ctx, c, n, rep, target) }
			// Alternate who reads the WAL first (page cache, spill files).
			if rep%2 == 1 {
				order = append([]func() (run, error){recv}, order...)
			} else {
				order = append(order, recv)
			}
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

func (b *bench) deleteTopics(topics ...string) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := b.adm.DeleteTopics(ctx, topics...)
		return err
	}
}

// instance is one reader.Run in a goroutine.
type instance struct {
	cancel  context.CancelFunc
	stopped chan struct{}
	err     error
	started time.Time
	stopAt  time.Time
}

func (b *bench) startReader(ctx context.Context, n names, rep int, slot string) (*instance, []string, error) {
	tcfg, err := b.tablesConfig(n, rep)
	if err != nil {
		return nil, nil, err
	}
	state := n.prefix + "_" + strconv.Itoa(rep) + ".state"
	r := reader.New(reader.Config{
		Shard: b.cfg.shard, DSN: b.cfg.dsn, Slot: slot, Publication: n.pub, Tables: tcfg,
		Brokers: flagenv.List(b.cfg.brokers), KafkaSecurity: b.cfg.kafka, Partitions: int32(b.cfg.partitions),
		StatusInterval: b.cfg.statusInterval, WatermarkInterval: 500 * time.Millisecond, WatermarkMinGap: reader.DefaultWatermarkMinGap,
		HeartbeatInterval: 5 * time.Second, MaxBuffered: b.cfg.maxBuffered, MaxBufferedBytes: b.cfg.maxBufBytes, StateTopic: state,
		SnapshotWorkers: b.cfg.snapWorkers, SnapshotChunkRows: b.cfg.snapChunkRows,
	}, slog.New(&markHandler{marks: b.logs, out: slog.NewTextHandler(os.Stderr, nil)}), prometheus.NewRegistry())
	rctx, cancel := context.WithCancel(ctx)
	ri := &instance{cancel: cancel, stopped: make(chan struct{}), started: time.Now()}
	go func() {
		ri.err = r.Run(rctx)
		ri.stopAt = time.Now()
		close(ri.stopped)
	}()
	return ri, append(tcfg.Topics(), state), nil
}

func (ri *instance) stop() error {
	ri.cancel()
	<-ri.stopped
	return ri.err
}

// primeReader creates the reader's slot the way a new reader does (slot,
// snapshot of the still-empty table, state "snapshot done")
// and stops it once it streams, so that the measured run resumes from the
// slot like a restarted reader.
func (b *bench) primeReader(ctx context.Context, n names, rep int, cleanups *[]func(context.Context) error) error {
	slot := slotName(n, rep)
	b.logs.reset()
	ri, topics, err := b.startReader(ctx, n, rep, slot)
	if err != nil {
		return err
	}
	*cleanups = append(*cleanups, b.deleteTopics(topics...), benchwork.DropSlot(b.pg, slot))
	_, err = b.waitLogged(ctx, ri, b.cfg.timeout, "streaming")
	if serr := ri.stop(); err == nil && serr != nil {
		err = serr
	}
	return err
}

// streamRun resumes the primed reader slot and measures it to the target.
func (b *bench) streamRun(ctx context.Context, c *workCase, n names, rep int, target envelope.LSN) (run, error) {
	slot := slotName(n, rep)
	res := b.tributaryRun(c, rep)
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
	b.endMeasure(m, &res, ri, streaming, done)
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
func (b *bench) snapshotRun(ctx context.Context, c *workCase, n names, rep int, cleanups *[]func(context.Context) error) (run, error) {
	slot := slotName(n, rep)
	res := b.tributaryRun(c, rep)
	m := b.beginMeasure(c, rep)
	ri, topics, err := b.startReader(ctx, n, rep, slot)
	if err != nil {
		return res, err
	}
	*cleanups = append(*cleanups, b.deleteTopics(topics...), benchwork.DropSlot(b.pg, slot))
	complete, err := b.waitLogged(ctx, ri, b.cfg.timeout, "snapshot complete")
	if err != nil {
		ri.stop() //nolint:errcheck // reporting the first error
		return res, fmt.Errorf("reader: %w", err)
	}
	created, ok := b.logs.get("slot created; taking initial snapshot")
	if !ok {
		return res, errors.New("snapshot complete without the reader logging the slot's creation")
	}
	b.endMeasure(m, &res, ri, created, complete.at)
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
	if _, err := b.waitLogged(ctx, ri, time.Minute, "streaming"); err != nil {
		ri.stop() //nolint:errcheck // reporting the first error
		return res, fmt.Errorf("reader after the snapshot: %w", err)
	}
	if err := ri.stop(); err != nil {
		return res, fmt.Errorf("reader stop: %w", err)
	}
	return res, nil
}

// slotName is the slot of repetition rep of the reader's runs on n.
func slotName(n names, rep int) string { return n.table + "_r" + strconv.Itoa(rep) }

// tributaryRun is the result of one of the reader's runs before it is measured.
func (b *bench) tributaryRun(c *workCase, rep int) run {
	return run{Case: c.name, Client: "tributary", Rep: rep, Kafka: b.cfg.kafkaLabel, Changes: c.changes, LoadAvg1: benchwork.LoadAvg1()}
}

// waitLogged waits (up to timeout, or until the reader stops) for the
// reader to log msg, and returns when it did.
func (b *bench) waitLogged(ctx context.Context, ri *instance, timeout time.Duration, msg string) (mark, error) {
	var mk mark
	_, err := waitFor(ctx, b.cfg.poll, timeout, ri.stopped, func(context.Context) (bool, error) {
		var ok bool
		mk, ok = b.logs.get(msg)
		return ok, nil
	})
	return mk, err
}

// endMeasure ends m into res for the run from mark from to done, prints
// the marks, and sets the reader's start-up time (its start to from).
func (b *bench) endMeasure(m *measure, res *run, ri *instance, from mark, done time.Time) {
	m.end(res, from, done)
	b.printMarks(from, done)
	res.StartupSeconds = from.at.Sub(ri.started).Seconds()
}

// selectAll is the snapshot's reference: the reader's query, text format,
// rows discarded.
func (b *bench) selectAll(ctx context.Context, c *workCase, table string, rep int) (run, error) {
	res := run{Case: c.name, Client: "pg_select", Rep: rep, Changes: c.changes, LoadAvg1: benchwork.LoadAvg1()}
	conn, err := pgx.Connect(ctx, b.cfg.dsn)
	if err != nil {
		return res, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0) //nolint:errcheck // Linux
	busy0 := benchwork.ReadMachineCPU()
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
	res.MachineBusyCores = benchwork.ReadMachineCPU().BusyCoresSince(busy0)
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
func (b *bench) recvlogicalRun(ctx context.Context, c *workCase, n names, rep int, target envelope.LSN) (run, error) {
	slot, client, proto := n.table+"_p"+strconv.Itoa(rep), "pg_recvlogical", []string{"-o", "proto_version=1"}
	res := run{Case: c.name, Client: client, Rep: rep, Changes: c.changes, LoadAvg1: benchwork.LoadAvg1()}
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
	busy0 := benchwork.ReadMachineCPU()
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
		return res, fmt.Errorf("pg_recvlogical interrupted before the target (stderr: %s)", benchwork.LastLines(stderr.String(), 3))
	}
	if werr != nil || !strings.Contains(stderr.String(), "end position "+target.String()+" reached") {
		return res, fmt.Errorf("pg_recvlogical did not reach %s: %v (stderr: %s)", target, werr, benchwork.LastLines(stderr.String(), 3))
	}
	secs := exitAt.Sub(start).Seconds()
	res.Seconds, res.ChangesPerSec = secs, float64(c.changes)/secs
	ps := cmd.ProcessState
	res.CPUSeconds = (ps.UserTime() + ps.SystemTime()).Seconds()
	res.Cores = res.CPUSeconds / secs
	ws.fill(&res)
	res.MachineBusyCores = benchwork.ReadMachineCPU().BusyCoresSince(busy0)
	return res, nil
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
func (b *bench) slotProgress(ctx context.Context, slot string) (envelope.LSN, procUsage, error) {
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
