package loader

// A stopped table stops only itself. A table the loader cannot follow (an
// incompatible schema change, an unmapped type) is stopped: its topic is
// paused and nothing of it is committed or watermarked past the change
// (batch.go). Its watermarks therefore stay where they were — and the
// fleet's freshness, the minimum over every table's watermarks, would stay
// there with them. So the loader also records the stop in ClickHouse
// (chstore.StoppedTable), which the API reads: it leaves the table out of
// the fleet's freshness (/v1/shards) and says, there and in the table's
// own answers, that it is stopped and why.
//
// The record is this loader's (keyed by table and loader name), rewritten
// every chstore.StopRenew while the table stays stopped, and cleared when
// the loader ends; the record of a loader that was killed is not renewed
// and expires after chstore.StopLease. A restarted loader that still
// cannot follow the table stops it again and writes a new record.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/tributary/tributary/internal/chstore"
)

// maxStopReason bounds a stop reason stored in ClickHouse.
const maxStopReason = 2000

// stopRecords are this loader's stopped tables, as recorded in ClickHouse.
type stopRecords struct {
	loader string // this loader's name in the records
	mu     sync.Mutex
	tables map[string]chstore.StoppedTable // by table; guarded by mu
	// cleared are records of tables no longer stopped (a resumed pause),
	// written once with stopped false; guarded by mu.
	cleared []chstore.StoppedTable
	// changed wakes the writer when a table stops (buffered 1).
	changed chan struct{}
}

func newStopRecords(cfg Config) *stopRecords {
	return &stopRecords{loader: loaderName(cfg), tables: map[string]chstore.StoppedTable{}, changed: make(chan struct{}, 1)}
}

// loaderName names this loader in its records: its static group member
// id if it has one, else host, process and a random suffix.
func loaderName(cfg Config) string {
	if cfg.InstanceID != "" {
		return cfg.InstanceID
	}
	host, _ := os.Hostname()
	b := make([]byte, 3)
	rand.Read(b) //nolint:errcheck // never fails
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
}

// note records that table (of topic) stopped for err; the writer stores it.
func (r *stopRecords) note(table, topic string, err error, now time.Time) {
	reason := err.Error()
	if len(reason) > maxStopReason {
		reason = reason[:maxStopReason] + "..."
	}
	r.mu.Lock()
	r.tables[table] = chstore.StoppedTable{Table: table, Topic: topic, Loader: r.loader, Stopped: true, Reason: reason, Since: now}
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// clear ends table's stop (a resumed pause): its record is written once
// more with stopped false, dated a second on so that it wins over a
// renewal written in the same second (updated_at counts seconds).
func (r *stopRecords) clear(table string, now time.Time) {
	r.mu.Lock()
	if t, ok := r.tables[table]; ok {
		delete(r.tables, table)
		t.Stopped, t.UpdatedAt = false, now.Add(time.Second)
		r.cleared = append(r.cleared, t)
	}
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// records are the records to write now: every stopped table, renewed at
// now, or with stopped false to clear them, and the tables cleared since
// the last call.
func (r *stopRecords) records(now time.Time, stopped bool) []chstore.StoppedTable {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]chstore.StoppedTable, 0, len(r.tables)+len(r.cleared))
	out = append(out, r.cleared...)
	r.cleared = nil
	for _, t := range r.tables {
		t.UpdatedAt, t.Stopped = now, stopped
		out = append(out, t)
	}
	return out
}

// stopWriter is what watchStopped writes through (chstore.Store).
type stopWriter interface {
	WriteStopped(ctx context.Context, ts []chstore.StoppedTable) error
}

// watchStopped writes the stopped tables' records when a table stops and
// every renew after, until ctx ends; then it clears them. A failed write
// is counted in failures, logged and tried again at the next renewal.
func watchStopped(ctx context.Context, r *stopRecords, w stopWriter, renew time.Duration, failures prometheus.Counter, log *slog.Logger) {
	tick := time.NewTicker(renew)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if recs := r.records(time.Now(), false); len(recs) > 0 {
				if err := w.WriteStopped(cctx, recs); err != nil {
					failures.Inc()
					log.Warn("stopped tables not cleared; their records expire", slog.Any("err", err))
				}
			}
			return
		case <-r.changed:
		case <-tick.C:
		}
		if recs := r.records(time.Now(), true); len(recs) > 0 {
			if err := w.WriteStopped(ctx, recs); err != nil && ctx.Err() == nil {
				failures.Inc()
				log.Warn("stopped tables not recorded; retrying", slog.Any("err", err))
			}
		}
	}
}
