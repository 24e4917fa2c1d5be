package reader

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestBackoffNext(t *testing.T) {
	b := Backoff{Min: time.Second, Max: 8 * time.Second}
	for _, c := range []struct {
		prev, ran, want time.Duration
	}{
		{0, 0, time.Second}, // first failure
		{time.Second, time.Millisecond, 2 * time.Second}, // failed again at once: doubled
		{4 * time.Second, 0, 8 * time.Second},
		{8 * time.Second, 0, 8 * time.Second},           // capped
		{8 * time.Second, 9 * time.Second, time.Second}, // ran longer than Max: a fresh start
	} {
		if got := b.next(c.prev, c.ran); got != c.want {
			t.Errorf("next(%s, %s) = %s, want %s", c.prev, c.ran, got, c.want)
		}
	}
	for range 100 {
		if d := jitter(4 * time.Second); d < 4*time.Second || d > 5*time.Second {
			t.Fatalf("jitter(4s) = %s, want 4s..5s", d)
		}
	}
}

// TestSuperviseRetriesEachShardAlone: two shards whose PostgreSQL is not
// there are each retried, counted and shown down under their own shard
// label; Supervise returns nil when stopped.
func TestSuperviseRetriesEachShardAlone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connecting fails at once
	cfgs := []Config{
		{Shard: 7, DSN: "postgres://u@" + addr + "/db?connect_timeout=2", Slot: "s7"},
		{Shard: 9, DSN: "postgres://u@" + addr + "/db?connect_timeout=2", Slot: "s9"},
	}
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Supervise(ctx, cfgs, Backoff{Min: 10 * time.Millisecond, Max: 20 * time.Millisecond},
			slog.New(slog.NewTextHandler(io.Discard, nil)), reg)
	}()
	restarts := func(shard string) float64 {
		return valueOf(t, reg, "tributary_reader_restarts_total", shard)
	}
	deadline := time.After(30 * time.Second)
	for restarts("7") < 2 || restarts("9") < 2 {
		select {
		case <-deadline:
			t.Fatalf("restarts: shard 7 %v, shard 9 %v; want each retried twice", restarts("7"), restarts("9"))
		case <-time.After(10 * time.Millisecond):
		}
	}
	for _, s := range []string{"7", "9"} {
		if v := valueOf(t, reg, "tributary_reader_up", s); v != 0 {
			t.Errorf("shard %s up = %v, want 0 while it cannot connect", s, v)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Supervise after stop: %v", err)
	}
	if err := Supervise(context.Background(), nil, Backoff{}, slog.Default(), prometheus.NewRegistry()); err == nil {
		t.Error("Supervise accepted a zero backoff")
	}
}

// valueOf is the value of metric name labelled shard in reg, -1 if none.
func valueOf(t *testing.T, reg *prometheus.Registry, name, shard string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "shard" && l.GetValue() == shard {
					return m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1 // not registered (yet)
}
