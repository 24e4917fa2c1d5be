package loader

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestMonitorGroup: monitors run side by side until stopped; one that
// fails is counted, ends the others, and is what stop returns; a failure
// after stop was asked for is none.
func TestMonitorGroup(t *testing.T) {
	boom := errors.New("boom")
	waitEnd := func(ctx context.Context) error { <-ctx.Done(); return nil }
	tests := []struct {
		name    string
		ms      []monitor
		fails   bool // failed() closes before stop
		wantErr string
		counted map[string]float64
	}{
		{name: "all run until stopped",
			ms:      []monitor{{"lag", waitEnd}, {"anomalies", waitEnd}},
			counted: map[string]float64{"lag": 0, "anomalies": 0}},
		{name: "one fails: the group ends with its error",
			ms:    []monitor{{"lag", waitEnd}, {"misplaced", func(context.Context) error { return boom }}},
			fails: true, wantErr: "monitor misplaced: boom",
			counted: map[string]float64{"lag": 0, "misplaced": 1}},
		{name: "an error once stopping is not a failure",
			ms:      []monitor{{"pauses", func(ctx context.Context) error { <-ctx.Done(); return boom }}},
			counted: map[string]float64{"pauses": 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := stepLoader(t, newFakeStore(), 0)
			g := l.startMonitors(context.Background(), tt.ms)
			if tt.fails {
				<-g.failed()
			} else {
				select {
				case <-g.failed():
					t.Fatal("the group ended before stop")
				default:
				}
			}
			err := g.stop()
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr || !errors.Is(err, boom)) {
				t.Fatalf("stop() = %v, want %q", err, tt.wantErr)
			}
			for name, want := range tt.counted {
				if got := counterValue(t, l.m.monitorErrors.WithLabelValues(name)); got != want {
					t.Errorf("monitor_errors_total{monitor=%q} = %v, want %v", name, got, want)
				}
			}
		})
	}
}

// TestEvery: a ticking monitor's failed rounds are counted and logged, and
// the next round runs anyway; it ends, without error, with its context.
func TestEvery(t *testing.T) {
	l := stepLoader(t, newFakeStore(), 0)
	var logged strings.Builder
	l.log = slog.New(slog.NewTextHandler(&logged, nil))
	ctx, cancel := context.WithCancel(context.Background())
	var rounds atomic.Int32
	tk := ticker{name: "anomalies", interval: time.Millisecond, failed: "anomaly evaluation failed", level: slog.LevelWarn,
		round: func(context.Context) error {
			switch rounds.Add(1) {
			case 1, 2:
				return errors.New("clickhouse away")
			case 3:
				cancel()
			}
			return nil
		}}
	if err := l.every(ctx, tk); err != nil {
		t.Fatalf("every() = %v", err)
	}
	if n := rounds.Load(); n != 3 {
		t.Errorf("%d rounds, want 3", n)
	}
	if got := counterValue(t, l.m.monitorErrors.WithLabelValues("anomalies")); got != 2 {
		t.Errorf("monitor_errors_total = %v, want 2", got)
	}
	if n := strings.Count(logged.String(), "anomaly evaluation failed"); n != 2 {
		t.Errorf("%d failures logged, want 2:\n%s", n, logged.String())
	}
}
