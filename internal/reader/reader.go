// Package reader is Tributary's per-shard CDC reader: it manages the
// shard's publication and logical slot, copies the configured tables once
// (chunked, parallel and resumable; snapshot.go says why a copy that is not
// one consistent snapshot is exact), then streams pgoutput changes into
// Kafka as change envelopes keyed by global id.
//
// The no-loss rule: the slot is confirmed only up to the end of the newest
// transaction whose records, and those of every earlier transaction, Kafka
// has acknowledged (acks=all, idempotent producer). See tracker.go. A crash
// at any point replays from the slot's confirmed position; the loader
// removes the duplicates.
//
// Goroutines: Run's goroutine owns the replication connection (receive,
// decode, produce, standby status); the watermark goroutine only produces,
// woken by the tracker when Kafka acknowledged a commit (watermarks);
// the monitor goroutine owns the SQL connection (heartbeats, slot
// statistics). Produce promises run on franz-go's goroutines and touch
// only the tracker and metrics.
//
// Large transactions: the reader uses pgoutput protocol 1 without
// streaming, so PostgreSQL spills a large transaction to disk
// (logical_decoding_work_mem) and sends it after commit; the reader hands
// each change to the producer as it arrives, and the producer's bounded
// buffer blocks reading when Kafka is behind. Memory is therefore bounded
// for any transaction size. Why not protocol 2 streaming: docs/design/reader.md, "Large
// transactions" (measured).
//
// Metrics (private registry, const label shard, prefix tributary_reader_):
// changes_total{table,op}, wal_bytes_total, records_produced_total{topic},
// produce_seconds, commit_ack_seconds (commit on the shard to Kafka's
// acknowledgement of the transaction and every one before it: when its
// watermark may go out), errors_total{kind}, lag_bytes, lag_seconds,
// confirmed_lsn, slot_retained_wal_bytes, slot_wal_status{status},
// snapshot_rows_total{table}, snapshot_chunks_total{table},
// snapshot_estimated_rows{table}, snapshot_progress_ratio{table},
// snapshot_resumes_total, heartbeats_total, watermarks_total,
// resnapshots_total{result}, resnapshot_active{table} (a resnapshot's rows
// and estimate are in the snapshot_* series of its table),
// resnapshot_sweep_pending{table} (copied, its sweep not done),
// unrouted_changes_total{relation} (published relations no configured
// table names, e.g. a table renamed at the source: skipped, and logged once),
// up (1 while copying or streaming), restarts_total (failed runs retried by
// Supervise: a process serving many shards, supervise.go),
// kafka_retries_total (transient Kafka answers retried while reading the
// state topic at start-up, e.g. a partition unknown to a broker just
// restarted: state.go).
package reader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/tributary/tributary/internal/decode"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/kafkaconn"
	"github.com/tributary/tributary/internal/pgdsn"
	"github.com/tributary/tributary/internal/progress"
	"github.com/tributary/tributary/internal/rowkey"
	"github.com/tributary/tributary/internal/tables"
)

// DefaultWatermarkMinGap is the default Config.WatermarkMinGap: at most 40
// watermark rounds per second from a busy shard, and a commit waits at most
// this long for its round.
const DefaultWatermarkMinGap = 25 * time.Millisecond

// Config is what a Reader needs.
type Config struct {
	Shard       int
	DSN         string // a normal connection; replication=database is added
	Slot        string
	Publication string
	Tables      *tables.Config
	Brokers     []string
	// KafkaSecurity is the TLS and SASL of every connection to Brokers
	// (the zero value: plaintext, no authentication).
	KafkaSecurity kafkaconn.Security
	Partitions    int32
	// ReplicationFactor is the replica count of the topics the reader
	// creates (table topics and the state topic); 0 leaves it to the
	// cluster's default.replication.factor, which is how a cluster of any
	// size gets its own. min.insync.replicas is the cluster's too: with
	// acks=all, a record is acknowledged once that many replicas hold it.
	ReplicationFactor int16
	// StatusInterval is how often the confirmed position is reported to
	// the server even when it did not ask.
	StatusInterval time.Duration
	// WatermarkInterval is how often the reader state is saved and an
	// unchanged watermark is considered for publishing again (after ten
	// intervals). Watermarks of new positions do not wait for it.
	WatermarkInterval time.Duration
	// WatermarkMinGap is the least time between two watermark rounds: a
	// position acknowledged sooner after the last round is published when
	// the gap has passed (0: every advance at once). It bounds a busy
	// shard's watermark records to partitions/WatermarkMinGap per second;
	// the first advance after a quiet spell is published at once.
	WatermarkMinGap time.Duration
	// HeartbeatInterval is how often a heartbeat message is written to the
	// shard's WAL so that an idle database still advances the slot (0: off).
	HeartbeatInterval time.Duration
	MaxBuffered       int
	// MaxBufferedBytes bounds the producer's buffer in bytes (default 32 MiB).
	MaxBufferedBytes int
	// KafkaLinger is how long a record waits for others to share its
	// produce request (default DefaultKafkaLinger).
	KafkaLinger time.Duration
	// StateTopic is the compacted topic where the reader stores its state
	// (snapshot progress or done, last confirmed position), keyed by the
	// shard's identity (state.go: system identifier, database, slot).
	StateTopic string
	// SnapshotWorkers is how many chunks are copied at once (default 2),
	// each on its own connection.
	SnapshotWorkers int
	// SnapshotChunkRows is the rows per chunk (default 10000): the unit of
	// progress, and what a restart copies again at most per worker.
	SnapshotChunkRows int
	// SnapshotRangesPerTable bounds how many key ranges a large table is
	// cut into so that several workers copy it (default 4 per worker, at
	// most 64).
	SnapshotRangesPerTable int
	// SnapshotMaxRowsPerSecond limits the copy's read rate (0: unlimited).
	SnapshotMaxRowsPerSecond int
	// SnapshotProgressInterval is how often progress is logged (default 10s).
	SnapshotProgressInterval time.Duration
	// ShowProgress, when set, gets the copy's progress every second while
	// the initial snapshot or a resnapshot copies, keyed by what copies,
	// and once more with final set when the copy stops (cdc-reader: a bar
	// on a terminal, progress.Terminal).
	ShowProgress func(key string, s progress.Status, final bool)
	// SweepStore, when set, opens the loaders' ClickHouse database for a
	// resnapshot's sweep (sweep.go), read only; each attempt opens one and
	// closes it. Without it, resnapshots with a predicate are refused.
	SweepStore func(ctx context.Context) (SweepStore, error)
	// SweepBatch is how many candidates one question of a sweep to the
	// shard covers (0: SweepBatch).
	SweepBatch int
}

