// Package loader consumes Tributary change envelopes from Kafka and applies
// them to ClickHouse, exactly in effect: a batch of records is inserted,
// then (and only then) its offsets are committed. A crash between the two
// replays the batch; replays are harmless because every row carries its
// source version (see internal/chstore).
//
// Three goroutines form a pipeline (the monitors run beside it,
// monitors.go): the poller fetches and decodes the next batch (on every
// core) while the applier writes the current one to ClickHouse (its tables
// concurrently), through the apply steps (steps.go), while the previous
// batch's tail —
// its watermarks and duplicate-id detection, then its offset commit —
// finishes beside them (tail.go). At most two batches of records are held (the tail keeps
// only ids and offsets), and franz-go's prefetch buffer is bounded
// (FetchMaxBytes), so a slow ClickHouse slows consumption instead of
// growing memory. Rebalances are blocked from a poll until everything
// applied is committed (BlockRebalanceOnPoll; AllowRebalance while idle,
// or once a waiting rebalance signals and the tail has ended), so a
// partition is not handed to another loader with applied-but-uncommitted
// records. The one window left — a batch polled just before a rebalance is
// allowed — can only cause a replay, which every write tolerates (rows are
// versioned by source LSN).
//
// Metrics (private registry, prefix tributary_loader_):
//
//	records_total{topic,kind}          Kafka records consumed
//	rows_inserted_total{table}         rows written to ClickHouse
//	duplicates_dropped_total{table}    redeliveries and stale versions skipped
//	dlq_records_total{topic,reason}    records sent to the dead-letter topic
//	insert_seconds{table}              ClickHouse insert latency
//	batch_records                      records per batch
//	batch_bytes                        record bytes (keys and values) per batch
//	insert_errors_total{table}         failed inserts (retried)
//	schema_changes_total{table}        tables created / columns added
//	table_stopped{table}               1 while a table is stopped
//	table_paused{table}                1 while an operator has paused the table (tributaryctl pause)
//	watermark_lsn{shard}               newest watermark written, by shard
//	replicas_skipped_total{shard,replica} watermark writes that did not wait for a ClickHouse replica that did not answer (cluster mode; replicas.go)
//	replica_stalled{shard,replica}     1 while watermarks wait 10 s or more for a ClickHouse replica that answers but has not caught up
//	consumer_lag_records{topic,partition} records in Kafka one sample ago not yet committed by the group (lag.go)
//	commit_errors_total                failed offset commits (the batch is replayed)
//	group_request_seconds{request}     round trip of the group's requests: heartbeat, join, sync, commit (group.go)
//	group_session_errors_total         group sessions ended by an error (expelled, join refused, ...)
//	partitions_lost_total              times the partitions were lost rather than revoked
//	stage_seconds_total{stage}         wall time per stage of the loop: where the time goes
//	freshness_seconds{stage}           a watermark record's way from its commit to ClickHouse, per stage
//	                                   (reader, kafka, batch, insert, watermark; freshness.go)
//	watermark_delay_seconds            commit on the shard → its watermark written (the stages' sum)
//	toast_bases_total{source}          unchanged-TOAST bases by source (batch, cache, clickhouse)
//	image_cache_bytes                  memory held by the image cache (approximate)
//	image_cache_entries                rows the image cache holds
//	image_cache_evictions_total        images dropped for room
//	table_parts{table}                 active ClickHouse parts (with the compaction keeper)
//	compactions_total{table,result}    whole-table merges: done, busy, failed, too_large
//	compaction_seconds{table}          duration of the merges that completed
//	monitor_errors_total{monitor}      failed rounds of the monitors (monitors.go), retried
//
// Every series an alert rule reads (deploy/prometheus/tributary-rules.yml)
// is exported at 0 from New on, for every table, topic, dead-letter reason
// and ring map shard the config names: a counter born at its first event
// has no earlier sample, and increase() would not see that event.
//
// With CompactInterval the loader runs a compaction keeper
// (internal/compact): a table whose parts have piled up is merged whole
// while no merge runs, so a by-id read opens one part, not six or more.
//
// The image cache (images.go) keeps the newest written values of the
// columns that arrive as unchanged TOAST, so most updates that leave them
// out need no read of ClickHouse. It is emptied on every rebalance (and
// after a failed commit), and a table's images on a TRUNCATE or snapshot
// end.
//
// With a ring map (see placement.go):
//
//	tributary_misplaced_writes_total{table,shard}  live rows written on a shard that does not own them
//	tributary_misplaced_rows{table,shard}          live rows currently misplaced (global, from ClickHouse)
//	tributary_moving_writes_total{table,shard}     live rows written on their owner under the staged map: an arc move's copies
//	tributary_moving_rows{table,shard}             live rows of a planned arc move (global, from ClickHouse)
//	tributary_ring_map_version                     version of the ring map rows are placed under (0: none)
//	tributary_ring_map_reloads_total{outcome}      ring map file reloads: applied, refused
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
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/compact"
	"github.com/tributary/tributary/internal/dedupe"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/kafkaconn"
	"github.com/tributary/tributary/internal/preagg"
	"github.com/tributary/tributary/internal/ring"
	"github.com/tributary/tributary/internal/tables"
)

