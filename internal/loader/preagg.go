package loader

import (
	"context"
	"log/slog"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/preagg"
	"github.com/tributary/tributary/internal/tables"
)

// Revenue pre-aggregates (internal/preagg): every loader marks the id
// blocks its batches change in the revenue table, before it inserts them;
// among the loaders started with RevenueAggregator, the one that owns
// partition 0 of the revenue table's topic recomputes them.
//
// Why partition 0, not a lease in ClickHouse: Kafka's group coordinator
// already gives each partition one owner per generation, and the loader
// hands partitions over only after everything it applied is committed;
// the aggregator stops (its round ends) inside the revoke, before the
// partition can be assigned elsewhere, so two never overlap while both
// loaders reach Kafka. ClickHouse has no compare-and-set to build a lease
// on (an insert-and-read-back lease needs clocks and waits to break ties).
// The one gap is a loader cut off from Kafka but not from ClickHouse: it
// runs rounds until franz-go declares its partitions lost (about the
// session timeout), which may overlap the new owner's first rounds.

// newMarks returns the marks collector of the revenue table, if any.
func newMarks(cfg Config) *preagg.Marks {
	if cfg.Tables.Revenue == nil || preaggRefused(cfg) != "" {
		return nil
	}
	return preagg.NewMarks(cfg.Tables.Revenue.Table, cfg.PreaggBlockBits)
}

// markRow marks the block of one written change of table tc.
func (l *Loader) markRow(tc *tables.Table, ev *envelope.Event) {
	if l.marks != nil && tc.Name == l.marks.Table() {
		l.marks.Add(ev.Shard, ev.ID, uint64(ev.CommitLSN))
	}
}

// markAll marks every block of table: a TRUNCATE or snapshot end, which
// tombstones rows the batch does not name. The marks are written at once,
// before the tombstones.
func (l *Loader) markAll(ctx context.Context, table string, ev *envelope.Event) error {
	if l.marks == nil || table != l.marks.Table() {
		return nil
	}
	l.marks.All(ev.Shard, uint64(ev.CommitLSN))
	return l.retry(ctx, "revenue marks "+table, func() error { return l.writeMarks(ctx, table) })
}

// marksPending says whether table has marks to write before its rows.
func (l *Loader) marksPending(table string) bool {
	return l.marks != nil && table == l.marks.Table() && l.marks.Len() > 0
}

// writeMarks writes table's pending marks.
func (l *Loader) writeMarks(ctx context.Context, table string) error {
	if !l.marksPending(table) {
		return nil
	}
	return l.marks.Write(ctx, l.store)
}

// election runs the aggregator while this loader owns partition 0 of the
// revenue topic: franz-go's callbacks elect it (assigned) and unelect it
// (revoked, which waits for the round in progress to end), and run — one
// of Run's monitors — runs it while elected.
type election struct {
	agg   *preagg.Aggregator
	topic string
	wake  chan struct{} // cap 1: elected since run last looked

	mu      sync.Mutex
	elected bool
	cancel  context.CancelFunc // of the aggregator running, nil when none
	done    chan struct{}      // closed when it ended
}

// newElection returns the election of agg's table (nil without agg).
func newElection(agg *preagg.Aggregator, cfg Config) *election {
	if agg == nil {
		return nil
	}
	t, _ := cfg.Tables.ByName(cfg.Tables.Revenue.Table)
	return &election{agg: agg, topic: t.Topic, wake: make(chan struct{}, 1)}
}

// assigned elects this loader when m holds partition 0 of the topic.
func (e *election) assigned(m map[string][]int32) {
	if e == nil || !slices.Contains(m[e.topic], 0) {
		return
	}
	e.mu.Lock()
	e.elected = true
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// revoked unelects this loader, and waits for the aggregator's round to
// end, when m holds partition 0 of the topic (revoked or lost).
func (e *election) revoked(m map[string][]int32) {
	if e == nil || !slices.Contains(m[e.topic], 0) {
		return
	}
	e.mu.Lock()
	e.elected = false
	cancel, done := e.cancel, e.done
	e.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// run runs the aggregator whenever this loader is elected, until ctx
// ends. The aggregator counts and logs its failed rounds itself.
func (e *election) run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-e.wake:
		}
		e.mu.Lock()
		if !e.elected {
			e.mu.Unlock()
			continue
		}
		actx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		e.cancel, e.done = cancel, done
		e.mu.Unlock()
		e.agg.Run(actx)
		e.mu.Lock()
		e.cancel, e.done = nil, nil
		e.mu.Unlock()
		cancel()
		close(done)
	}
}

// newAggregator builds the revenue aggregator when this loader may run it.
func newAggregator(cfg Config, store *chstore.Store, log *slog.Logger, reg prometheus.Registerer) *preagg.Aggregator {
	rev := cfg.Tables.Revenue
	if !cfg.RevenueAggregator || rev == nil {
		return nil
	}
	if why := preaggRefused(cfg); why != "" {
		log.Warn("revenue pre-aggregator off; GET /v1/revenue answers with the live query", slog.String("table", rev.Table), slog.String("reason", why))
		return nil
	}
	t, _ := cfg.Tables.ByName(rev.Table)
	return preagg.New(preagg.Config{Revenue: rev, IDColumn: t.IDColumn, ShardKey: t.ShardKey, Topic: t.Topic,
		BlockBits: cfg.PreaggBlockBits, Interval: cfg.PreaggInterval}, store, log, reg)
}

// preaggRefused is why the revenue table cannot be pre-aggregated, "" when
// it can: the pre-aggregates are kept in blocks of one id column (intDiv
// of the id, or of its hash), which a composite key does not have. The
// live revenue query works on any identity.
func preaggRefused(cfg Config) string {
	_, t, ok := cfg.Tables.RevenueTable()
	if ok && t.Composite() {
		return "the revenue table is identified by several columns " + t.KeyForm() + ", and pre-aggregates are kept by blocks of one id column"
	}
	return ""
}