// Reader streams one shard.
type Reader struct {
	cfg      Config
	log      *slog.Logger
	m        *metrics
	tracker  *tracker
	producer *kgo.Client
	marks    *kgo.Client // the watermarks' producer (newWatermarkProducer)
	parts    map[string]int32

	// Owned by the replication goroutine.
	parser   decode.Parser
	enc      envelope.Encoder
	lastSize int // size of the last record: the next buffer's capacity
	rels     *decode.Relations
	// missing are, by relation id, the missing values the last Relation
	// of each configured table got (convert.go).
	missing map[uint32]map[string]string
	state   *stateStore
	// reported is the last position the server acknowledged receiving in
	// a standby status update; written by the stream goroutine, read by the
	// watermark goroutine when it stores the reader state.
	reported atomic.Uint64
	cur      *txnState
	begin    decode.Begin // copy: the parser reuses its storage
	seq      uint32
	walEnd   envelope.LSN
	lastMsg  time.Time
	// snapCP and snapEnd are the slot's consistent point and where the
	// snapshot's copy ended (no watermark below it), carried in every
	// state saved. Set before the streaming goroutines start.
	snapCP, snapEnd envelope.LSN
	// epoch is the snapshot epoch stamped on every record (see
	// envelope.Event.Epoch). Set before anything is produced.
	epoch uint16
	// warnedUnrouted: relations already reported as not configured.
	warnedUnrouted map[string]bool
	// pendingParts are the current transaction's partitions gone or
	// attached, produced at its commit; truncated are the tables truncated
	// whole with no change since in this transaction (leaf.go).
	pendingParts []pendingPartition
	truncated    map[string]bool

	// resnap is the resnapshot bookkeeping (resnapshot.go); saveMu
	// serialises state saves and guards state.epoch once streaming.
	resnap resnapshots
	saveMu sync.Mutex
}

// DefaultMaxBuffered is the default bound on records buffered for Kafka
// (cdc-reader --max-buffered).
const DefaultMaxBuffered = 100000

// New builds a Reader; nothing connects until Run.
func New(cfg Config, log *slog.Logger, reg prometheus.Registerer) *Reader {
	cfg = cfg.withDefaults()
	return newReader(cfg, log, newMetrics(reg, strconv.Itoa(cfg.Shard)))
}

// withDefaults fills the settings left at zero with their defaults.
func (cfg Config) withDefaults() Config {
	if cfg.StateTopic == "" {
		cfg.StateTopic = "tributary.reader-state"
	}
	if cfg.MaxBuffered <= 0 {
		cfg.MaxBuffered = DefaultMaxBuffered
	}
	if cfg.MaxBufferedBytes <= 0 {
		cfg.MaxBufferedBytes = 32 << 20
	}
	if cfg.KafkaLinger <= 0 {
		cfg.KafkaLinger = DefaultKafkaLinger
	}
	if cfg.SnapshotWorkers <= 0 {
		cfg.SnapshotWorkers = 2
	}
	if cfg.SnapshotChunkRows <= 0 {
		cfg.SnapshotChunkRows = 10000
	}
	if cfg.SnapshotRangesPerTable <= 0 {
		cfg.SnapshotRangesPerTable = min(4*cfg.SnapshotWorkers, 64)
	}
	if cfg.SnapshotProgressInterval <= 0 {
		cfg.SnapshotProgressInterval = 10 * time.Second
	}
	return cfg
}

