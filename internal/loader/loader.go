// Package loader consumes Tributary change envelopes from Kafka and applies
// them to ClickHouse, exactly in effect: a batch of records is inserted,
// then (and only then) its offsets are committed. A crash between the two
// replays the batch; replays are harmless because every row carries its
// source version (see internal/chstore).
//
// One goroutine owns the Kafka client's poll loop. While a batch is being
// written nothing is polled, and franz-go's prefetch buffer is bounded
// (MaxBufferedRecords / FetchMaxBytes), so a slow ClickHouse slows
// consumption instead of growing memory. Rebalances are blocked during a
// batch (BlockRebalanceOnPoll) and allowed again after the commit, so a
// partition is never handed to another loader with applied-but-uncommitted
// records.
//
// Metrics (private registry, prefix tributary_loader_):
//
//	records_total{topic,kind}          Kafka records consumed
//	rows_inserted_total{table}         rows written to ClickHouse
//	duplicates_dropped_total{table}    redeliveries and stale versions skipped
//	dlq_records_total{topic,reason}    records sent to the dead-letter topic
//	insert_seconds{table}              ClickHouse insert latency
//	batch_records                      records per batch
//	insert_errors_total{table}         failed inserts (retried)
//	schema_changes_total{table}        tables created / columns added
//	table_stopped{table}               1 while a table is stopped
//	watermark_lsn{shard}               newest watermark written, by shard
//	consumer_lag_records{topic,partition} records not yet committed by the group
//	commit_errors_total                failed offset commits (the batch is replayed)
//	stage_seconds_total{stage}         wall time per stage of the loop: where the time goes
//
// and, without the loader_ infix (they describe the data, not this loader):
//
//	tributary_duplicate_ids{table,kind}              ids live on >1 shard past the grace period
//	tributary_duplicate_ids_pending{table,kind}      ids live on >1 shard within the grace period
//	tributary_duplicate_detections_total{table,kind} anomalies that crossed the grace period
package loader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/dedupe"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/tables"
)

// Config is what a Loader needs.
type Config struct {
	Brokers  []string
	Group    string
	DLQTopic string
	Tables   *tables.Config
	// BatchRecords and BatchWait bound a batch: it is written when either is
	// reached.
	BatchRecords int
	BatchWait    time.Duration
	// DedupeKeys bounds the memory of recently written versions.
	DedupeKeys int
	// DuplicateGrace is how long an id may be live on several shards (a
	// move in flight) before it is an alert.
	DuplicateGrace time.Duration
	// AnomalyInterval is how often open anomalies are evaluated.
	AnomalyInterval time.Duration
	// LagInterval is how often consumer lag is sampled.
	LagInterval time.Duration
}

// Loader applies change envelopes to ClickHouse.
type Loader struct {
	cfg   Config
	store *chstore.Store
	log   *slog.Logger
	m     *metrics

	// Owned by the Run goroutine.
	versions *dedupe.Versions
	decoders []*envelope.Decoder // one per decoding worker
	stopped  map[string]error    // table -> why it is stopped
}

// New builds a loader; it connects nothing until Run.
func New(cfg Config, store *chstore.Store, log *slog.Logger, reg prometheus.Registerer) *Loader {
	if cfg.DedupeKeys <= 0 {
		cfg.DedupeKeys = 1 << 20
	}
	if cfg.DuplicateGrace <= 0 {
		cfg.DuplicateGrace = 5 * time.Minute
	}
	if cfg.AnomalyInterval <= 0 {
		cfg.AnomalyInterval = 5 * time.Second
	}
	if cfg.LagInterval <= 0 {
		cfg.LagInterval = 10 * time.Second
	}
	decoders := make([]*envelope.Decoder, max(1, runtime.GOMAXPROCS(0)))
	for i := range decoders {
		decoders[i] = &envelope.Decoder{}
	}
	return &Loader{
		cfg: cfg, store: store, log: log, m: newMetrics(reg),
		versions: dedupe.NewVersions(cfg.DedupeKeys),
		decoders: decoders,
		stopped:  map[string]error{},
	}
}