// Config is what a Loader needs.
type Config struct {
	Brokers []string
	// KafkaSecurity is the TLS and SASL of the connections to Brokers (the
	// zero value: plaintext, no authentication).
	KafkaSecurity kafkaconn.Security
	Group         string
	DLQTopic      string
	Tables        *tables.Config
	// BatchRecords, BatchBytes and BatchWait bound a batch: it is written
	// when any is reached, or as soon as nothing more is buffered, the
	// previous batch is written and the batch holds a watermark record (or
	// waited watermarkLinger for one): BatchWait is the longest a batch
	// grows while the previous one is still being written. BatchBytes counts the records' keys and values
	// (0: DefaultBatchBytes); it bounds the loader's memory, which holds
	// two batches (one applied, the next decoded) plus their decoded and
	// converted forms, whatever the size of the rows.
	BatchRecords int
	BatchBytes   int
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
	// Ring is the published ring map (nil: no ownership checks). Tables
	// with a shard_key are checked against it.
	Ring *ring.Map
	// RingPath, if set, is the file Ring was read from: it is read again
	// every RingReloadInterval (default 5 s) and a newer map applied.
	RingPath           string
	RingReloadInterval time.Duration
	// PreaggBlockBits sizes the revenue table's id blocks for the
	// pre-aggregates (0: preagg.DefaultBlockBits). Every loader marks
	// blocks; RevenueAggregator makes this one a candidate to recompute
	// them: of the candidates, the owner of partition 0 of the revenue
	// topic does (preagg.go), so any number may be started.
	PreaggBlockBits   int
	RevenueAggregator bool
	// PreaggInterval is how often the aggregator runs a round (0:
	// preagg.DefaultInterval).
	PreaggInterval time.Duration
	// MisplacedInterval is how often misplaced rows are counted.
	MisplacedInterval time.Duration
	// InstanceID, if set, makes this loader a static member of the group
	// (KIP-345): restarted under the same id, it takes its partitions back
	// at once instead of waiting for its old session to expire.
	InstanceID string
	// SessionTimeout is how long the group waits for a silent loader
	// before giving its partitions to the others.
	SessionTimeout time.Duration
	// ImageCacheBytes bounds the image cache (0: DefaultImageCacheBytes;
	// negative: no cache, every unchanged-TOAST base is read back).
	ImageCacheBytes int64
	// CompactInterval, when > 0, runs a compaction keeper (internal/compact)
	// over the replicated tables and the move log's index: a table with more
	// than CompactMaxParts active parts and at most CompactMaxBytes on disk
	// is merged whole, so by-id reads open one part (0s: defaults).
	CompactInterval time.Duration
	CompactMaxParts int
	CompactMaxBytes int64
}

// DefaultBatchBytes is the default bound on a batch's record bytes.
const DefaultBatchBytes = 64 << 20

// Defaults of the Config fields that cmd/loader has flags for; New applies
// them to fields left zero (in-process loaders of tests and benchmarks),
// and the flags start from them, so each default is written once.
const (
	DefaultDedupeKeys        = 1 << 20
	DefaultDuplicateGrace    = 5 * time.Minute
	DefaultMisplacedInterval = 30 * time.Second
	DefaultSessionTimeout    = 15 * time.Second
)