// newReader builds a Reader on metrics registered already: Supervise
// builds one per run of a shard, all on the shard's metrics.
func newReader(cfg Config, log *slog.Logger, m *metrics) *Reader {
	r := &Reader{cfg: cfg, log: log.With(slog.Int("shard", cfg.Shard)), m: m}
	r.resnap.wake, r.resnap.cancel, r.resnap.started = make(chan struct{}, 1), map[string]context.CancelFunc{}, map[string]bool{}
	return r
}

// Run prepares the slot, takes the initial snapshot if the slot is new (or
// continues an unfinished one), and streams until ctx is done. On return
// the producer is flushed and the final position reported to the server.
func (r *Reader) Run(ctx context.Context) error {
	// pgx's own parse error may show part of the DSN's password.
	if err := pgdsn.Check(r.cfg.DSN); err != nil {
		return fmt.Errorf("shard %d: %w", r.cfg.Shard, err)
	}
	kafkaOpts, err := r.openProducer(ctx)
	if err != nil {
		return err
	}
	defer r.producer.Close()
	defer r.marks.Close()
	sqlConn, err := pgx.Connect(ctx, r.cfg.DSN)
	if err != nil {
		return fmt.Errorf("connect shard %d: %w", r.cfg.Shard, err)
	}
	defer sqlConn.Close(context.WithoutCancel(ctx))
	if err := r.prepareShard(ctx, sqlConn); err != nil {
		return err
	}
	repl, err := r.connectReplication(ctx)
	if err != nil {
		return err
	}
	defer repl.Close(context.WithoutCancel(ctx))
	plan, err := r.planStart(ctx, repl, sqlConn, kafkaOpts)
	if err != nil {
		return err
	}
	// Connected and checked: from here the shard copies or streams.
	r.m.up.Set(1)
	defer r.m.up.Set(0)
	start, stopped, err := r.startFrom(ctx, repl, sqlConn, plan)
	if err != nil || stopped {
		return err
	}
	return r.streamFrom(ctx, repl, sqlConn, start)
}

// openProducer builds the Kafka producers (r.producer, r.marks) and checks
// that the first can reach and authenticate to the brokers (the second has
// the same options): a wrong password or an untrusted certificate stops the
// reader here, saying which, before the shard is touched (publication,
// slot). It returns the client options
// every other Kafka client of the reader uses.
func (r *Reader) openProducer(ctx context.Context) ([]kgo.Opt, error) {
	kafkaOpts, err := r.cfg.KafkaSecurity.ClientOpts()
	if err != nil {
		return nil, err
	}
	r.producer, err = newProducer(r.cfg.Brokers, kafkaOpts, r.cfg.KafkaLinger, r.cfg.MaxBuffered, r.cfg.MaxBufferedBytes)
	if err != nil {
		return nil, err
	}
	if err := kafkaconn.Check(ctx, r.producer, r.cfg.Brokers, r.cfg.KafkaSecurity); err != nil {
		r.producer.Close()
		return nil, err
	}
	if r.marks, err = newWatermarkProducer(r.cfg.Brokers, kafkaOpts); err != nil {
		r.producer.Close()
		return nil, err
	}
	return kafkaOpts, nil
}

// prepareShard checks the configured tables on the shard (identity,
// partitions), ensures the publication and the tables' topics.
func (r *Reader) prepareShard(ctx context.Context, sqlConn *pgx.Conn) error {
	if err := checkTables(ctx, sqlConn, r.cfg.Tables); err != nil {
		return err
	}
	roots, err := checkPartitions(ctx, sqlConn, r.cfg.Tables)
	if err != nil {
		return err
	}
	for i := range roots {
		t := r.cfg.Tables.Tables[i]
		if err := checkLeafIdentity(ctx, sqlConn, t); err != nil {
			return err
		}
		if err := checkPartitionKeys(ctx, sqlConn, t); err != nil {
			return err
		}
		if err := checkPartitionHelpers(ctx, sqlConn, t.Schema, t.Name); err != nil {
			return err
		}
	}
	if err := ensurePublication(ctx, sqlConn, r.cfg.Publication, r.cfg.Tables, len(roots) > 0, r.log); err != nil {
		return err
	}
	r.parts, err = ensureTopics(ctx, r.producer, r.cfg.Tables.Topics(), r.cfg.Partitions, r.cfg.ReplicationFactor)
	return err
}

// connectReplication opens the shard's replication connection.
func (r *Reader) connectReplication(ctx context.Context) (*pgconn.PgConn, error) {
	replCfg, err := pgconn.ParseConfig(r.cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("parse DSN: %w", err)
	}
	replCfg.RuntimeParams["replication"] = "database"
	repl, err := pgconn.ConnectConfig(ctx, replCfg)
	if err != nil {
		return nil, fmt.Errorf("replication connection to shard %d: %w", r.cfg.Shard, err)
	}
	return repl, nil
}

// startPlan is how a run starts: the slot as found, the state stored for
// the shard, and what to do (decideStart) and why.
type startPlan struct {
	slot   slotInfo
	stored *readerState
	action startAction
	why    string
}

