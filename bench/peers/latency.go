package peers

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/bench/internal/benchwork"
)

// The latency part (see docs/peers.md, "Latency"): each system alone streams
// its own table while the harness commits a paced workload, one phase per
// rate. Every change's latency is the broker's LogAppendTime of its record
// minus the harness's clock when the INSERT that committed it returned
// (autocommit: the reply comes after the commit is flushed). The broker and
// the harness share this machine's clock. LogAppendTime is in milliseconds
// (truncated), so latencies are too. Neither system can influence it, and it
// does not depend on when a consumer happens to fetch.

type latencyConfig struct {
	rates         []int // changes/s per phase
	systems       []string
	phase, warmup time.Duration
	txnRows       int
	workers       int
	csv           string // append every measured change here (--latency-csv)
}

// latPhase is one paced phase: transactions firstTxn.. of txnRows rows each
// (ids txn*txnRows+1 .. (txn+1)*txnRows), committed at rate changes/s.
type latPhase struct {
	rate      int
	warmup    bool
	firstTxn  int
	commits   []time.Time // when each transaction's INSERT returned
	start     time.Time
	committed time.Time // last commit returned
	drained   time.Time // every change of the phase in Kafka
	cpu0      time.Duration
	cpu1      time.Duration
	loadAvg   string
}

// latResult is one system at one rate.
type latResult struct {
	System       string  `json:"system"`
	RateTarget   int     `json:"rate_target"`
	RateAchieved float64 `json:"rate_achieved"`
	Changes      int     `json:"changes"`
	P50ms        float64 `json:"p50_ms"`
	P95ms        float64 `json:"p95_ms"`
	P99ms        float64 `json:"p99_ms"`
	MaxMs        float64 `json:"max_ms"`
	MeanMs       float64 `json:"mean_ms"`
	Cores        float64 `json:"cores"`       // the system's CPU from the phase's start until it drained
	DrainSeconds float64 `json:"drain_s"`     // from the last commit until the last change was in Kafka
	PeakRSSMB    float64 `json:"peak_rss_mb"` // of the whole latency run of this system
	LoadAvg      string  `json:"loadavg_before"`
}

