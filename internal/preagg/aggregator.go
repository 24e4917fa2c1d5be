package preagg

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/shopspring/decimal"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/revenueblocks"
	"github.com/tributary/tributary/internal/tables"
)

// Config is what an Aggregator keeps pre-aggregated.
type Config struct {
	Revenue  *tables.Revenue
	IDColumn string
	// ShardKey is the revenue table's shard key ("" when not placed by a
	// ring map): rows count from the owner of their key only.
	ShardKey string
	// Topic is the revenue table's topic (its watermarks say how complete
	// each shard is).
	Topic     string
	BlockBits int
	Interval  time.Duration
}

// Aggregator recomputes dirty blocks in rounds. Exactly one may run per
// table at a time (the loaders elect it): two would interleave their reads
// and writes of blocks and state. Run may be called again after it
// returned (a loader elected again).
type Aggregator struct {
	cfg  Config
	st   Store
	conn driver.Conn
	db   string
	log  *slog.Logger

	// Owned by the goroutine in Run (or Round's caller). kind is the id
	// kind, found on the first round the table exists; blocksReady: the
	// blocks table exists (created once, on the first round with data).
	kind        revenueblocks.IDKind
	blocksReady bool
	marksReady  bool // the marks and state tables exist (ensureMarks)

	rounds     *prometheus.CounterVec
	recomputed prometheus.Counter
	lag        prometheus.Gauge
	leader     prometheus.Gauge
}

// roundOutcomes are the outcome labels of tributary_preagg_rounds_total.
var roundOutcomes = []string{"incremental", "full", "idle", "waiting", "refused", "error"}

// New builds an aggregator over the store's connection.
func New(cfg Config, st Store, log *slog.Logger, reg prometheus.Registerer) *Aggregator {
	conn, db := st.Conn(), st.Database()
	if cfg.BlockBits <= 0 {
		cfg.BlockBits = DefaultBlockBits
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	a := &Aggregator{cfg: cfg, st: st, conn: conn, db: db, log: log,
		rounds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tributary_preagg_rounds_total",
			Help: "Revenue pre-aggregate rounds by outcome: incremental, full (first round, ring map or block layout change, truncate), idle (nothing new), waiting (no table or no complete watermark yet), refused (an id type without blocks: once, then the aggregator stops), error."},
			[]string{"outcome"}),
		recomputed: prometheus.NewCounter(prometheus.CounterOpts{Name: "tributary_preagg_blocks_recomputed_total",
			Help: "Id blocks of the revenue table recomputed from the table."}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tributary_preagg_lag_seconds",
			Help: "How far the pre-aggregates' freshness is behind the revenue table's, at the last round (source commit time)."}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tributary_preagg_leader",
			Help: "1 while this loader is the elected revenue pre-aggregator (it owns partition 0 of the revenue topic), else 0."}),
	}
	reg.MustRegister(a.rounds, a.recomputed, a.lag, a.leader)
	// At 0 from the start, so that the first failed round is an increase
	// an alert sees (a series born at 1 has no earlier sample).
	for _, o := range roundOutcomes {
		a.rounds.WithLabelValues(o)
	}
	return a
}