// planStart reads the shard's identity, its stored state (migrating a
// state keyed the old way) and slot, decides how to start, and chooses the
// snapshot epoch (r.epoch).
func (r *Reader) planStart(ctx context.Context, repl *pgconn.PgConn, sqlConn *pgx.Conn, kafkaOpts []kgo.Opt) (startPlan, error) {
	sys, err := pglogrepl.IdentifySystem(ctx, repl)
	if err != nil {
		return startPlan{}, fmt.Errorf("identify system of shard %d: %w", r.cfg.Shard, err)
	}
	id := shardIdentity{SystemID: sys.SystemID, Database: sys.DBName, Slot: r.cfg.Slot}
	r.state = &stateStore{cl: r.producer, topic: r.cfg.StateTopic, id: id, timeline: uint32(sys.Timeline), retried: r.stateRetried}
	if err := ensureStateTopic(ctx, r.producer, r.cfg.StateTopic, r.cfg.ReplicationFactor); err != nil {
		return startPlan{}, err
	}
	states, err := r.state.load(ctx, r.cfg.Brokers, kafkaOpts)
	if err != nil {
		return startPlan{}, err
	}
	slot, err := readSlot(ctx, sqlConn, r.cfg.Slot)
	if err != nil {
		return startPlan{}, err
	}
	stored, migrate, err := pickState(states, id, r.cfg.Shard, slot.exists)
	if err != nil {
		return startPlan{}, fmt.Errorf("shard %d, state topic %s: %w", r.cfg.Shard, r.cfg.StateTopic, err)
	}
	if migrate {
		if err := r.state.migrate(ctx, *stored); err != nil {
			return startPlan{}, err
		}
		r.log.Info("reader state migrated: keyed by the shard's identity, no longer by slot name alone",
			slog.String("state_topic", r.cfg.StateTopic), slog.String("key", id.key()))
	}
	slot.timeline = r.state.timeline
	if slot.exists && slot.plugin != "pgoutput" {
		return startPlan{}, fmt.Errorf("slot %s exists with plugin %q, not pgoutput: choose another --slot", r.cfg.Slot, slot.plugin)
	}
	plan := startPlan{slot: slot, stored: stored}
	plan.action, plan.why = decideStart(slot, stored)
	return plan, r.pickEpoch(ctx, sqlConn, plan)
}

// stateRetried counts and logs a transient Kafka answer while reading the
// state topic (stateStore.endOffsets), before its retry.
func (r *Reader) stateRetried(err error, wait time.Duration) {
	r.m.kafkaRetries.Inc()
	r.log.Warn("state topic: Kafka cannot answer for a partition yet (a broker restarting?); retrying",
		slog.String("state_topic", r.cfg.StateTopic), slog.Any("err", err), slog.Duration("retry_in", wait))
}

// pickEpoch chooses the run's snapshot epoch (r.epoch) from the stored
// state and the one the publication records, and records it there.
func (r *Reader) pickEpoch(ctx context.Context, sqlConn *pgx.Conn, plan startPlan) error {
	mark, err := readEpochMark(ctx, sqlConn, r.cfg.Publication)
	if err != nil {
		return err
	}
	var raised bool
	if r.epoch, raised, err = chooseEpoch(plan.action, plan.stored, mark); err != nil {
		return err
	}
	if raised {
		r.log.Warn("start: the publication records a newer snapshot epoch than the reader's state (the state was lost or is older): copying in the next epoch after it, so the copy beats older rows",
			slog.Int("recorded_epoch", int(mark.epoch)), slog.Int("epoch", int(r.epoch)))
	}
	recordEpoch(ctx, sqlConn, r.cfg.Publication, r.epoch, mark, r.log)
	r.state.epoch = r.epoch
	return nil
}