// Run consumes until ctx is done or a non-retryable error happens.
func (l *Loader) Run(ctx context.Context) error {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(l.cfg.Brokers...),
		kgo.ConsumerGroup(l.cfg.Group),
		kgo.ConsumeTopics(l.cfg.Tables.Topics()...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		// Snapshots are produced in Kafka transactions: never apply the
		// records of one that did not commit.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.BlockRebalanceOnPoll(),
		kgo.FetchMaxBytes(16<<20),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			l.log.Info("partitions assigned", slog.Any("partitions", m))
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			// Everything polled was committed before the rebalance was
			// allowed; forget versions another loader may now advance.
			l.versions.Forget()
			l.log.Info("partitions revoked", slog.Any("partitions", m))
		}),
		// DLQ produces: idempotent, acks=all (franz-go defaults).
		kgo.AllowAutoTopicCreation(),
	)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	// Close leaves the group, which waits for rebalances to be allowed:
	// allow them first, or a poll interrupted by shutdown blocks it forever.
	defer func() {
		cl.AllowRebalance()
		cl.Close()
	}()

	// The monitors end with Run: they use the client closed above.
	mctx, stopMonitors := context.WithCancel(ctx)
	var monitors sync.WaitGroup
	monitors.Add(2)
	go func() { defer monitors.Done(); l.watchAnomalies(mctx) }() //nolint:errcheck // logs its own errors
	go func() { defer monitors.Done(); l.watchLag(mctx, cl) }()
	defer func() {
		stopMonitors()
		monitors.Wait()
	}()
	for {
		t0 := time.Now()
		recs, err := l.poll(ctx, cl)
		l.m.since(stagePoll, t0)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if len(recs) > 0 {
			commit, err := l.apply(ctx, cl, recs)
			if err != nil {
				cl.AllowRebalance()
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			t1 := time.Now()
			err = cl.CommitRecords(ctx, commit...)
			l.m.since(stageCommit, t1)
			if err != nil {
				cl.AllowRebalance()
				if ctx.Err() != nil {
					return nil
				}
				// The batch is in ClickHouse and replaying it is harmless, so
				// a failed commit (typically: this member was kicked out of
				// the group during a long ClickHouse outage) costs a replay,
				// not correctness. franz-go rejoins the group by itself.
				l.m.commitErrors.Inc()
				l.versions.Forget()
				l.log.Warn("offset commit failed; the batch will be replayed by whoever owns its partitions",
					slog.Int("records", len(commit)), slog.Any("err", err))
			}
		}
		cl.AllowRebalance()
		if ctx.Err() != nil {
			return nil
		}
	}
}

// poll gathers up to BatchRecords records, waiting at most BatchWait after
// the first one arrives.
func (l *Loader) poll(ctx context.Context, cl *kgo.Client) ([]*kgo.Record, error) {
	var out []*kgo.Record
	var deadline time.Time
	for len(out) < l.cfg.BatchRecords {
		pctx := ctx
		var cancel context.CancelFunc = func() {}
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				break
			}
			pctx, cancel = context.WithTimeout(ctx, left)
		}
		fs := cl.PollRecords(pctx, l.cfg.BatchRecords-len(out))
		cancel()
		if fs.IsClientClosed() {
			return nil, errors.New("kafka client closed")
		}
		fs.EachError(func(t string, p int32, err error) {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return
			}
			// Fetch errors are retried by franz-go; operators see them here
			// and as consumer lag.
			l.log.Warn("fetch error", slog.String("topic", t), slog.Int("partition", int(p)), slog.Any("err", err))
		})
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
		if len(out) == 0 {
			// Any poll, even one that returned only errors, blocks
			// rebalances until allowed: with nothing gathered there is
			// nothing to protect, so let a pending rebalance proceed.
			cl.AllowRebalance()
		}
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		if len(out) > 0 && deadline.IsZero() {
			deadline = time.Now().Add(l.cfg.BatchWait)
		}
	}
	return out, nil
}
