package chaos

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Run runs the soak and writes its progress and verdict to w. It returns
// the verdict; an error means the soak itself could not run.
func Run(ctx context.Context, cfg Config, w io.Writer) (*Verdict, error) {
	st, err := loadStack(cfg.Repo, cfg.Home)
	if err != nil {
		return nil, err
	}
	out := cfg.Out
	if out == "" {
		out = filepath.Join(cfg.Home, "chaos")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	fleetLog, err := os.Create(filepath.Join(out, "fleet.log"))
	if err != nil {
		return nil, err
	}
	defer fleetLog.Close()
	stackLog, err := os.Create(filepath.Join(out, "stack.log"))
	if err != nil {
		return nil, err
	}
	defer stackLog.Close()
	seed := cfg.Seed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(w, "%s chaos: %s\n", time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
	logf("seed %d (repeat the schedule with --seed %d); faults for %s; logs in %s", seed, seed, cfg.Duration, out)

	fl := startFleet(st, cfg, fleetLog)
	stopped := false
	stopFleet := func() {
		if stopped {
			return
		}
		stopped = true
		var wg sync.WaitGroup
		for _, p := range fl.all() {
			wg.Go(p.stop)
		}
		wg.Wait()
	}
	defer stopFleet()

	// The fleet is fresh once every shard's initial copy and what the
	// traffic wrote since are in ClickHouse.
	start := time.Now()
	if err := fresh(ctx, st, cfg.Converge); err != nil {
		return nil, fmt.Errorf("the fleet never became fresh after its start: %w (logs: %s)", err, fleetLog.Name())
	}
	logf("fleet fresh %s after start; traffic: %d ops/s + %d bulk transactions/s of %d rows", time.Since(start).Round(time.Millisecond), cfg.Rate, cfg.BulkRate, cfg.BulkRows)

	ids := sampleIDs(ctx, st)
	docID := func() string { return ids[rand.IntN(len(ids))] }
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	pr, mem := &probe{}, &rss{}
	var watchers sync.WaitGroup
	watchers.Go(func() { pr.run(watchCtx, st.apiAddr(), docID) })
	watchers.Go(func() { mem.run(watchCtx, st, fl) })

	// The schedule: minFaults faults spread over the duration (gaps). A
	// fault's recovery (a stack.sh up: a minute or more on a loaded
	// machine) runs beside the schedule, so a slow one does not thin it
	// out; only its own component waits for it (draw takes another). Freshness after each fault is awaited beside
	// the next faults too: a later fault may lengthen an earlier one's
	// time to fresh, as it would in production.
	in := &injector{st: st, fleet: fl, rng: rand.New(rand.NewPCG(uint64(seed), 0)), log: stackLog}
	schedule := gaps(in.rng, cfg.minFaults(), cfg.Duration)
	var faults []*fault
	var pending sync.WaitGroup
	var busyMu sync.Mutex
	busy := map[string]bool{} // components recovering
	next := time.Now().Add(schedule[0])
	for i := 1; i < len(schedule) && ctx.Err() == nil; i++ {
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(next)):
		}
		if ctx.Err() != nil {
			break
		}
		next = next.Add(schedule[i])
		busyMu.Lock()
		f := in.draw(func(c string) bool { return busy[c] })
		if f != nil {
			busy[f.component()] = true
		}
		busyMu.Unlock()
		if f == nil {
			logf("every component drawn is still recovering; no fault this time")
			continue
		}
		faults = append(faults, f)
		n := len(faults)
		pending.Go(func() {
			in.inject(ctx, f)
			busyMu.Lock()
			delete(busy, f.component())
			busyMu.Unlock()
			if f.err != nil {
				logf("fault %d: %s %s FAILED after %s: %v", n, f.kind, f.target, f.recovered.Round(time.Millisecond), f.err)
				return
			}
			logf("fault %d: %s %s, back after %s", n, f.kind, f.target, f.recovered.Round(time.Millisecond))
			if err := fresh(ctx, st, cfg.Converge); err != nil {
				f.err = fmt.Errorf("not fresh within %s: %w", cfg.Converge, err)
				logf("fault %d: %s %s never fresh: %v", n, f.kind, f.target, err)
				return
			}
			f.fresh = time.Since(f.at)
			logf("fault %d: %s %s fresh after %s", n, f.kind, f.target, f.fresh.Round(time.Millisecond))
		})
	}
	pending.Wait()

	logf("faults done; stopping traffic and converging")
	for _, p := range fl.traffic {
		p.stop()
	}
	v := &Verdict{Seed: seed, Faults: faults, MinFaults: cfg.minFaults()}
	convStart := time.Now()
	if err := fresh(ctx, st, cfg.Converge); err != nil {
		v.Problems = append(v.Problems, fmt.Sprintf("not fresh within %s after the traffic stopped: %v", cfg.Converge, err))
	}
	v.Converged = time.Since(convStart)
	stopWatch()
	watchers.Wait()
	v.Answers, v.PeakRSS = pr.answers, mem.peak

	vctx, vcancel := context.WithTimeout(ctx, 15*time.Minute)
	defer vcancel()
	logf("converged in %s; running the verifier", v.Converged.Round(time.Millisecond))
	if v.VerifyPassed, v.VerifyTail, err = runVerify(vctx, st, out, cfg.VerifyAPISample); err != nil {
		v.Problems = append(v.Problems, err.Error())
	}
	lctx, lcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer lcancel()
	if v.LagMax, v.LagNonZero, err = waitLagZero(lctx, st.loaderMetrics()); err != nil {
		v.Problems = append(v.Problems, "loader lag metric: "+err.Error())
	}
	if v.DLQ, err = dlqRecords(ctx, st.env["TRIBUTARY_KAFKA_BROKERS"]); err != nil {
		v.Problems = append(v.Problems, err.Error())
	}
	if v.SlotWAL, err = slotWAL(ctx, st); err != nil {
		v.Problems = append(v.Problems, err.Error())
	}
	stopFleet()
	return v, nil
}

// fresh takes every shard's WAL position and waits up to timeout for the
// API's watermarks to pass it.
func fresh(ctx context.Context, st *stack, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	want, err := walPositions(ctx, st)
	if err != nil {
		return err
	}
	return waitFresh(ctx, st.apiAddr(), want)
}

// sampleIDs are up to 100 document ids of the first shard, for the probe's
// by-id lookups (they may move or be deleted later: a 404 is an answer).
func sampleIDs(ctx context.Context, st *stack) []string {
	ids := []string{"1"}
	conn, err := pgx.Connect(ctx, st.shards[0].DSN)
	if err != nil {
		return ids
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT id FROM documents ORDER BY id DESC LIMIT 100")
	if err != nil {
		return ids
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		if rows.Scan(&id) == nil {
			ids = append(ids, strconv.FormatInt(id, 10))
		}
	}
	return ids
}

// gaps is the schedule of n faults over total: n+1 gaps, each drawn at
// ±40 % of the mean and all scaled to add up to total, so a soak has
// exactly the faults its verdict asks for (gaps drawn freely gave a
// 30-minute soak 49 of its 50).
func gaps(rng *rand.Rand, n int, total time.Duration) []time.Duration {
	w := make([]float64, n+1)
	var sum float64
	for i := range w {
		w[i] = 0.6 + 0.8*rng.Float64()
		sum += w[i]
	}
	out := make([]time.Duration, n+1)
	var used time.Duration
	for i := range w[:n] {
		out[i] = time.Duration(float64(total) * w[i] / sum)
		used += out[i]
	}
	out[n] = total - used
	return out
}
