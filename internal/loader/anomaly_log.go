package loader

import (
	"log/slog"
	"time"

	"github.com/tributary/tributary/internal/chstore"
)

// Anomalies past the grace period are counted (tributary_duplicate_ids,
// tributary_duplicate_detections_total) and listed (GET
// /v1/anomalies/duplicates); the log only summarises them. A duplicate id
// is a fault: one line per evaluation round that found new ones, with a
// few of their ids. Colliding per-shard serials are expected of a serial
// table (its identity is (shard, id)): one line per table at most every
// serialSummaryEvery, with how many collided since the last one.

// serialSummaryEvery is the least time between two summaries of a
// table's serial collisions.
const serialSummaryEvery = 10 * time.Minute

// alertedExamples is how many ids a duplicate summary names.
const alertedExamples = 5

// anomalyLog summarises newly alerting anomalies; owned by the evaluation
// goroutine.
type anomalyLog struct {
	log    *slog.Logger
	serial map[string]serialSummary // by table
}

// serialSummary is what a table's serial collisions add up to since its
// last summary line.
type serialSummary struct {
	since  int       // new collisions not yet in a line
	logged time.Time // when the last line was written
}

// report logs the anomalies of table that began alerting this round; open
// is how many of kind serial_collision alert in all.
func (al *anomalyLog) report(now time.Time, table string, alerted []chstore.Anomaly, openSerial int) {
	var dup []chstore.Anomaly
	s := al.serial[table]
	for _, a := range alerted {
		if a.Kind == chstore.KindSerialCollision {
			s.since++
		} else {
			dup = append(dup, a)
		}
	}
	if len(dup) > 0 {
		ids := make([]string, 0, alertedExamples)
		for _, a := range dup[:min(len(dup), alertedExamples)] {
			ids = append(ids, a.ID)
		}
		al.log.Warn("ids live on several shards beyond the grace period (listed by GET /v1/anomalies/duplicates?state=alerting)",
			slog.String("table", table), slog.Int("new", len(dup)), slog.Any("examples", ids))
	}
	if s.since > 0 && now.Sub(s.logged) >= serialSummaryEvery {
		al.log.Info("per-shard serial ids collide across shards, as expected of a serial table (counted in tributary_duplicate_ids, listed by GET /v1/anomalies/duplicates)",
			slog.String("table", table), slog.Int("new", s.since), slog.Int("alerting", openSerial),
			slog.Duration("summary_every", serialSummaryEvery))
		s = serialSummary{logged: now}
	}
	if al.serial == nil {
		al.serial = map[string]serialSummary{}
	}
	al.serial[table] = s
}