// Loader applies change envelopes to ClickHouse.
type Loader struct {
	cfg   Config
	store store // a *chstore.Store (store.go)
	log   *slog.Logger
	m     *metrics

	// Owned by the Run goroutine.
	versions *dedupe.Versions
	decoders []*envelope.Decoder // one per decoding worker; used by the poller
	forget   atomic.Bool         // set on rebalances and failed commits: forget versions and images before the next batch
	// rebalanceWanted is set when a rebalance waits for AllowRebalance.
	rebalanceWanted atomic.Bool
	// pauses is the newest operator pause record per table (paused.go),
	// read by a monitor; the applier acts on it between batches.
	pauses atomic.Pointer[map[string]chstore.Pause]
	resume resumes
	images *dedupe.Images
	// lagPrev is the partitions' offsets at the last lag sample (lag.go;
	// only the lag monitor uses it).
	lagPrev listedRange
	// skipLogged is, per ClickHouse node, when the loader last logged
	// that it skipped it (replicas.go): once per chstore.ReplicaWaitStall.
	skipLogged sync.Map
	// imageBudget is the cache's budget (<= 0: off); toastCols, by table,
	// the columns seen unchanged, which images keep; evictedSeen, the
	// evictions already counted in metrics.
	imageBudget int64
	toastCols   map[string][]string
	evictedSeen uint64
	place       placement
	// cutPage is how many live rows a TRUNCATE or snapshot end reads and
	// tombstones at a time (cutPageRows; tests make it small).
	cutPage int
	marks   *preagg.Marks    // the revenue table's, or nil
	stopped map[string]error // table -> why it is stopped
	stops   *stopRecords     // the same, as recorded in ClickHouse (stopped.go)
	elect   *election        // nil unless RevenueAggregator (preagg.go)
	keeper  *compact.Keeper  // nil unless CompactInterval > 0
	moveIdx moveIndexes      // the move log's index (byid_index.go)
	// counted are, by table, the open anomalies whose detection this
	// loader counted (anomalies.go; the evaluation goroutine's).
	counted map[string]map[countedKey]bool
	// anomalyLog summarises anomalies in the log (anomaly_log.go; the
	// evaluation goroutine's).
	anomalyLog anomalyLog
}