// startFrom carries out plan: resumes the slot, continues the snapshot,
// or (re)creates the slot and copies. It returns where streaming starts,
// or stopped when shutdown ended the snapshot (its progress is stored).
func (r *Reader) startFrom(ctx context.Context, repl *pgconn.PgConn, sqlConn *pgx.Conn, plan startPlan) (start envelope.LSN, stopped bool, err error) {
	stored, action, why := plan.stored, plan.action, plan.why
	switch action {
	case actionResume:
		r.log.Info("start: resume", slog.String("slot", r.cfg.Slot), slog.String("why", why))
		start = plan.slot.confirmed
		r.tracker = r.newTracker(start)
		r.snapCP, r.snapEnd = stored.ConsistentPoint, stored.SnapshotEnd
		r.resnap.active, r.resnap.ended = resnapshotsOf(stored)
		for _, a := range r.resnap.active {
			r.log.Info("start: a resnapshot is unfinished; continuing it", slog.String("id", a.ID), slog.String("table", a.Table),
				slog.String("phase", a.Phase), slog.Int64("rows", a.Rows()))
			r.resnap.signal()
		}
	case actionResumeSnapshot:
		r.log.Info("start: resume snapshot", slog.String("slot", r.cfg.Slot), slog.String("why", why),
			slog.String("consistent_point", stored.ConsistentPoint.String()))
		r.m.snapshotResumes.Inc()
		start = stored.ConsistentPoint
		r.tracker = r.newTracker(start)
		if err := r.copySnapshot(ctx, sqlConn, stored); err != nil {
			err = r.snapshotStopped(ctx, fmt.Errorf("initial snapshot (resumed): %w", err))
			return 0, err == nil, err
		}
	case actionRecreate:
		// The new copy is a new epoch: its rows beat every row written
		// before, and its snapshot-end records delete the rows it no longer
		// contains (deleted at the source while changes were lost).
		r.log.Warn("start: dropping the slot and taking a new snapshot", slog.String("slot", r.cfg.Slot), slog.String("why", why),
			slog.Int("epoch", int(r.epoch)))
		if _, err := sqlConn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", r.cfg.Slot); err != nil {
			return 0, false, fmt.Errorf("drop slot %s (is another reader using it?): %w", r.cfg.Slot, err)
		}
		fallthrough
	case actionCreate:
		if action == actionCreate {
			r.log.Info("start: create slot and snapshot", slog.String("slot", r.cfg.Slot), slog.String("why", why))
		}
		if start, err = r.createAndSnapshot(ctx, repl, sqlConn); err != nil {
			err = r.snapshotStopped(ctx, err)
			return 0, err == nil, err
		}
	}
	return start, false, nil
}

// streamFrom starts replication at start and runs the streaming
// goroutines (stream, watermarks, monitor, resnapshots) until ctx ends or
// one fails; then it flushes what was produced and reports the final
// position. A shutdown (ctx cancelled) is a nil error.
func (r *Reader) streamFrom(ctx context.Context, repl *pgconn.PgConn, sqlConn *pgx.Conn, start envelope.LSN) error {
	err := pglogrepl.StartReplication(ctx, repl, r.cfg.Slot, pglogrepl.LSN(start), pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + r.cfg.Publication + "'", "messages 'true'"},
	})
	if err != nil {
		return fmt.Errorf("start replication on slot %s: %w", r.cfg.Slot, err)
	}
	r.log.Info("streaming", slog.String("slot", r.cfg.Slot), slog.String("from", start.String()))
	r.reported.Store(uint64(start))

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return r.stream(gctx, repl) })
	g.Go(func() error { return r.watermarks(gctx) })
	g.Go(func() error { return r.monitor(gctx, sqlConn) })
	g.Go(func() error { return r.runResnapshots(gctx) })
	err = g.Wait()

	// Shutdown: flush what was produced, report the final position.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if ferr := r.producer.Flush(fctx); ferr != nil {
		r.log.Warn("flush on shutdown", slog.Any("err", ferr))
	}
	r.sendStatus(fctx, repl) //nolint:errcheck // best effort; the slot keeps its last position
	pos, _, _ := r.tracker.position()
	r.log.Info("final position reported", slog.String("confirmed", pos.String()))
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil
	}
	return err
}

// snapshotStopped turns a snapshot ended by shutdown into a clean stop
// (its progress is stored; the next start continues it).
func (r *Reader) snapshotStopped(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		r.log.Info("stopped during the initial snapshot; the next start continues it", slog.String("slot", r.cfg.Slot))
		return nil
	}
	return err
}

// sendStatus reports the confirmed position. It is never zero: the tracker
// starts at the slot's consistent or confirmed point.
func (r *Reader) sendStatus(ctx context.Context, repl *pgconn.PgConn) error {
	// The position is safe to confirm even after a produce failure: the
	// tracker stops advancing at the first failure.
	pos, last, perr := r.tracker.position()
	err := pglogrepl.SendStandbyStatusUpdate(ctx, repl, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pglogrepl.LSN(pos), WALFlushPosition: pglogrepl.LSN(pos), WALApplyPosition: pglogrepl.LSN(pos),
	})
	if err != nil {
		return fmt.Errorf("standby status: %w", err)
	}
	r.reported.Store(uint64(pos))
	r.m.confirmedLSN.Set(float64(pos))
	if r.walEnd > pos {
		r.m.lagBytes.Set(float64(r.walEnd - pos))
	} else {
		r.m.lagBytes.Set(0)
	}
	if last.unix > 0 {
		r.m.lagSeconds.Set(time.Since(time.UnixMicro(last.unix)).Seconds())
	}
	if perr != nil {
		return fmt.Errorf("produce failed; not confirming past %s: %w", pos, perr)
	}
	return nil
}

