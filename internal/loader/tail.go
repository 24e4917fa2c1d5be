package loader

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The tail of a batch: once its rows and dead letters are written, what
// is left — its watermarks, the duplicate-id detection of the ids it made
// appear or disappear, then the offset commit — runs on its own goroutine
// beside the next batch's conversion and inserts. On a busy ClickHouse
// each is a round trip or more of waiting per batch (bench sustain: ~290
// ms of detection of ~680 ms per batch); overlapping them keeps the
// applier inserting.
//
// What keeps this exact:
//   - A batch's offsets are committed only after its rows are in
//     ClickHouse (the tail starts after apply returns) and after its
//     watermarks and detection are stored (the commit is the tail's last
//     step): a crash replays the batch, and the replay writes and detects
//     again.
//   - Watermarks follow every row of their batch (their write starts once
//     apply returned); a watermark says nothing about later rows, which
//     may be in already. Their write starts at once, beside the previous
//     batch's tail, not after it (early): a watermark needs its own
//     batch's rows only, and the watermarks table keeps the highest commit
//     LSN per partition whatever the order two batches' writes land in —
//     so read-your-writes does not wait for the previous batch's
//     duplicate checks. The batch's commit still waits for them. Marks and ownership precede their rows, so they precede the
//     watermarks too (the pre-aggregator relies on marks before
//     watermarks).
//   - Tails run one at a time, in batch order: the next one starts only
//     after the previous one ended (settle). Detection of batch N reads
//     ClickHouse after N's rows are in; it may also see rows of N+1
//     (being inserted meanwhile), which is what a batch holding both
//     would have seen; N+1's own detection then runs on the newer state.
//   - A TRUNCATE or snapshot end reads the open anomalies of the ids it
//     tombstones: a batch holding one waits for the tail before it (an
//     anomaly being opened there would otherwise be missed and stay open).
//   - Rebalances are allowed only with no tail running, so every batch
//     applied is committed (or failed to commit) before its partitions can
//     move: a rebalance asked for while a tail runs (OnPartitionsCallbackBlocked)
//     waits for that tail, then is allowed, as when the loader is idle.
//   - A tail's error (only a stopped context: ClickHouse writes retry) is
//     returned by the next settle, which stops Run.

// batchTail is what is left of a batch once its rows and dead letters
// are written.
type batchTail struct {
	// watermarks writes the batch's watermarks (nil: none).
	watermarks func() error
	// detects are the duplicate checks, one per table written.
	detects []func() error
	// commit are the records whose offsets may then be committed.
	commit []*kgo.Record
	// inserted is when the batch's rows were in ClickHouse (freshness.go).
	inserted time.Time
}

// tail is one batch's tail, running.
type tail struct {
	done chan struct{}
	err  error // set before done is closed
}

// startTail writes the watermarks and runs the duplicate checks (one per
// table), all concurrently — their rows are disjoint, and none reads
// what another writes — then commits the offsets.
func (l *Loader) startTail(ctx context.Context, cl *kgo.Client, bt batchTail) *tail {
	t := &tail{done: make(chan struct{})}
	commit := commitPoints(bt.commit)
	work := []func() error{func() error {
		t0 := time.Now()
		if err := all(bt.detects); err != nil {
			return err
		}
		l.m.since(stageDetect, t0)
		return nil
	}}
	if bt.watermarks != nil {
		work = append(work, bt.watermarks)
	}
	go func() {
		defer close(t.done)
		if err := all(work); err != nil {
			t.err = err
			return
		}
		if len(commit) == 0 {
			return
		}
		t0 := time.Now()
		err := cl.CommitRecords(ctx, commit...)
		l.m.since(stageCommit, t0)
		if err != nil {
			if ctx.Err() != nil {
				t.err = ctx.Err()
				return
			}
			// The batch is in ClickHouse and replaying it is harmless, so
			// a failed commit (typically: this member was kicked out of
			// the group during a long ClickHouse outage) costs a replay,
			// not correctness. franz-go rejoins the group by itself.
			// Versions and images are forgotten before the next batch
			// that Run starts.
			l.m.commitErrors.Inc()
			l.forget.Store(true)
			l.log.Warn("offset commit failed; the batch will be replayed by whoever owns its partitions",
				slog.Int("partitions", len(commit)), slog.Any("err", err))
		}
	}()
	return t
}

// early starts f now and returns what waits for it and returns its error
// (nil for a nil f). The wait may be called once or more.
func early(f func() error) func() error {
	if f == nil {
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- f() }()
	return sync.OnceValue(func() error { return <-done })
}

// ended says whether the tail is over (its error is then settled).
func (t *tail) ended() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// settle waits for the running tail, if any, and returns its error.
func (l *Loader) settle(t **tail) error {
	if *t == nil {
		return nil
	}
	<-(*t).done
	err := (*t).err
	*t = nil
	return err
}

// commitPoints keeps, of a batch's records to commit, the newest of each
// partition, copied without key and value: CommitRecords commits the
// highest offset per partition, and the tail should not keep the batch's
// record bytes alive.
func commitPoints(recs []*kgo.Record) []*kgo.Record {
	type tp struct {
		topic string
		part  int32
	}
	newest := map[tp]*kgo.Record{}
	var order []tp
	for _, r := range recs {
		k := tp{r.Topic, r.Partition}
		cur, ok := newest[k]
		if !ok {
			order = append(order, k)
		}
		if !ok || r.LeaderEpoch > cur.LeaderEpoch || (r.LeaderEpoch == cur.LeaderEpoch && r.Offset > cur.Offset) {
			newest[k] = r
		}
	}
	out := make([]*kgo.Record, 0, len(order))
	for _, k := range order {
		r := newest[k]
		out = append(out, &kgo.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, LeaderEpoch: r.LeaderEpoch})
	}
	return out
}

// cuts says whether a batch holds a TRUNCATE or a snapshot end.
func cuts(decoded []decodeResult) bool {
	for _, d := range decoded {
		if d.err == nil && d.ev != nil && isCut(d.ev) {
			return true
		}
	}
	return false
}

// all runs fs concurrently and returns the first error (the one of the
// lowest index). One function runs on the caller's goroutine.
func all(fs []func() error) error {
	switch len(fs) {
	case 0:
		return nil
	case 1:
		return fs[0]()
	}
	errs := make([]error, len(fs))
	var wg sync.WaitGroup
	for i, f := range fs[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i+1] = f()
		}()
	}
	errs[0] = fs[0]()
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
