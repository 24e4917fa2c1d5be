package loader

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/tributary/tributary/internal/chstore"
)

// The monitors run beside the batch loop, under one errgroup, for as long
// as Run does: the pause records, the anomaly evaluation, the stopped
// tables' records, the consumer lag, misplaced rows and ring map reloads
// (with a ring map), the compaction keeper (with CompactInterval) and the
// revenue aggregator (while elected, preagg.go). A failed round is
// counted in tributary_loader_monitor_errors_total{monitor} and logged,
// and the next round tries again; a monitor that returns an error ends
// the group, and Run returns that error.

// Monitor names: the monitor label of tributary_loader_monitor_errors_total.
const (
	monitorPauses     = "pauses"
	monitorAnomalies  = "anomalies"
	monitorStopped    = "stopped"
	monitorLag        = "lag"
	monitorMisplaced  = "misplaced"
	monitorRingReload = "ring_reload"
	monitorCompaction = "compaction"
	monitorAggregator = "aggregator"
)

// monitorNames are every monitor label, exported at 0 from New on.
var monitorNames = []string{monitorPauses, monitorAnomalies, monitorStopped, monitorLag,
	monitorMisplaced, monitorRingReload, monitorCompaction, monitorAggregator}

// monitors are the group of monitors of one Run.
type monitors struct {
	g      *errgroup.Group
	ctx    context.Context //nolint:containedctx // the group's: done when a monitor failed or stop was called
	cancel context.CancelFunc
}

// monitor is one goroutine of the group: it runs until ctx ends, and an
// error it returns stops the loader.
type monitor struct {
	name string
	run  func(ctx context.Context) error
}

// monitorsOf are the monitors of this configuration; cl is the client of
// Run, for the lag.
func (l *Loader) monitorsOf(cl *kgo.Client) []monitor {
	var ms []monitor
	for _, tk := range l.tickers(cl) {
		ms = append(ms, monitor{tk.name, func(ctx context.Context) error { return l.every(ctx, tk) }})
	}
	ms = append(ms, monitor{monitorStopped, func(ctx context.Context) error {
		watchStopped(ctx, l.stops, l.store, chstore.StopRenew, l.m.monitorErrors.WithLabelValues(monitorStopped), l.log)
		return nil
	}}, monitor{monitorMisplaced, l.watchMisplaced})
	if l.elect != nil {
		ms = append(ms, monitor{monitorAggregator, l.elect.run})
	}
	return ms
}

// startMonitors runs ms under one errgroup. The first to fail (an error
// while ctx lasts) is counted, ends the others, and is stop's error.
func (l *Loader) startMonitors(ctx context.Context, ms []monitor) *monitors {
	mctx, cancel := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(mctx)
	for _, m := range ms {
		g.Go(func() error {
			err := m.run(gctx)
			if err == nil || gctx.Err() != nil {
				return nil
			}
			l.m.monitorErrors.WithLabelValues(m.name).Inc()
			l.log.Error("monitor failed; the loader stops", slog.String("monitor", m.name), slog.Any("err", err))
			return fmt.Errorf("monitor %s: %w", m.name, err)
		})
	}
	return &monitors{g: g, ctx: gctx, cancel: cancel}
}

// ticker is a monitor that runs a round every interval.
type ticker struct {
	name     string
	interval time.Duration
	round    func(context.Context) error
	failed   string     // what the log says of a failed round
	level    slog.Level // at which level
}

// tickers are the monitors of this configuration that run rounds.
func (l *Loader) tickers(cl *kgo.Client) []ticker {
	adm := kadm.NewClient(cl)
	ts := []ticker{
		{monitorPauses, pauseInterval, l.readPauses, "pause records not read; the last ones read stay in force", slog.LevelWarn},
		{monitorAnomalies, l.cfg.AnomalyInterval, l.evaluateAnomalies, "anomaly evaluation failed", slog.LevelWarn},
		{monitorLag, l.cfg.LagInterval, func(ctx context.Context) error { return l.sampleLag(ctx, adm) }, "lag sample failed", slog.LevelDebug},
	}
	if l.keeper != nil {
		ts = append(ts, ticker{monitorCompaction, l.cfg.CompactInterval, func(ctx context.Context) error {
			_, err := l.keeper.Round(ctx)
			return err
		}, "compaction round failed; the next round tries again", slog.LevelWarn})
	}
	return ts
}

// failed is closed once a monitor failed (or stop was called).
func (ms *monitors) failed() <-chan struct{} { return ms.ctx.Done() }

// stop ends the monitors, waits for them, and returns the first error one
// of them failed with.
func (ms *monitors) stop() error {
	ms.cancel()
	return ms.g.Wait()
}

// every runs tk's round every interval until ctx ends; a failed round is
// counted and logged (roundDone), and the next one tries again.
func (l *Loader) every(ctx context.Context, tk ticker) error {
	t := time.NewTicker(tk.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		l.roundDone(ctx, tk.name, tk.round(ctx), tk.level, tk.failed)
	}
}

// roundDone counts a monitor round's error as monitor's and logs it with
// msg at level, unless ctx ended the round.
func (l *Loader) roundDone(ctx context.Context, monitor string, err error, level slog.Level, msg string) {
	if err == nil || ctx.Err() != nil {
		return
	}
	l.m.monitorErrors.WithLabelValues(monitor).Inc()
	l.log.Log(ctx, level, msg, slog.String("monitor", monitor), slog.Any("err", err))
}