// runLatency runs one system through the warm-up and every rate's phase, on
// a table of its own (so that no other system's slot holds these changes).
func (b *bench) runLatency(ctx context.Context, name string, idx int) ([]latResult, error) {
	lc := b.cfg.lat
	table := fmt.Sprintf("peers_%s_l%d", b.runID, idx)
	fmt.Printf("latency: %s on %s, rates %v changes/s, %s each after %s of warm-up, %d rows per transaction\n",
		name, table, lc.rates, lc.phase, lc.warmup, lc.txnRows)
	cl := &cleanups{}
	defer func() {
		if !b.cfg.keep {
			cl.run(b)
		}
	}()
	cl.add(func(ctx context.Context) error {
		_, err := b.pg.Exec(ctx, "DROP TABLE IF EXISTS "+table)
		return err
	})
	if err := benchwork.CreateRows(ctx, b.pg, table); err != nil {
		return nil, err
	}
	s, err := newSystem(name, table, filepath.Join(b.cfg.workDir, table), b.cfg)
	if err != nil {
		return nil, err
	}
	appendTime := "LogAppendTime"
	if err := b.prepare(ctx, s, cl, map[string]*string{"message.timestamp.type": &appendTime}); err != nil {
		return nil, err
	}
	if err := b.prime(ctx, s); err != nil {
		return nil, err
	}

	// The phases, planned up front: transaction numbers, hence ids, follow
	// one another.
	var phases []*latPhase
	txn := 0
	add := func(rate int, d time.Duration, warmup bool) {
		n := int(float64(rate) / float64(lc.txnRows) * d.Seconds())
		if n < 1 {
			n = 1
		}
		phases = append(phases, &latPhase{rate: rate, warmup: warmup, firstTxn: txn, commits: make([]time.Time, n)})
		txn += n
	}
	if lc.warmup > 0 {
		sorted := slices.Clone(lc.rates)
		slices.Sort(sorted)
		add(sorted[len(sorted)/2], lc.warmup, true)
	}
	for _, r := range lc.rates {
		add(r, lc.phase, false)
	}
	totalRows := txn * lc.txnRows

	// A consumer notes when each change was appended; the harness's own
	// CPU, like its polling in the throughput part, is the same for every
	// system.
	seen := newAppendTimes(totalRows)
	cons, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(b.cfg.brokers, ",")...),
		kgo.ConsumeTopics(s.dataTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cons.Close()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var consErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		consErr = seen.consume(cctx, cons, s)
	}()
	defer wg.Wait()
	defer cancel()

	argv, env, err := s.command(b.cfg, false)
	if err != nil {
		return nil, err
	}
	p, err := startProcess(s.name, argv, env, filepath.Join(s.dir, "latency.log"))
	if err != nil {
		return nil, err
	}
	defer p.stop(2 * time.Minute) //nolint:errcheck // stopped below; this is for errors
	for {
		if err := b.pollWait(ctx, p); err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		st, err := b.slotState(ctx, s.slot)
		if err != nil {
			return nil, err
		}
		if st.streaming {
			break
		}
		if time.Since(p.started) > 5*time.Minute {
			return nil, fmt.Errorf("%s: not streaming after 5 min; log %s", s.name, p.logPath)
		}
	}

	conns, err := b.connectWorkers(ctx, lc.workers)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, c := range conns {
			c.Close(context.WithoutCancel(ctx))
		}
	}()
	rowsSoFar := 0
	for _, ph := range phases {
		ph.loadAvg = benchwork.LoadAvg()
		if ph.cpu0, err = benchwork.CPU(p.pid()); err != nil {
			return nil, err
		}
		if err := b.pace(ctx, conns, table, ph, lc.txnRows); err != nil {
			return nil, fmt.Errorf("%s, %d changes/s: %w", s.name, ph.rate, err)
		}
		rowsSoFar += len(ph.commits) * lc.txnRows
		for seen.count() < rowsSoFar {
			if err := b.pollWait(ctx, p); err != nil {
				return nil, fmt.Errorf("%s: %w", s.name, err)
			}
			if consErr != nil {
				return nil, consErr
			}
			if time.Since(ph.committed) > b.cfg.timeout {
				return nil, fmt.Errorf("%s: %d of %d changes in Kafka %s after the %d changes/s phase; log %s",
					s.name, seen.count(), rowsSoFar, b.cfg.timeout, ph.rate, p.logPath)
			}
		}
		ph.drained = time.Now()
		if ph.cpu1, err = benchwork.CPU(p.pid()); err != nil {
			return nil, err
		}
		kind := "phase"
		if ph.warmup {
			kind = "warm-up"
		}
		fmt.Printf("  %s %-15s %6d changes/s target, %8.0f achieved, drained %.2f s after the last commit, load %s\n",
			kind, s.name, ph.rate, ph.achieved(lc.txnRows), ph.drained.Sub(ph.committed).Seconds(), ph.loadAvg)
		time.Sleep(time.Second) // idle between phases
	}
	hwmKB, err := benchwork.StatusKB(p.pid(), "VmHWM")
	if err != nil {
		return nil, err
	}
	if err := p.stop(2 * time.Minute); err != nil {
		return nil, err
	}
	if err := s.resumed(p); err != nil {
		return nil, err
	}
	if lc.csv != "" {
		if err := seen.writeCSV(lc.csv, s.name, phases, lc.txnRows); err != nil {
			return nil, err
		}
	}
	var out []latResult
	for _, ph := range phases {
		if ph.warmup {
			continue
		}
		r := seen.result(ph, lc.txnRows)
		r.System = s.name
		r.PeakRSSMB = float64(hwmKB) / 1024
		out = append(out, r)
		printLatRun(r)
	}
	return out, nil
}

func (b *bench) connectWorkers(ctx context.Context, n int) ([]*pgx.Conn, error) {
	var conns []*pgx.Conn
	for i := 0; i < n; i++ {
		c, err := pgx.Connect(ctx, b.cfg.dsn)
		if err != nil {
			for _, c := range conns {
				c.Close(ctx)
			}
			return nil, err
		}
		conns = append(conns, c)
	}
	return conns, nil
}

// pace commits the phase's transactions, the k-th due at start + k/rate:
// each worker connection takes the next transaction, waits until it is
// due and runs it (autocommit, synchronous_commit on: the shard's default).
// Transactions that fall behind run at once, so the achieved rate says
// whether the shard and the workers kept up.
func (b *bench) pace(ctx context.Context, conns []*pgx.Conn, table string, ph *latPhase, txnRows int) error {
	interval := time.Duration(float64(time.Second) * float64(txnRows) / float64(ph.rate))
	ph.start = time.Now()
	var next atomic.Int64
	errs := make([]error, len(conns))
	var wg sync.WaitGroup
	for w, conn := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(next.Add(1)) - 1
				if k >= len(ph.commits) || ctx.Err() != nil {
					return
				}
				if d := time.Until(ph.start.Add(time.Duration(k) * interval)); d > 0 {
					time.Sleep(d)
				}
				stmt := benchwork.InsertRows(table, strconv.Itoa(ph.firstTxn+k), txnRows, b.cfg.work.TitleBytes)
				if _, err := conn.Exec(ctx, stmt, pgx.QueryExecModeSimpleProtocol); err != nil {
					errs[w] = err
					return
				}
				ph.commits[k] = time.Now()
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, t := range ph.commits {
		if t.After(ph.committed) {
			ph.committed = t
		}
	}
	return ctx.Err()
}