// Run runs rounds every Interval until ctx ends. Errors are logged and
// counted; the next round retries. An id column it cannot handle is
// refused once: Run logs why and returns, and the API answers live.
func (a *Aggregator) Run(ctx context.Context) {
	a.leader.Set(1)
	defer a.leader.Set(0)
	t := time.NewTicker(a.cfg.Interval)
	defer t.Stop()
	for {
		outcome, err := a.Round(ctx)
		if errors.Is(err, revenueblocks.ErrUnsupportedID) {
			a.rounds.WithLabelValues("refused").Inc()
			a.log.Warn("revenue pre-aggregates off: the id column cannot be cut into blocks; GET /v1/revenue answers from the live query",
				slog.String("table", a.cfg.Revenue.Table), slog.String("id_column", a.cfg.IDColumn), slog.Any("err", err))
			return
		}
		if err != nil && ctx.Err() == nil {
			a.log.Warn("revenue pre-aggregate round failed", slog.Any("err", err))
		}
		a.rounds.WithLabelValues(outcome).Inc()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// shardPos is one shard's watermark.
type shardPos struct {
	lsn uint64
	ts  time.Time
}

// Round runs one round and says what it did; the first creates the marks
// and state tables.
func (a *Aggregator) Round(ctx context.Context) (string, error) {
	if !a.marksReady {
		if err := ensureMarks(ctx, a.st); err != nil {
			return "error", err
		}
		a.marksReady = true
	}
	table := a.cfg.Revenue.Table
	if a.kind == "" {
		kind, ok, err := a.idKind(ctx)
		if err != nil || !ok {
			return "waiting", err
		}
		a.kind = kind
	}
	fresh, err := chstore.ShardWatermarks(ctx, a.conn, a.db, []string{a.cfg.Topic})
	if err != nil {
		return "error", err
	}
	w := map[uint16]shardPos{}
	for _, f := range fresh {
		if !f.Complete {
			return "waiting", nil
		}
		w[uint16(f.Shard)] = shardPos{uint64(f.LSN), f.CommitTS}
	}
	if len(w) == 0 {
		return "waiting", nil
	}
	st, err := revenueblocks.ReadState(ctx, a.conn, a.db, table)
	if err != nil {
		return "error", err
	}
	ring, err := chstore.RingVersion(ctx, a.conn, a.db, table)
	if err != nil {
		return "error", err
	}
	prev := map[uint16]uint64{}
	full := needsFull(st, ring, a.kind, a.cfg.BlockBits)
	if st != nil {
		for _, f := range st.Shards {
			prev[uint16(f.Shard)] = uint64(f.LSN)
		}
	}
	var dirty []int64
	if !full {
		if dirty, err = a.dirtyBlocks(ctx, prev, w); err != nil {
			return "error", err
		}
		full = slices.Contains(dirty, AllBlocks)
	}
	outcome := "incremental"
	switch {
	case full:
		outcome = "full"
		if err := a.recomputeAll(ctx); err != nil {
			return "error", err
		}
	case len(dirty) == 0 && !advanced(prev, w):
		return "idle", nil
	default:
		for i := 0; i < len(dirty); i += 500 {
			if err := a.recompute(ctx, dirty[i:min(i+500, len(dirty))]); err != nil {
				return "error", err
			}
		}
	}
	if err := a.writeState(ctx, w, ring); err != nil {
		return "error", err
	}
	a.lag.Set(lagOf(fresh, w))
	return outcome, nil
}

// idKind reads the id column's type; ok is false while the table does not
// exist yet, and the error wraps revenueblocks.ErrUnsupportedID for a type
// without blocks.
func (a *Aggregator) idKind(ctx context.Context) (kind revenueblocks.IDKind, ok bool, err error) {
	rows, err := a.conn.Query(ctx, "SELECT type FROM system.columns WHERE database = ? AND table = ? AND name = ?",
		a.db, a.cfg.Revenue.Table, a.cfg.IDColumn)
	if err != nil {
		return "", false, fmt.Errorf("id column type of %s: %w", a.cfg.Revenue.Table, err)
	}
	defer rows.Close()
	if !rows.Next() {
		return "", false, rows.Err()
	}
	var typ string
	if err := rows.Scan(&typ); err != nil {
		return "", false, fmt.Errorf("id column type of %s: %w", a.cfg.Revenue.Table, err)
	}
	kind, err = revenueblocks.KindOf(typ)
	if err != nil {
		return "", false, fmt.Errorf("%s.%s: %w", a.cfg.Revenue.Table, a.cfg.IDColumn, err)
	}
	return kind, true, nil
}

// needsFull says whether a round must recompute every block: nothing was
// computed yet (st nil), or the blocks were computed under another ring
// map version or another block layout (id kind, bits).
func needsFull(st *revenueblocks.State, ring int64, kind revenueblocks.IDKind, bits int) bool {
	return st == nil || st.RingVersion != ring || st.Kind != kind || st.Bits != bits
}

// advanced says whether some shard's watermark moved since the last round.
func advanced(prev map[uint16]uint64, w map[uint16]shardPos) bool {
	for s, p := range w {
		if prev[s] != p.lsn {
			return true
		}
	}
	return false
}

func lagOf(fresh []chstore.ShardWatermark, w map[uint16]shardPos) float64 {
	var lag float64
	for _, f := range fresh {
		lag = max(lag, f.CommitTS.Sub(w[uint16(f.Shard)].ts).Seconds())
	}
	return lag
}

// dirtyBlocks returns the blocks marked in (prev, w] for their shard,
// sorted; AllBlocks among them means every block.
func (a *Aggregator) dirtyBlocks(ctx context.Context, prev map[uint16]uint64, w map[uint16]shardPos) ([]int64, error) {
	conds, args := markConds(prev, w)
	if conds == "" {
		return nil, nil
	}
	return a.blocks(ctx, "read marks", fmt.Sprintf("SELECT DISTINCT block FROM %s.%s WHERE source_table = ? AND (%s) ORDER BY block",
		chstore.Quote(a.db), revenueblocks.MarksTable, conds), append([]any{a.cfg.Revenue.Table}, args...)...)
}

// blocks runs q, which selects blocks (what: the error's context).
func (a *Aggregator) blocks(ctx context.Context, what, q string, args ...any) ([]int64, error) {
	rows, err := a.conn.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var b int64
		if err := rows.Scan(&b); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// markConds is the condition on the marks table that selects the marks of
// each shard whose watermark moved, in (prev, w], with its arguments, by
// shard; "" when no shard moved.
func markConds(prev map[uint16]uint64, w map[uint16]shardPos) (string, []any) {
	var conds []string
	var args []any
	for _, s := range slices.Sorted(maps.Keys(w)) {
		if w[s].lsn <= prev[s] {
			continue
		}
		conds = append(conds, "(shard = ? AND commit_lsn > ? AND commit_lsn <= ?)")
		args = append(args, s, prev[s], w[s].lsn)
	}
	return strings.Join(conds, " OR "), args
}

// recomputeAll recomputes every block: those with rows, and those stored
// before that have none left (written empty).
func (a *Aggregator) recomputeAll(ctx context.Context) error {
	if err := a.ensureBlocks(ctx); err != nil {
		return err
	}
	stored, err := a.storedBlocks(ctx)
	if err != nil {
		return err
	}
	return a.recomputeBlocks(ctx, nil, stored)
}

// recompute recomputes the given blocks (sorted).
func (a *Aggregator) recompute(ctx context.Context, blocks []int64) error {
	if err := a.ensureBlocks(ctx); err != nil {
		return err
	}
	return a.recomputeBlocks(ctx, blocks, blocks)
}

// blockSums is one block's arrays.
type blockSums struct {
	day             []time.Time
	cur             []string
	kept, refunds   []decimal.Decimal
	n               []uint64
	sDay            []time.Time
	sShard          []uint16
	sCur            []string
	sKept, sRefunds []decimal.Decimal
	sN              []uint64
	index           map[dayCur]int
}

type dayCur struct {
	day time.Time
	cur string
}

func newBlockSums() *blockSums {
	return &blockSums{day: []time.Time{}, cur: []string{}, kept: []decimal.Decimal{}, refunds: []decimal.Decimal{}, n: []uint64{},
		sDay: []time.Time{}, sShard: []uint16{}, sCur: []string{}, sKept: []decimal.Decimal{}, sRefunds: []decimal.Decimal{}, sN: []uint64{},
		index: map[dayCur]int{}}
}

// add adds one (day, shard, currency) group to both array sets.
func (b *blockSums) add(day time.Time, shard uint16, cur string, kept, refunds decimal.Decimal, n uint64) {
	b.sDay, b.sShard, b.sCur = append(b.sDay, day), append(b.sShard, shard), append(b.sCur, cur)
	b.sKept, b.sRefunds, b.sN = append(b.sKept, kept), append(b.sRefunds, refunds), append(b.sN, n)
	k := dayCur{day, cur}
	if i, ok := b.index[k]; ok {
		b.kept[i], b.refunds[i], b.n[i] = b.kept[i].Add(kept), b.refunds[i].Add(refunds), b.n[i]+n
		return
	}
	b.index[k] = len(b.day)
	b.day, b.cur = append(b.day, day), append(b.cur, cur)
	b.kept, b.refunds, b.n = append(b.kept, kept), append(b.refunds, refunds), append(b.n, n)
}

// recomputeBlocks recomputes blocks (nil: all) and writes one row for each
// block found and each of also (emptied blocks get empty arrays).
func (a *Aggregator) recomputeBlocks(ctx context.Context, blocks, also []int64) error {
	computed := uint64(time.Now().UnixNano()) // before the read: a later round's write wins
	sql, args := revenueblocks.Recompute(a.db, a.cfg.Revenue, a.kind, a.cfg.IDColumn, a.cfg.ShardKey, a.cfg.BlockBits, blocks)
	rows, err := a.conn.Query(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("recompute revenue blocks: %w", err)
	}
	sums := map[int64]*blockSums{}
	for _, b := range also {
		sums[b] = newBlockSums()
	}
	for rows.Next() {
		var b int64
		var day time.Time
		var shard uint16
		var cur string
		var kept, refunds *decimal.Decimal
		var n uint64
		if err := rows.Scan(&b, &day, &shard, &cur, &kept, &refunds, &n); err != nil {
			rows.Close()
			return fmt.Errorf("recompute revenue blocks: %w", err)
		}
		s := sums[b]
		if s == nil {
			s = newBlockSums()
			sums[b] = s
		}
		s.add(day, shard, cur, deref(kept), deref(refunds), n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("recompute revenue blocks: %w", err)
	}
	batch, err := a.conn.PrepareBatch(ctx, fmt.Sprintf(`INSERT INTO %s.%s (source_table, block, computed,
		day, currency, kept, refunds, invoices, s_day, s_shard, s_currency, s_kept, s_refunds, s_invoices)`,
		chstore.Quote(a.db), chstore.Quote(revenueblocks.BlocksTable(a.cfg.Revenue.Table))))
	if err != nil {
		return fmt.Errorf("prepare revenue blocks: %w", err)
	}
	defer batch.Abort() //nolint:errcheck // no-op after Send
	for b, s := range sums {
		if err := batch.Append(a.cfg.Revenue.Table, b, computed, s.day, s.cur, s.kept, s.refunds, s.n,
			s.sDay, s.sShard, s.sCur, s.sKept, s.sRefunds, s.sN); err != nil {
			return fmt.Errorf("append revenue block: %w", err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("insert revenue blocks: %w", err)
	}
	a.recomputed.Add(float64(len(sums)))
	return nil
}

func deref(d *decimal.Decimal) decimal.Decimal {
	if d == nil {
		return decimal.Decimal{}
	}
	return *d
}

// ensureBlocks creates the blocks table once the revenue table exists
// (its arrays take the amount's Decimal scale).
func (a *Aggregator) ensureBlocks(ctx context.Context) error {
	if a.blocksReady {
		return nil
	}
	var typ string
	err := a.conn.QueryRow(ctx, "SELECT type FROM system.columns WHERE database = ? AND table = ? AND name = ?",
		a.db, a.cfg.Revenue.Table, a.cfg.Revenue.AmountColumn).Scan(&typ)
	if err != nil {
		return fmt.Errorf("amount column type of %s: %w", a.cfg.Revenue.Table, err)
	}
	scale, ok := revenueblocks.DecimalScale(typ)
	if !ok {
		return fmt.Errorf("%w: %s.%s is %s", revenueblocks.ErrInexactAmount, a.cfg.Revenue.Table, a.cfg.Revenue.AmountColumn, typ)
	}
	dec := fmt.Sprintf("Array(Decimal(38, %d))", scale)
	blocks := revenueblocks.BlocksTable(a.cfg.Revenue.Table)
	err = a.st.ExecDDL(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (source_table String, block Int64, computed UInt64,
		day Array(Date), currency Array(String), kept %[3]s, refunds %[3]s, invoices Array(UInt64),
		s_day Array(Date), s_shard Array(UInt16), s_currency Array(String), s_kept %[3]s, s_refunds %[3]s, s_invoices Array(UInt64))
		ENGINE = %[4]s ORDER BY (source_table, block)`,
		chstore.Quote(a.db), chstore.Quote(blocks), dec, a.st.ClusterReplicated(blocks, "ReplacingMergeTree(computed)")))
	a.blocksReady = err == nil
	return err
}

// storedBlocks lists the blocks that have a row.
func (a *Aggregator) storedBlocks(ctx context.Context) ([]int64, error) {
	return a.blocks(ctx, "stored revenue blocks", fmt.Sprintf("SELECT DISTINCT block FROM %s.%s WHERE source_table = ?",
		chstore.Quote(a.db), chstore.Quote(revenueblocks.BlocksTable(a.cfg.Revenue.Table))), a.cfg.Revenue.Table)
}

// writeState records w as the pre-aggregates' freshness.
func (a *Aggregator) writeState(ctx context.Context, w map[uint16]shardPos, ring int64) error {
	b, err := a.conn.PrepareBatch(ctx, fmt.Sprintf("INSERT INTO %s.%s (source_table, shard, lsn, commit_ts, ring_version, computed, id_kind, block_bits)",
		chstore.Quote(a.db), revenueblocks.StateTable))
	if err != nil {
		return fmt.Errorf("prepare pre-aggregate state: %w", err)
	}
	defer b.Abort() //nolint:errcheck // no-op after Send
	computed := uint64(time.Now().UnixNano())
	for s, p := range w {
		if err := b.Append(a.cfg.Revenue.Table, s, p.lsn, p.ts.UTC(), ring, computed, string(a.kind), uint8(a.cfg.BlockBits)); err != nil {
			return fmt.Errorf("append pre-aggregate state: %w", err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("write pre-aggregate state: %w", err)
	}
	return nil
}
