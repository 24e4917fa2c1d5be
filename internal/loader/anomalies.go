package loader

import (
	"context"
	"log/slog"
	"time"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/tables"
)

// detect updates the anomaly state of the ids a batch touched: an id live
// on several shards opens (or extends) an anomaly, an id back to one shard
// resolves it. All copies of an id share a Kafka partition (records are
// keyed by id), so the loader that owns the partition sees every change
// that could open or close the anomaly, in order.
func (l *Loader) detect(ctx context.Context, t *chstore.Table, cfg *tables.Table, ids []string, newest time.Time) error {
	// Only ids that ever had rows on two shards can be, or have been, live
	// on two: one cheap query narrows the batch to those, and the exact
	// (FINAL) questions are asked about them alone. What is written is
	// versioned by when this began to read (WriteAnomalies).
	readAt := time.Now()
	ids, err := l.store.MultiShardIDs(ctx, t, ids)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	live, err := l.store.LiveCopies(ctx, t, cfg.ShardKey, ids)
	if err != nil {
		return err
	}
	known, err := l.store.Anomalies(ctx, t.Name, ids, false)
	if err != nil {
		return err
	}
	kind := chstore.KindDuplicate
	if cfg.IDLayout == "serial" {
		kind = chstore.KindSerialCollision
	}
	var changed []chstore.Anomaly
	for _, id := range ids {
		cur, isLive := live[id]
		prev, wasKnown := known[id]
		open := wasKnown && !prev.Resolved
		switch {
		case isLive && open:
			if equalShards(prev.Shards, cur.Shards) && !cur.LastSeen.After(prev.LastSeen) {
				continue
			}
			prev.Shards, prev.LastSeen = cur.Shards, maxTime(prev.LastSeen, cur.LastSeen)
			changed = append(changed, prev)
		case isLive:
			cur.Kind, cur.FirstSeen = kind, cur.LastSeen
			if kind == chstore.KindDuplicate && l.arcMoveCopies(cur) {
				cur.Kind = chstore.KindArcMove
			}
			changed = append(changed, cur)
			l.log.Debug("id live on several shards", slog.String("table", t.Name), slog.String("id", id),
				slog.Any("shards", cur.Shards), slog.String("kind", cur.Kind))
		case open:
			prev.Resolved, prev.LastSeen = true, maxTime(prev.LastSeen, newest)
			changed = append(changed, prev)
		}
	}
	return l.store.WriteAnomalies(ctx, readAt, changed)
}

func equalShards(a, b []uint16) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// evaluateAnomalies (every AnomalyInterval, monitors.go) turns open
// anomalies into alerts once they outlive the
// grace period, measured in source time: an anomaly alerts when every shard
// it involves is known complete (watermark) past first_seen + grace. A move
// that completes within the grace period therefore never alerts, even when
// the pipeline replays a backlog. The gauges are global (read from
// ClickHouse), so every loader reports the same value; alert on max().
func (l *Loader) evaluateAnomalies(ctx context.Context) error {
	wm, err := l.store.WatermarkTimes(ctx)
	if err != nil {
		return err
	}
	for _, tc := range l.cfg.Tables.Tables {
		open, err := l.store.Anomalies(ctx, tc.Name, nil, true)
		if err != nil {
			return err
		}
		counts := map[string][2]int{} // kind -> [alerting, pending]
		var alerted []chstore.Anomaly
		var ended []chstore.Anomaly
		counted := map[countedKey]bool{}
		var newly []chstore.Anomaly // counted as detected this round
		for _, a := range open {
			if a.Kind == chstore.KindArcMove {
				if !l.moveStaged() {
					// Cutover (or an abandoned move) left the row on both
					// shards: a duplicate from now on, with its own grace.
					a.Kind, a.FirstSeen = chstore.KindDuplicate, time.Now().UTC().Truncate(time.Second)
					ended = append(ended, a)
				}
				c := counts[chstore.KindArcMove]
				c[1]++
				counts[chstore.KindArcMove] = c
				continue
			}
			c := counts[a.Kind]
			k := countedKey{a.ID, a.Kind, a.FirstSeen.Unix()}
			if a.Alerted || l.pastGrace(a, wm) {
				c[0]++
				if l.counted[tc.Name][k] {
					counted[k] = true
				}
				if !a.Alerted {
					a.Alerted = true
					alerted = append(alerted, a)
					if !counted[k] {
						counted[k] = true
						l.m.dupDetections.WithLabelValues(tc.Name, a.Kind).Inc()
						newly = append(newly, a)
					}
				}
			} else {
				c[1]++
			}
			counts[a.Kind] = c
		}
		l.anomalyLog.report(time.Now(), tc.Name, newly, counts[chstore.KindSerialCollision][0])
		if err := l.store.MarkAlerted(ctx, ended); err != nil { // cannot undo a resolution either
			return err
		}
		for _, kind := range []string{chstore.KindDuplicate, chstore.KindSerialCollision, chstore.KindArcMove} {
			l.m.dupIDs.WithLabelValues(tc.Name, kind).Set(float64(counts[kind][0]))
			l.m.dupPending.WithLabelValues(tc.Name, kind).Set(float64(counts[kind][1]))
		}
		// Any loader evaluates every open anomaly; MarkAlerted cannot undo
		// a resolution the owning loader wrote meanwhile.
		if err := l.store.MarkAlerted(ctx, alerted); err != nil {
			return err
		}
		l.counted[tc.Name] = counted
	}
	return nil
}

// countedKey is an anomaly this loader counted in
// tributary_duplicate_detections_total. The owner's state write can race an
// alert marking and lose its flag (the owner read the state before it was
// marked, and its write is newer); the next evaluation marks it again, and
// the keys remembered here keep that from counting a second detection.
// They are kept while the anomaly stays open.
type countedKey struct {
	id, kind  string
	firstSeen int64
}

func (l *Loader) pastGrace(a chstore.Anomaly, wm map[uint16]time.Time) bool {
	deadline := a.FirstSeen.Add(l.cfg.DuplicateGrace)
	for _, s := range a.Shards {
		ts, ok := wm[s]
		if !ok || !ts.After(deadline) {
			return false
		}
	}
	return len(a.Shards) > 0
}
