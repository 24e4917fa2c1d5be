package loader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/tables"
)

// syncFake records the order of the replica wait and the watermark write.
type syncFake struct {
	store
	calls  []string
	events []chstore.ReplicaEvent // reported by SyncReplicas
	during func()                 // called once they are, before it returns
}

func (f *syncFake) SyncReplicas(_ context.Context, names []string, report func(chstore.ReplicaEvent)) error {
	for _, e := range f.events {
		report(e)
	}
	f.during()
	f.calls = append(f.calls, fmt.Sprint("sync ", names))
	return nil
}

func (f *syncFake) WriteWatermarks(_ context.Context, ws []chstore.Watermark) error {
	f.calls = append(f.calls, fmt.Sprint("write ", len(ws)))
	return nil
}

// TestWatermarksAfterReplicas: a batch's watermarks are written after the
// wait for the replicas of their tables (each table once); a replica that
// did not answer is counted, and one reported behind is 1 on the stalled
// gauge only while the wait lasts.
func TestWatermarksAfterReplicas(t *testing.T) {
	tc := &tables.Config{Tables: []tables.Table{{Name: "docs", Topic: "t.docs"}, {Name: "orders", Topic: "t.orders"}}}
	r1 := chstore.Node{Shard: 1, Replica: 1, Addr: "n1:9000"}
	r2 := chstore.Node{Shard: 1, Replica: 2, Addr: "n2:9000"}
	f := &syncFake{events: []chstore.ReplicaEvent{
		{Node: r2, Unreachable: errors.New("connection refused")},
		{Node: r1, Behind: "1 parts to fetch"},
	}}
	value := func(c prometheus.Metric) float64 {
		var m dto.Metric
		if err := c.Write(&m); err != nil {
			t.Fatal(err)
		}
		if m.Counter != nil {
			return m.Counter.GetValue()
		}
		return m.Gauge.GetValue()
	}
	l := &Loader{cfg: Config{Tables: tc}, store: f, log: slog.New(slog.DiscardHandler), m: newMetrics(prometheus.NewRegistry(), tc, nil)}
	var stalledDuring float64
	f.during = func() { stalledDuring = value(l.m.replicaStalled.WithLabelValues("1", "1")) }
	wms := []chstore.Watermark{{Topic: "t.docs", Partition: 0}, {Topic: "t.docs", Partition: 1}, {Topic: "t.orders"}}
	if err := l.watermarkWrite(context.Background(), wms)(); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(f.calls), "[sync [docs orders] write 3]"; got != want {
		t.Errorf("calls %s, want %s", got, want)
	}
	if n := value(l.m.replicasSkipped.WithLabelValues("1", "2")); n != 1 {
		t.Errorf("skipped replica 2 counted %v times, want 1", n)
	}
	if stalledDuring != 1 {
		t.Errorf("stalled gauge of replica 1 is %v while the wait lasts, want 1", stalledDuring)
	}
	if v := value(l.m.replicaStalled.WithLabelValues("1", "1")); v != 0 {
		t.Errorf("stalled gauge of replica 1 is %v once the wait ended, want 0", v)
	}
}

// TestLogSkip: a node skipped in every batch is logged once, then again
// only after chstore.ReplicaWaitStall; each node on its own.
func TestLogSkip(t *testing.T) {
	var l Loader
	t0 := time.Now()
	for _, c := range []struct {
		node string
		at   time.Duration
		want bool
	}{
		{"n2", 0, true},
		{"n2", time.Second, false},
		{"n3", time.Second, true},
		{"n2", chstore.ReplicaWaitStall - time.Millisecond, false},
		{"n2", chstore.ReplicaWaitStall, true},
	} {
		if got := l.logSkip(c.node, t0.Add(c.at)); got != c.want {
			t.Errorf("logSkip(%s, +%s) = %v, want %v", c.node, c.at, got, c.want)
		}
	}
}