// New builds a loader; it connects nothing until Run.
func New(cfg Config, store *chstore.Store, log *slog.Logger, reg prometheus.Registerer) *Loader {
	if cfg.DedupeKeys <= 0 {
		cfg.DedupeKeys = DefaultDedupeKeys
	}
	if cfg.BatchBytes <= 0 {
		cfg.BatchBytes = DefaultBatchBytes
	}
	if cfg.DuplicateGrace <= 0 {
		cfg.DuplicateGrace = DefaultDuplicateGrace
	}
	if cfg.AnomalyInterval <= 0 {
		cfg.AnomalyInterval = 5 * time.Second
	}
	if cfg.LagInterval <= 0 {
		cfg.LagInterval = 10 * time.Second
	}
	if cfg.MisplacedInterval <= 0 {
		cfg.MisplacedInterval = DefaultMisplacedInterval
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	decoders := make([]*envelope.Decoder, max(1, runtime.GOMAXPROCS(0)))
	for i := range decoders {
		decoders[i] = &envelope.Decoder{}
	}
	if cfg.PreaggBlockBits <= 0 {
		cfg.PreaggBlockBits = preagg.DefaultBlockBits
	}
	if cfg.ImageCacheBytes == 0 {
		cfg.ImageCacheBytes = DefaultImageCacheBytes
	}
	if cfg.Tables != nil && store != nil {
		store.SetColumnTypes(cfg.Tables.ColumnTypes())
	}
	l := &Loader{
		cfg: cfg, log: log, m: newMetrics(reg, cfg.Tables, cfg.Ring),
		versions:    dedupe.NewVersions(cfg.DedupeKeys),
		images:      dedupe.NewImages(max(0, cfg.ImageCacheBytes)),
		imageBudget: cfg.ImageCacheBytes,
		toastCols:   map[string][]string{},
		decoders:    decoders,
		stopped:     map[string]error{},
		stops:       newStopRecords(cfg),
		counted:     map[string]map[countedKey]bool{},
		anomalyLog:  anomalyLog{log: log},
		cutPage:     cutPageRows,
		marks:       newMarks(cfg),
		elect:       newElection(newAggregator(cfg, store, log, reg), cfg),
		keeper:      newKeeper(cfg, store, log, reg),
	}
	if store != nil {
		l.store = store
	}
	return l
}

// CompactTables are the tables the compaction keeper keeps: every
// replicated table of c and the move log's index, which the by-id read of
// documents reads too.
func CompactTables(c *tables.Config) []string {
	var names []string
	for _, t := range c.Tables {
		names = append(names, t.Name)
	}
	if m, ok := moveIndexOf(c); ok {
		names = append(names, m.Table())
	}
	return names
}

// newKeeper builds the compaction keeper of CompactTables when
// CompactInterval is set.
func newKeeper(cfg Config, store *chstore.Store, log *slog.Logger, reg prometheus.Registerer) *compact.Keeper {
	if cfg.CompactInterval <= 0 {
		return nil
	}
	ccfg := compact.Config{Tables: CompactTables(cfg.Tables), Interval: cfg.CompactInterval,
		MaxParts: cfg.CompactMaxParts, MaxBytes: cfg.CompactMaxBytes}
	return compact.ForStore(ccfg, store, log, reg)
}

// Run consumes until ctx is done or a non-retryable error happens.
func (l *Loader) Run(ctx context.Context) error {
	l.logCapabilities(ctx)
	l.ensureMoveIndexAtStart(ctx) // byid_index.go
	cl, err := l.newClient()
	if err != nil {
		return err
	}
	// Close leaves the group, which waits for rebalances to be allowed:
	// allow them first, or a poll interrupted by shutdown blocks it forever.
	defer func() {
		cl.AllowRebalance()
		cl.Close()
	}()
	// A wrong password or an untrusted certificate stops the loader here,
	// saying which, instead of as fetch errors retried forever.
	if err := kafkaconn.Check(ctx, cl, l.cfg.Brokers, l.cfg.KafkaSecurity); err != nil {
		return err
	}
	if err := l.loadPlacement(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if err := l.readPausesAtStart(ctx); err != nil {
		return nil // only ctx ends it
	}
	// The monitors end with Run (monitors.go): they use the client closed
	// above. One that fails ends Run with its error.
	ms := l.startMonitors(ctx, l.monitorsOf(cl))
	err = l.consume(ctx, cl, ms.failed())
	if merr := ms.stop(); merr != nil && ctx.Err() == nil {
		return merr
	}
	return err
}

// newClient is the consumer group's client. The callbacks forget what
// another loader may advance, and elect the revenue aggregator.
func (l *Loader) newClient() (*kgo.Client, error) {
	kafkaOpts, err := l.cfg.KafkaSecurity.ClientOpts()
	if err != nil {
		return nil, err
	}
	opts := append(kafkaOpts,
		kgo.SeedBrokers(l.cfg.Brokers...),
		kgo.ConsumerGroup(l.cfg.Group),
		// A killed loader's partitions wait for its session to expire:
		// 15 s (franz-go's default is 45 s) with 3 s heartbeats, which run
		// beside the batch work.
		kgo.SessionTimeout(l.cfg.SessionTimeout),
		kgo.ConsumeTopics(l.cfg.Tables.Topics()...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		// Nothing of ours produces in Kafka transactions; read-committed
		// keeps records of an aborted one (another producer's) out.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.BlockRebalanceOnPoll(),
		// A fetch is at most a batch's bytes, so the first poll of a batch
		// cannot overshoot it by more than one batch (Kafka may still
		// return one record batch larger than this: it always returns one).
		kgo.FetchMaxBytes(int32(min(16<<20, l.cfg.BatchBytes))),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			// Images of a partition held before are stale if another
			// loader owned it meanwhile (a batch polled before it was
			// revoked may have been applied after the revoke's forget).
			l.forget.Store(true)
			l.log.Info("partitions assigned", slog.Any("partitions", m))
			l.elect.assigned(m)
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			// Everything applied was committed before the rebalance was
			// allowed; forget versions and images another loader may now
			// advance (before the next batch, on Run's goroutine).
			l.forget.Store(true)
			l.log.Info("partitions revoked", slog.Any("partitions", m))
			l.elect.revoked(m)
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			l.forget.Store(true)
			l.m.group.lost(m)
			l.log.Warn("partitions lost", slog.Any("partitions", m))
			l.elect.revoked(m)
		}),
		// A rebalance waits for AllowRebalance, which Run calls only with
		// no batch applied but uncommitted: this says one is waiting.
		kgo.OnPartitionsCallbackBlocked(func(context.Context, *kgo.Client) { l.rebalanceWanted.Store(true) }),
		// DLQ produces: idempotent, acks=all (franz-go defaults).
		kgo.AllowAutoTopicCreation(),
		// Why a session ends, and how long the coordinator takes (group.go).
		kgo.WithHooks(l.m.group),
		kgo.WithLogger(kafkaLogger{l.log}),
	)
	if l.cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(l.cfg.InstanceID))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return cl, nil
}