// stream receives, decodes and produces until ctx ends.
func (r *Reader) stream(ctx context.Context, repl *pgconn.PgConn) error {
	r.rels = decode.NewRelations(r.typeLookup)
	next := time.Now().Add(r.cfg.StatusInterval)
	var deadline time.Time
	stop := context.AfterFunc(ctx, func() { repl.Conn().SetReadDeadline(time.Now()) }) //nolint:errcheck
	defer stop()
	defer repl.Conn().SetReadDeadline(time.Time{}) //nolint:errcheck // restore for the final status update
	for {
		if time.Now().After(next) {
			if err := r.sendStatus(ctx, repl); err != nil {
				return err
			}
			next = time.Now().Add(r.cfg.StatusInterval)
		}
		// A socket read deadline, set once per status interval, instead of
		// a context per message: pgconn registers a watcher for every
		// cancellable context, which cost ~15% of the reader's CPU. A
		// timeout does not close the connection; cancellation still wakes
		// a blocked read through the AfterFunc above.
		if !next.Equal(deadline) {
			repl.Conn().SetReadDeadline(next) //nolint:errcheck // a closed conn fails the read below
			deadline = next
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		raw, err := repl.ReceiveMessage(context.Background())
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if pgconn.Timeout(err) {
				continue
			}
			r.m.errors.WithLabelValues("replication").Inc()
			return fmt.Errorf("receive: %w", err)
		}
		switch msg := raw.(type) {
		case *pgproto3.ErrorResponse:
			r.m.errors.WithLabelValues("replication").Inc()
			return fmt.Errorf("replication error from server: %w", pgconn.ErrorResponseToPgError(msg))
		case *pgproto3.CopyData:
			reply, err := r.copyData(ctx, msg.Data)
			if err != nil {
				return err
			}
			if reply {
				next = time.Time{}
			}
		case *pgproto3.CommandComplete, *pgproto3.CopyDone:
			// The server ended the stream (shutdown, slot dropped, or
			// pg_terminate_backend): resume from the slot after a restart.
			r.m.errors.WithLabelValues("replication").Inc()
			return errors.New("replication: the server ended the stream (shutting down or terminated); restart resumes from the slot")
		default:
			return fmt.Errorf("replication: unexpected backend message %T", raw)
		}
	}
}

// copyData handles one CopyData message of the replication stream: a
// keepalive (reply says the server asked for a status update now) or WAL
// data.
func (r *Reader) copyData(ctx context.Context, data []byte) (reply bool, err error) {
	if len(data) == 0 {
		return false, errors.New("replication: empty CopyData")
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return false, fmt.Errorf("keepalive: %w", err)
		}
		r.walEnd = max(r.walEnd, envelope.LSN(ka.ServerWALEnd))
		if r.cur == nil {
			r.tracker.idle(envelope.LSN(ka.ServerWALEnd), ka.ServerTime)
		}
		return ka.ReplyRequested, nil
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return false, fmt.Errorf("xlogdata: %w", err)
		}
		r.m.bytes.Add(float64(len(xld.WALData)))
		return false, r.handle(ctx, envelope.LSN(xld.WALStart), xld.WALData)
	default:
		return false, fmt.Errorf("replication: unknown CopyData type %q", data[0])
	}
}

// handle processes one pgoutput message at WAL position at.
func (r *Reader) handle(ctx context.Context, at envelope.LSN, data []byte) error {
	msg, err := r.parser.Parse(data)
	if err != nil {
		r.m.errors.WithLabelValues("decode").Inc()
		return fmt.Errorf("decode at %s: %w", at, err)
	}
	switch m := msg.(type) {
	case *decode.Begin:
		if r.cur != nil {
			return fmt.Errorf("begin at %s inside an open transaction", at)
		}
		r.cur, r.begin, r.seq = r.tracker.begin(), *m, 0
	case *decode.Commit:
		if r.cur == nil {
			return fmt.Errorf("commit at %s without begin", at)
		}
		if err := r.flushPartitions(ctx); err != nil {
			return err
		}
		r.tracker.seal(r.cur, m.EndLSN, m.CommitTime.UnixMicro())
		r.cur = nil
	case *decode.Relation:
		if err := r.missingValues(r.rels.Put(m)); err != nil {
			r.m.errors.WithLabelValues("catalog").Inc()
			return fmt.Errorf("relation at %s: %w", at, err)
		}
	case *decode.Type:
		r.rels.PutType(m)
	case *decode.Origin:
		// Changes replayed from another node are this shard's all the same.
	case *decode.LogicalMessage:
		if m.Transactional && m.Prefix == partitionPrefix && r.cur != nil {
			return r.partitionMessage(at, m)
		}
		if m.Transactional && m.Prefix == ResnapshotRequestPrefix {
			return r.resnapshotRequested(ctx, at, m.Content)
		}
		if !m.Transactional && m.Prefix == resnapshotSwitchPrefix && r.cur == nil {
			if err := r.resnapshotSwitch(ctx, at, m.Content); err != nil {
				return err
			}
		}
		// Heartbeats (ours or anyone's): nothing to produce. Outside a
		// transaction, everything committed before this message has been
		// received: an idle shard's watermark advances to here, now.
		if !m.Transactional && r.cur == nil {
			r.tracker.idle(at, time.Now())
		}
	case *decode.Insert, *decode.Update, *decode.Delete:
		return r.change(ctx, at, msg)
	case *decode.Truncate:
		return r.truncate(ctx, at, m)
	default:
		// A message type the parser learnt and the reader did not.
		return fmt.Errorf("unexpected %s message at %s: the reader does not handle it", msg.Type(), at)
	}
	return nil
}