func (ph *latPhase) achieved(txnRows int) float64 {
	return float64(len(ph.commits)*txnRows) / ph.committed.Sub(ph.start).Seconds()
}

// appendTimes holds, per id (1-based), the LogAppendTime of its change.
type appendTimes struct {
	mu   sync.Mutex
	at   []time.Time
	part []int32 // partition of each id's record
	n    atomic.Int64
}

func newAppendTimes(rows int) *appendTimes {
	return &appendTimes{at: make([]time.Time, rows+1), part: make([]int32, rows+1)}
}

func (a *appendTimes) count() int { return int(a.n.Load()) }

// consume reads the data topic until ctx ends, noting each change's append
// time by its id (the record key: "123" for Tributary, {"id":123} for
// Debezium).
func (a *appendTimes) consume(ctx context.Context, cl *kgo.Client, s *system) error {
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = errors.Join(ferr, err) })
		if ferr != nil {
			return fmt.Errorf("consume %s: %w", s.dataTopic, ferr)
		}
		a.mu.Lock()
		fs.EachRecord(func(r *kgo.Record) {
			if !s.isChange(r.Value) {
				return
			}
			id, ok := keyID(r.Key)
			if !ok || id < 1 || id >= int64(len(a.at)) || !a.at[id].IsZero() {
				return
			}
			a.at[id] = r.Timestamp
			a.part[id] = r.Partition
			a.n.Add(1)
		})
		a.mu.Unlock()
	}
}

// keyID is the decimal number in a record key.
func keyID(k []byte) (int64, bool) {
	var n int64
	ok := false
	for _, c := range k {
		if c >= '0' && c <= '9' {
			n = n*10 + int64(c-'0')
			ok = true
		}
	}
	return n, ok
}

func (a *appendTimes) result(ph *latPhase, txnRows int) latResult {
	a.mu.Lock()
	defer a.mu.Unlock()
	var ms []float64
	for k, c := range ph.commits {
		for i := 1; i <= txnRows; i++ {
			id := (ph.firstTxn+k)*txnRows + i
			ms = append(ms, float64(a.at[id].Sub(c).Microseconds())/1000)
		}
	}
	slices.Sort(ms)
	pct := func(q float64) float64 { return ms[min(len(ms)-1, int(q*float64(len(ms))))] }
	var sum float64
	for _, v := range ms {
		sum += v
	}
	return latResult{RateTarget: ph.rate, RateAchieved: ph.achieved(txnRows), Changes: len(ms),
		P50ms: pct(0.50), P95ms: pct(0.95), P99ms: pct(0.99), MaxMs: ms[len(ms)-1], MeanMs: sum / float64(len(ms)),
		Cores:        (ph.cpu1 - ph.cpu0).Seconds() / ph.drained.Sub(ph.start).Seconds(),
		DrainSeconds: ph.drained.Sub(ph.committed).Seconds(), LoadAvg: ph.loadAvg}
}

// writeCSV appends one line per change of the measured phases: system,
// target rate, id, partition, commit time (µs since the epoch, harness
// clock), LogAppendTime (ms since the epoch), latency (ms).
func (a *appendTimes) writeCSV(path, system string, phases []*latPhase, txnRows int) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	if st, err := f.Stat(); err == nil && st.Size() == 0 {
		fmt.Fprintln(w, "system,rate,id,partition,commit_us,append_ms,latency_ms")
	}
	a.mu.Lock()
	for _, ph := range phases {
		if ph.warmup {
			continue
		}
		for k, c := range ph.commits {
			for i := 1; i <= txnRows; i++ {
				id := (ph.firstTxn+k)*txnRows + i
				fmt.Fprintf(w, "%s,%d,%d,%d,%d,%d,%.3f\n", system, ph.rate, id, a.part[id], c.UnixMicro(),
					a.at[id].UnixMilli(), float64(a.at[id].Sub(c).Microseconds())/1000)
			}
		}
	}
	a.mu.Unlock()
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
