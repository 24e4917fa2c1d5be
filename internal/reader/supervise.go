package reader

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
)

// Backoff is how long a failed shard waits before its next run: Min after
// the first failure, doubled after each further one up to Max, with up to
// a quarter of random jitter (so that shards of one PostgreSQL host that
// failed together do not retry in lockstep). A run that lasted longer than
// Max counts as a success: the next failure waits Min again.
type Backoff struct {
	Min, Max time.Duration
}

// DefaultBackoff is cdc-reader's --retry-min and --retry-max.
var DefaultBackoff = Backoff{Min: time.Second, Max: 30 * time.Second}

// next is the wait after a run that lasted ran and followed prev (0: none).
func (b Backoff) next(prev, ran time.Duration) time.Duration {
	if prev == 0 || ran > b.Max {
		return b.Min
	}
	return min(2*prev, b.Max)
}

// jitter adds up to a quarter of d.
func jitter(d time.Duration) time.Duration {
	return d + rand.N(d/4+1)
}

// Supervise serves several shards in one process until ctx is done: each
// shard is its own Reader (its own connections, slot, state, producer and
// goroutines), run again with backoff whenever it fails — its PostgreSQL
// down or unreachable at start, its slot lost, a refusal — while the other
// shards keep streaming. A failure is reported for that shard alone: a log
// line with the shard, the error and the wait, tributary_reader_up{shard}
// 0 and tributary_reader_restarts_total{shard} counting it. Supervise
// returns nil once ctx is done and every shard has stopped (each flushed
// its producer and reported its final position, as Run does).
//
// Each shard keeps its own Kafka client rather than one shared: a
// producer's buffer bound is then a bound per shard (one shard's initial
// copy cannot fill the buffer the others stream through), a shard's
// failure closes and flushes only its own producer, and a produce error
// stops only the tracker of the shard it belongs to. The cost is a few
// connections and buffers per shard (docs/design/reader.md, "Many shards in one
// process", has the measured RSS per shard).
func Supervise(ctx context.Context, cfgs []Config, b Backoff, log *slog.Logger, reg prometheus.Registerer) error {
	if b.Min <= 0 || b.Max < b.Min {
		return errors.New("reader: backoff needs 0 < Min <= Max")
	}
	ms := make([]*metrics, len(cfgs))
	for i, c := range cfgs {
		ms[i] = newMetrics(reg, strconv.Itoa(c.Shard))
	}
	var g errgroup.Group
	for i, c := range cfgs {
		c := c.withDefaults()
		g.Go(func() error {
			superviseShard(ctx, c, b, log, ms[i])
			return nil
		})
	}
	return g.Wait()
}

// superviseShard runs one shard until ctx is done.
func superviseShard(ctx context.Context, cfg Config, b Backoff, log *slog.Logger, m *metrics) {
	var wait time.Duration
	for ctx.Err() == nil {
		started := time.Now()
		err := newReader(cfg, log, m).Run(ctx)
		if ctx.Err() != nil {
			return
		}
		ran := time.Since(started)
		wait = b.next(wait, ran)
		d := jitter(wait)
		m.restarts.Inc()
		if err == nil {
			// Run returns nil only when stopped; anything else is a bug
			// worth seeing, and retried like a failure.
			err = errors.New("reader stopped without an error")
		}
		log.Error("shard failed; retrying it alone, the other shards keep streaming",
			slog.Int("shard", cfg.Shard), slog.String("slot", cfg.Slot), slog.Any("err", err),
			slog.Duration("ran", ran.Round(time.Millisecond)), slog.Duration("retry_in", d.Round(time.Millisecond)))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
