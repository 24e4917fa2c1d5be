package tests

import (
	"context"
	"testing"
	"time"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/loader"
)

// TestDetectionCountedOnce: an anomaly past the grace period is counted
// once in tributary_duplicate_detections_total and marked alerted. When
// the partition owner's state write, read before the marking, then lands
// and drops the flag (the race TestAlertCannotUndoResolution allows for),
// the next evaluation marks it again without counting a second detection.
func TestDetectionCountedOnce(t *testing.T) {
	p := setupPipeline(t, []int{0, 1}, nil, true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	t.Cleanup(func() { stop(); p.wg.Wait() })
	// The loader's store creates the anomaly and watermark tables.
	reg := p.startMeteredLoader(runCtx, "l1", func(c *loader.Config) { c.DuplicateGrace = time.Second })

	now := time.Now().UTC().Truncate(time.Second)
	labels := map[string]string{"table": p.table(), "kind": chstore.KindDuplicate}
	count := func() float64 { v, _ := metricOf(t, reg, "tributary_duplicate_detections_total", labels); return v }
	read := func() chstore.Anomaly {
		got, err := p.store.Anomalies(ctx, p.table(), []string{"42"}, false)
		if err != nil {
			t.Fatal(err)
		}
		return got["42"]
	}
	p.waitFor(ctx, 30*time.Second, "the loader's tables", func() bool {
		_, err := p.store.Anomalies(ctx, p.table(), []string{"42"}, false)
		return err == nil
	})
	// Both shards complete well past first_seen + grace.
	var ws []chstore.Watermark
	for _, s := range []uint16{0, 1} {
		ws = append(ws, chstore.Watermark{Topic: p.topic(), Partition: 0, Partitions: 1, Shard: s, CommitLSN: 1, CommitTS: now})
	}
	if err := p.store.WriteWatermarks(ctx, ws); err != nil {
		t.Fatal(err)
	}
	a := chstore.Anomaly{Table: p.table(), ID: "42", Kind: chstore.KindDuplicate, Shards: []uint16{0, 1},
		FirstSeen: now.Add(-time.Minute), LastSeen: now.Add(-time.Minute)}
	ownerRead := time.Now()
	if err := p.store.WriteAnomalies(ctx, ownerRead, []chstore.Anomaly{a}); err != nil {
		t.Fatal(err)
	}
	p.waitFor(ctx, 30*time.Second, "the anomaly alerted", func() bool { return read().Alerted })
	if got := count(); got != 1 {
		t.Fatalf("detections %v after the first alert, want 1", got)
	}

	// The owner's write, from a read before the marking, lands after it
	// with a newer version: the flag is gone.
	lost := read()
	lost.Alerted, lost.LastSeen = false, now
	if err := p.store.WriteAnomalies(ctx, time.Now(), []chstore.Anomaly{lost}); err != nil {
		t.Fatal(err)
	}
	if read().Alerted {
		t.Fatal("the owner's write did not replace the alerted state; the test shows nothing")
	}
	p.waitFor(ctx, 30*time.Second, "the anomaly alerted again", func() bool { return read().Alerted })
	time.Sleep(500 * time.Millisecond) // a few more evaluations (every 200 ms)
	if got := count(); got != 1 {
		t.Fatalf("detections %v after the flag was lost and set again, want 1 (one anomaly)", got)
	}
}