// consume runs the batch loop until ctx is done, an error stops it, or
// failed (a monitor's) is closed.
func (l *Loader) consume(ctx context.Context, cl *kgo.Client, failed <-chan struct{}) error {
	// Two stages: a poller fetches and decodes the next batch while this
	// goroutine writes the current one to ClickHouse and commits it.
	batches := make(chan polled)
	permit := make(chan struct{}, 1)
	pctx, stopPoller := context.WithCancel(ctx)
	pollerDone := make(chan struct{})
	go func() { defer close(pollerDone); l.poller(pctx, cl, permit, batches) }()
	defer func() {
		stopPoller()
		<-pollerDone
	}()
	permit <- struct{}{}
	// The previous batch's tail (tail.go): its watermarks, duplicate-id
	// detection and offset commit, running beside this batch's conversion
	// and inserts. Batches are applied with tctx, which ends with consume:
	// a tail retrying against an unreachable ClickHouse cannot hold up a
	// Run returning another error (its batch, not committed, is replayed).
	var running *tail
	tctx, stopTails := context.WithCancel(ctx)
	defer func() {
		stopTails()
		l.settle(&running) //nolint:errcheck // stopping: the batch is replayed
	}()
	stop := func(err error) error {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	idle := time.NewTicker(250 * time.Millisecond)
	defer idle.Stop()
	for {
		var b polled
		select {
		case <-ctx.Done():
			return nil
		case <-failed:
			return nil // Run returns the monitor's error
		case <-idle.C:
			if err := l.idle(cl, &running); err != nil {
				return stop(err)
			}
			continue
		case b = <-batches:
		}
		handed := time.Now()
		if b.err != nil {
			return stop(b.err)
		}
		permit <- struct{}{} // fetch and decode the next batch meanwhile
		if err := l.applyBatch(tctx, cl, b, handed, &running); err != nil {
			return stop(err)
		}
	}
}

// idle runs while nothing is being applied: pauses take effect, and once
// the last batch is detected and committed, a pending rebalance may go
// ahead. A tail still running is waited for only when a rebalance waits:
// otherwise the next batch may start beside it.
func (l *Loader) idle(cl *kgo.Client, running **tail) error {
	l.applyPauses(cl)
	if *running != nil && !l.rebalanceWanted.Load() && !(*running).ended() {
		return nil
	}
	l.rebalanceWanted.Store(false)
	if err := l.settle(running); err != nil {
		return err
	}
	cl.AllowRebalance()
	return nil
}

// applyBatch applies b and starts its tail once the previous one ended:
// tails run in batch order, one at a time.
func (l *Loader) applyBatch(ctx context.Context, cl *kgo.Client, b polled, handed time.Time, running **tail) error {
	if cuts(b.decoded) {
		// A truncate reads the open anomalies: the previous batch's
		// detection must be stored first.
		if err := l.settle(running); err != nil {
			return err
		}
	}
	if l.forget.Swap(false) {
		l.versions.Forget()
		l.images.Forget()
	}
	l.endPauses(b.resumed)
	l.applyPauses(cl)
	bt, err := l.apply(ctx, cl, b.recs, b.decoded) // the tail it returns writes with ctx too
	l.cacheMetrics()
	if err != nil {
		return err
	}
	l.m.fresh.timeWatermarks(&bt, l.clockOf(&b, handed, bt.inserted)) // freshness.go
	// This batch's rows are in ClickHouse: its watermarks need nothing
	// more, so their write starts now, beside the previous tail
	// (tail.go). The rest of its tail (detection, then the commit)
	// starts once the previous one has ended: tails run in batch order,
	// one at a time.
	bt.watermarks = early(bt.watermarks)
	if err := l.settle(running); err != nil {
		return err
	}
	*running = l.startTail(ctx, cl, bt)
	if l.rebalanceWanted.Swap(false) {
		// A rebalance waits for us: let it go once everything applied is
		// committed, so no partition moves with applied but uncommitted
		// records. (The poller may already hold the next batch; if the
		// rebalance takes its partitions, applying it anyway is a replay —
		// every write is idempotent by source version.)
		if err := l.settle(running); err != nil {
			return err
		}
		cl.AllowRebalance()
	}
	return nil
}

// polled is one batch from the poller.
type polled struct {
	recs    []*kgo.Record
	decoded []decodeResult
	err     error
	// resumed are the paused tables the poller resumed before this batch's
	// first poll (paused.go).
	resumed []string
	polls   []pollMark // when its records were polled (freshness.go)
}

// poller fetches and decodes one batch per permit and hands it over.
func (l *Loader) poller(ctx context.Context, cl *kgo.Client, permit <-chan struct{}, out chan<- polled) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-permit:
		}
		// A poll woken for a resume (paused.go) returns no records: resume,
		// and poll again for the same batch.
		var resumed []string
		var f *fill
		var err error
		t0 := time.Now()
		for f == nil || err == nil && len(f.recs) == 0 {
			resumed = append(resumed, l.resumeAsked(cl)...)
			f, err = l.poll(ctx, cl)
		}
		t0 = l.m.since(stagePoll, t0)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			select {
			case out <- polled{err: err}:
			case <-ctx.Done():
			}
			return
		}
		b := polled{recs: f.recs, decoded: l.decodeAll(f.recs), resumed: resumed, polls: f.polls}
		l.m.since(stageDecode, t0)
		if !l.handOver(ctx, cl, f, &b, out) {
			return
		}
	}
}

