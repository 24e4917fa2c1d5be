package loader

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/chstore"
)

// syncReplicas waits, in cluster mode, until every reachable replica of
// the tables the watermarks speak for holds what was inserted before them
// (chstore.SyncReplicas; schema/clickhouse.md "Cluster mode: every
// replica before the watermark"): a watermark then never claims rows a
// read through a live replica would miss. A replica that does not answer
// is skipped, counted and logged; one whose table is read-only (ZooKeeper
// lost) fails the wait, retried and counted as a failed write like the
// watermark write it precedes; one that answers but cannot catch up
// holds the watermarks, and with them the batch's commit, loudly (a gauge
// at 1 and an error log naming it every chstore.ReplicaWaitStall) until it
// does or the loader stops.
func (l *Loader) syncReplicas(ctx context.Context, wms []chstore.Watermark) error {
	var names []string
	for _, w := range wms {
		if t, ok := l.cfg.Tables.ByTopic(w.Topic); ok && !slices.Contains(names, t.Name) {
			names = append(names, t.Name)
		}
	}
	var stalled []prometheus.Gauge
	defer func() {
		for _, g := range stalled {
			g.Set(0)
		}
	}()
	return l.store.SyncReplicas(ctx, names, func(e chstore.ReplicaEvent) {
		shard, replica := strconv.Itoa(e.Node.Shard), strconv.Itoa(e.Node.Replica)
		if e.Unreachable != nil {
			l.m.replicasSkipped.WithLabelValues(shard, replica).Inc()
			if l.logSkip(e.Node.String(), time.Now()) {
				l.log.Warn("clickhouse replica unreachable; watermarks written without waiting for it",
					slog.String("node", e.Node.String()), slog.Any("tables", names), slog.Any("err", e.Unreachable))
			}
			return
		}
		g := l.m.replicaStalled.WithLabelValues(shard, replica)
		g.Set(1)
		stalled = append(stalled, g)
		l.log.Error("clickhouse replica has not caught up; watermarks wait for it",
			slog.String("node", e.Node.String()), slog.Any("tables", names),
			slog.Duration("waited", e.Waited), slog.String("behind", e.Behind))
	})
}

// logSkip says whether a skip of node, now, is logged: the first, and
// then one per chstore.ReplicaWaitStall (every batch skips a node that is
// down, several times a second).
func (l *Loader) logSkip(node string, now time.Time) bool {
	if last, ok := l.skipLogged.Load(node); ok && now.Sub(last.(time.Time)) < chstore.ReplicaWaitStall {
		return false
	}
	l.skipLogged.Store(node, now)
	return true
}
