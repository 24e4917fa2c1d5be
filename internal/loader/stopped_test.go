package loader

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/chstore"
)

// fakeStopWriter keeps every write.
type fakeStopWriter struct {
	mu     sync.Mutex
	writes [][]chstore.StoppedTable
}

func (f *fakeStopWriter) WriteStopped(_ context.Context, ts []chstore.StoppedTable) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writes = append(f.writes, ts)
	return nil
}

func (f *fakeStopWriter) last() ([]chstore.StoppedTable, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.writes) == 0 {
		return nil, 0
	}
	return f.writes[len(f.writes)-1], len(f.writes)
}

// TestStopRecords: a stopped table is recorded at once, renewed while the
// loader runs, and cleared when it ends.
func TestStopRecords(t *testing.T) {
	r := newStopRecords(Config{InstanceID: "loader-a"})
	w := &fakeStopWriter{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchStopped(ctx, r, w, 20*time.Millisecond, prometheus.NewCounter(prometheus.CounterOpts{Name: "x"}), slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	since := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	r.note("invoices", "t.invoices", errors.New(`column "kind": unmapped PostgreSQL type "mood"`), since)

	deadline := time.Now().Add(10 * time.Second)
	var recs []chstore.StoppedTable
	var n int
	for n < 3 && time.Now().Before(deadline) { // the first write and two renewals
		time.Sleep(10 * time.Millisecond)
		recs, n = w.last()
	}
	if n < 3 || len(recs) != 1 {
		t.Fatalf("%d writes, last %+v: want the stop recorded and renewed", n, recs)
	}
	got := recs[0]
	if got.Table != "invoices" || got.Topic != "t.invoices" || got.Loader != "loader-a" || !got.Stopped ||
		got.Reason != `column "kind": unmapped PostgreSQL type "mood"` || !got.Since.Equal(since) || !got.UpdatedAt.After(since) {
		t.Errorf("record %+v", got)
	}
	cancel()
	<-done
	recs, _ = w.last()
	if len(recs) != 1 || recs[0].Stopped || recs[0].Table != "invoices" {
		t.Errorf("after the loader ended: %+v, want invoices cleared", recs)
	}
}

// TestStopRecordsNothingStopped: no table stopped, nothing written.
func TestStopRecordsNothingStopped(t *testing.T) {
	r := newStopRecords(Config{})
	w := &fakeStopWriter{}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	watchStopped(ctx, r, w, 10*time.Millisecond, prometheus.NewCounter(prometheus.CounterOpts{Name: "x"}), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if _, n := w.last(); n != 0 {
		t.Errorf("%d writes with no table stopped", n)
	}
	if r.loader == "" {
		t.Error("a loader without an instance id has no name")
	}
}