// handOverTick is how often a batch waiting for the applier takes what
// arrived meanwhile. It does not delay the hand-over (the applier takes
// the batch the moment it is free), only how recent the batch is then,
// and wakes the poller at most 100 times a second while the applier works.
const handOverTick = 10 * time.Millisecond

// watermarkLinger is how long a batch of changes without a watermark
// record waits for one: a reader publishes its watermark right after Kafka
// acknowledged the commit (internal/reader), so the commit's changes and
// the watermark that makes them visible to read-your-writes are applied in
// one batch, not two.
const watermarkLinger = 50 * time.Millisecond

// handOver gives b, filled so far as f says, to the applier. While the
// applier is still busy with the previous batch, b takes in what arrives
// meanwhile (within the batch's bounds and BatchWait from its first
// record): under load a batch holds about an insert's time of records, so
// batching — and the cost per change — stays, while a loader with nothing
// to write hands a batch over as soon as nothing more is buffered and it
// holds a watermark record (or has waited watermarkLinger for one). It
// reports false when ctx ended first.
func (l *Loader) handOver(ctx context.Context, cl *kgo.Client, f *fill, b *polled, out chan<- polled) bool {
	tick := time.NewTicker(handOverTick)
	defer tick.Stop()
	defer func() { l.m.batchBytes.Observe(float64(f.size)) }()
	send := func() bool {
		select {
		case out <- *b:
			return true
		case <-ctx.Done():
			return false
		}
	}
	watermark := hasWatermark(b.decoded)
	for {
		if f.full(l.cfg.BatchRecords, l.cfg.BatchBytes) || time.Since(f.first) >= l.cfg.BatchWait {
			return send()
		}
		n := len(f.recs)
		var err error
		if watermark || time.Since(f.first) >= watermarkLinger {
			select {
			case out <- *b:
				return true
			case <-ctx.Done():
				return false
			case <-tick.C:
			}
			err = l.take(ctx, cl, f)
		} else {
			// Wait for the next fetch (the watermark, most likely), at
			// most until the linger ends.
			pctx, cancel := context.WithDeadline(ctx, f.first.Add(watermarkLinger))
			err = l.pollInto(ctx, pctx, cl, f)
			cancel()
			if err == nil {
				err = l.take(ctx, cl, f)
			}
		}
		if len(f.recs) > n {
			more := l.decodeAll(f.recs[n:])
			b.recs, b.polls = f.recs, f.polls
			b.decoded = append(b.decoded, more...)
			watermark = watermark || hasWatermark(more)
		}
		if err != nil {
			// The records taken so far are handed over as they are; the
			// error ends the poller with the next poll.
			return send()
		}
	}
}

// hasWatermark reports whether ds hold a watermark record.
func hasWatermark(ds []decodeResult) bool {
	for _, d := range ds {
		if d.err == nil && d.ev != nil && d.ev.Kind == envelope.KindWatermark {
			return true
		}
	}
	return false
}