func (r *Reader) change(ctx context.Context, at envelope.LSN, msg decode.Message) error {
	if r.cur == nil {
		return fmt.Errorf("%s at %s outside a transaction", msg.Type(), at)
	}
	ev, t, err := r.toEvent(msg)
	if err != nil {
		r.m.errors.WithLabelValues("decode").Inc()
		return fmt.Errorf("at %s: %w", at, err)
	}
	if t == nil {
		// A published relation no configured table names: the
		// publication may hold more tables, or a configured one was
		// renamed. Counted, and said once per relation.
		if rel, ok := r.rels.Get(relationID(msg)); ok {
			name := rel.Schema + "." + rel.Name
			r.m.unrouted.WithLabelValues(name).Inc()
			if !r.warnedUnrouted[name] {
				if r.warnedUnrouted == nil {
					r.warnedUnrouted = map[string]bool{}
				}
				r.warnedUnrouted[name] = true
				r.log.Warn("changes of a published relation that no configured table names are skipped (renamed at the source? name it in the table config)",
					slog.String("relation", name))
			}
		}
		return nil
	}
	delete(r.truncated, t.Name) // leaf.go: a later partition truncate is not redundant
	ev.Kind, ev.Shard = envelope.KindChange, r.cfg.Shard
	ev.LSN, ev.CommitLSN = at, r.begin.FinalLSN
	ev.XID, ev.CommitTime = r.begin.XID, r.begin.CommitTime.UTC()
	// An update that changes the key (any of its columns) is, downstream,
	// the end of one row and the start of another: the old key gets a
	// delete of its own, keyed by the old key text so that it reaches the
	// old row's partition.
	if ev.Op == envelope.OpUpdate && ev.Before != nil {
		if old, ok := rowkey.Of(t.Key(), ev.Before); ok && old != ev.ID {
			del := *ev
			del.Op, del.ID, del.After, del.Unchanged, del.Seq = envelope.OpDelete, old, nil, nil, r.seq
			r.seq++
			r.m.changes.WithLabelValues(t.Name, string(envelope.OpDelete)).Inc()
			if err := r.produce(ctx, r.cur, t.Topic, &del); err != nil {
				return err
			}
			ev.Op = envelope.OpInsert
			ev.Before = nil
		}
	}
	ev.Seq = r.seq
	r.seq++
	r.m.changes.WithLabelValues(t.Name, string(ev.Op)).Inc()
	return r.produce(ctx, r.cur, t.Topic, ev)
}

func (r *Reader) truncate(ctx context.Context, at envelope.LSN, m *decode.Truncate) error {
	if r.cur == nil {
		return fmt.Errorf("truncate at %s outside a transaction", at)
	}
	for _, id := range m.RelationIDs {
		rel, ok := r.rels.Get(id)
		if !ok {
			return fmt.Errorf("truncate at %s of unknown relation %d", at, id)
		}
		t, ok := r.cfg.Tables.BySource(rel.Namespace, rel.Name)
		if !ok {
			continue
		}
		r.m.changes.WithLabelValues(t.Name, string(envelope.OpTruncate)).Inc()
		if r.truncated == nil {
			r.truncated = map[string]bool{}
		}
		r.truncated[t.Name] = true
		r.resnapshotTruncated(t.Name)
		// A truncate concerns rows in every partition: one record each,
		// so each partition's loader sees it in order with its rows.
		for p := int32(0); p < r.parts[t.Topic]; p++ {
			ev := &envelope.Event{
				Kind: envelope.KindChange, Shard: r.cfg.Shard, Schema: t.Schema, Table: t.Name, Op: envelope.OpTruncate,
				LSN: at, CommitLSN: r.begin.FinalLSN, Seq: r.seq, XID: r.begin.XID, CommitTime: r.begin.CommitTime.UTC(),
				Partitions: r.parts[t.Topic],
			}
			if err := r.produceTo(ctx, r.producer, r.cur, t.Topic, p, ev); err != nil {
				return err
			}
		}
		r.seq++
	}
	return nil
}

// produce hands one keyed envelope to the producer. It blocks when the
// producer's buffer is full (backpressure).
func (r *Reader) produce(ctx context.Context, st *txnState, topic string, ev *envelope.Event) error {
	return r.produceTo(ctx, r.producer, st, topic, -1, ev)
}

