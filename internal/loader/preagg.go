package loader

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/preagg"
	"github.com/tributary/tributary/internal/tables"
)

// Revenue pre-aggregates (internal/preagg): every loader marks the id
// blocks its batches change in the revenue table, before it inserts them;
// the one loader started with RevenueAggregator recomputes them.

// newMarks returns the marks collector of the revenue table, if any.
func newMarks(cfg Config) *preagg.Marks {
	if cfg.Tables.Revenue == nil {
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
	return l.marks.Write(ctx, l.store.Conn(), l.store.Database())
}

// newAggregator builds the revenue aggregator when this loader runs it.
func newAggregator(cfg Config, store *chstore.Store, log *slog.Logger, reg prometheus.Registerer) *preagg.Aggregator {
	rev := cfg.Tables.Revenue
	if !cfg.RevenueAggregator || rev == nil {
		return nil
	}
	t, _ := cfg.Tables.ByName(rev.Table)
	return preagg.New(preagg.Config{Revenue: rev, IDColumn: t.IDColumn, ShardKey: t.ShardKey, Topic: t.Topic,
		BlockBits: cfg.PreaggBlockBits, Interval: cfg.PreaggInterval}, store.Conn(), store.Database(), log, reg)
}