// fill is a batch being gathered.
type fill struct {
	recs  []*kgo.Record
	size  int       // record bytes (keys and values)
	first time.Time // when its first record arrived
	polls []pollMark
}

func (f *fill) full(maxRecords, maxBytes int) bool {
	return len(f.recs) >= maxRecords || f.size >= maxBytes
}

// poll waits for a batch's first records, then takes what else the client
// has buffered, up to BatchRecords records or BatchBytes bytes. It does not
// wait for more: handOver grows the batch while the applier is busy.
//
// Records taken from the client cannot be given back (its position moves
// past them), so the byte bound is kept by asking for few records at a
// time: one first, then at most as many as the batch holds (doubling), and
// at most half of what still fits at the batch's mean record size — one at
// a time near the end. A batch therefore ends within about one record of
// BatchBytes unless its records grow much larger than its mean on the way;
// a single record larger than BatchBytes is a batch of its own.
func (l *Loader) poll(ctx context.Context, cl *kgo.Client) (*fill, error) {
	f := &fill{}
	for len(f.recs) == 0 {
		pctx, cancel := context.WithCancel(ctx)
		if !l.resume.arm(cancel) {
			cancel()
			return f, nil // a resume waits: the caller does it first
		}
		err := l.pollInto(ctx, pctx, cl, f)
		l.resume.disarm()
		cancel()
		if err != nil {
			return f, err
		}
		if ctx.Err() != nil {
			return f, ctx.Err() //nolint:wrapcheck // stopping
		}
	}
	f.first = time.Now()
	return f, l.take(ctx, cl, f)
}

// take adds to f what the client has buffered, without waiting, until
// nothing is left or f is full.
func (l *Loader) take(ctx context.Context, cl *kgo.Client, f *fill) error {
	for !f.full(l.cfg.BatchRecords, l.cfg.BatchBytes) {
		n := len(f.recs)
		// A nil context polls only what is buffered (franz-go's PollRecords).
		if err := l.pollInto(ctx, nil, cl, f); err != nil { //nolint:staticcheck // see above
			return err
		}
		if len(f.recs) == n {
			return nil
		}
	}
	return nil
}

// pollInto polls once with pctx (nil: only what is buffered) and appends
// the records to f.
func (l *Loader) pollInto(ctx, pctx context.Context, cl *kgo.Client, f *fill) error {
	fs := cl.PollRecords(pctx, pollCount(len(f.recs), f.size, l.cfg.BatchRecords, l.cfg.BatchBytes))
	if fs.IsClientClosed() {
		return errors.New("kafka client closed")
	}
	fs.EachError(func(t string, p int32, err error) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return
		}
		// Fetch errors are retried by franz-go; operators see them here
		// and as consumer lag.
		l.log.Warn("fetch error", slog.String("topic", t), slog.Int("partition", int(p)), slog.Any("err", err))
	})
	n := len(f.recs)
	fs.EachRecord(func(r *kgo.Record) {
		f.recs = append(f.recs, r)
		f.size += len(r.Key) + len(r.Value)
	})
	f.markPoll(n) // freshness.go
	return ctx.Err()
}

// pollCount is how many records to ask for next, with n records of size
// bytes in the batch and the batch's bounds: one first; then no more than
// the batch holds, than the records left, or than half of the bytes left
// at the batch's mean record size; at least one.
func pollCount(n, size, maxRecords, maxBytes int) int {
	if n == 0 {
		return 1
	}
	fit := (maxBytes - size) / max(1, size/n) / 2
	return max(1, min(n, maxRecords-n, fit))
}

// logCapabilities says which optional server features exist. None is used
// yet: insert deduplication tokens need Replicated tables, and the loader's
// are ReplacingMergeTree (exactness comes from source versions either way).
// A failed detection only loses the log line.
func (l *Loader) logCapabilities(ctx context.Context) {
	caps, err := l.store.DetectCapabilities(ctx)
	if err != nil {
		l.log.Warn("clickhouse capabilities not detected", slog.Any("err", err))
		return
	}
	l.log.Info("clickhouse capabilities", slog.String("version", caps.Version),
		slog.Bool("insert_deduplication_token", caps.InsertDeduplicationToken),
		slog.Bool("insert_deduplication_token_used", caps.UseInsertDeduplicationToken(false)))
}