// produceTo produces through cl, to partition when >= 0, else by key.
//
// It runs on the stream goroutine only: r.enc is not safe for concurrent
// use (the snapshot's workers have encoders of their own).
func (r *Reader) produceTo(ctx context.Context, cl *kgo.Client, st *txnState, topic string, partition int32, ev *envelope.Event) error {
	// The reflection-free encoder: about 8x cheaper than json.Marshal here,
	// the reader's largest cost (docs/benchmarks.md).
	ev.Epoch = r.epoch
	b := r.enc.Append(make([]byte, 0, r.lastSize+64), ev)
	r.lastSize = len(b)
	rec := &kgo.Record{Topic: topic, Value: b}
	if partition >= 0 {
		rec.Partition = partition
	} else {
		rec.Key = []byte(ev.ID)
	}
	r.tracker.add(st)
	start := time.Now()
	cl.Produce(ctx, rec, func(rec *kgo.Record, err error) {
		if err != nil {
			r.m.errors.WithLabelValues("produce").Inc()
		} else {
			r.m.produced.WithLabelValues(rec.Topic).Inc()
			r.m.produceSeconds.Observe(time.Since(start).Seconds())
		}
		r.tracker.ack(st, err)
	})
	if _, _, err := r.tracker.position(); err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	return nil
}

// watermarks publishes, per partition of every table topic, the position
// up to which this shard's changes are acknowledged. A round follows each
// advance of the tracker (a commit acknowledged by Kafka, or an idle
// shard's keepalive or heartbeat) at once, unless the previous round is
// younger than WatermarkMinGap: then it waits for the gap to pass and
// publishes the newest position, so a busy shard sends at most one round
// per gap. Every WatermarkInterval the state is saved and an unchanged
// position is published again after ten intervals (a loader that starts
// late still learns it).
func (r *Reader) watermarks(ctx context.Context) error {
	tick := time.NewTicker(r.cfg.WatermarkInterval)
	defer tick.Stop()
	var last, stored envelope.LSN
	var lastAt time.Time
	var gap <-chan time.Time // set while an advance waits for the gap to pass
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			r.saveState(ctx, &stored)
		case <-r.tracker.advanced():
			if wait := roundWait(time.Since(lastAt), r.cfg.WatermarkMinGap); wait > 0 {
				if gap == nil {
					gap = time.After(wait)
				}
				continue
			}
		case <-gap:
			gap = nil
		}
		pos, commit, err := r.tracker.position()
		if err != nil {
			return nil // the stream goroutine reports it
		}
		// Below the snapshot's end, copied rows may be ahead of the stream:
		// the shard is not complete at pos yet (snapshot.go).
		if pos < r.snapEnd || (pos == last && time.Since(lastAt) < 10*r.cfg.WatermarkInterval) {
			continue
		}
		if err := r.publishWatermark(ctx, pos, commit); err != nil {
			return err
		}
		last, lastAt = pos, time.Now()
	}
}

// roundWait is how long a watermark round for a new position waits, the
// previous round being since old: nothing once it is minGap old.
func roundWait(since, minGap time.Duration) time.Duration {
	return max(0, minGap-since)
}

// publishWatermark produces one watermark record at pos to every partition
// of every table topic, stamped with the commit time when the position is
// a commit's (else now: an idle shard is current as of now).
func (r *Reader) publishWatermark(ctx context.Context, pos envelope.LSN, commit txnTime) error {
	ts := time.Now()
	if commit.lsn == pos && commit.unix > 0 {
		ts = time.UnixMicro(commit.unix)
	}
	recs, err := watermarkRecords(r.cfg.Shard, pos, ts, r.parts)
	if err != nil {
		return err
	}
	for _, rec := range recs {
		r.marks.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			if err != nil && ctx.Err() == nil {
				r.m.errors.WithLabelValues("watermark").Inc()
				r.log.Warn("watermark produce failed", slog.Any("err", err))
			}
		})
	}
	r.m.watermarks.Inc()
	return nil
}

// saveState stores the position last reported to the server if it moved
// past *stored. Only positions already sent to the server are stored, so
// the stored one is never ahead of the slot (decideStart relies on it).
func (r *Reader) saveState(ctx context.Context, stored *envelope.LSN) {
	rep := envelope.LSN(r.reported.Load())
	if rep <= *stored {
		return
	}
	if err := r.storeState(ctx); err != nil {
		if ctx.Err() == nil {
			r.log.Warn("saving reader state failed", slog.Any("err", err))
		}
		return
	}
	*stored = rep
}

// monitor writes heartbeats and samples the slot's WAL retention.
func (r *Reader) monitor(ctx context.Context, conn *pgx.Conn) error {
	every := r.cfg.HeartbeatInterval
	if every <= 0 {
		every = 10 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if r.cfg.HeartbeatInterval > 0 {
			if _, err := conn.Exec(ctx, "SELECT pg_logical_emit_message(false, 'tributary.heartbeat', now()::text)"); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				r.m.errors.WithLabelValues("sql").Inc()
				r.log.Warn("heartbeat failed", slog.Any("err", err))
			} else {
				r.m.heartbeats.Inc()
			}
		}
		var retained *int64
		var status *string
		err := conn.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - restart_lsn)::int8, wal_status
			FROM pg_replication_slots WHERE slot_name = $1`, r.cfg.Slot).Scan(&retained, &status)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			r.m.errors.WithLabelValues("sql").Inc()
			continue
		}
		if retained != nil {
			r.m.retainedBytes.Set(float64(*retained))
		}
		if status != nil {
			r.m.setWALStatus(*status)
		}
	}
}
