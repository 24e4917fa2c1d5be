package loader

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/tables"
)

// pollLoader is a Loader with only what poll and handOver use.
func pollLoader(t *testing.T, wait time.Duration, maxRecords int) *Loader {
	t.Helper()
	return &Loader{
		cfg: Config{BatchRecords: maxRecords, BatchBytes: 1 << 20, BatchWait: wait},
		log: slog.New(slog.DiscardHandler), m: newMetrics(prometheus.NewRegistry(), &tables.Config{}, nil),
		decoders: []*envelope.Decoder{{}},
	}
}

// fakeTopic starts an in-memory broker with one topic of two partitions
// holding n records, and a consumer of it.
func fakeTopic(t *testing.T, n int) *kgo.Client {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range n {
		if err := prod.ProduceSync(ctx, &kgo.Record{Key: []byte{byte(i)}, Value: []byte("{}")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("t"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cons.Close)
	return cons
}

// TestHandOverWithNothingMoreBuffered: with the applier ready, a batch is
// handed over once the client has nothing more buffered, however long
// BatchWait is — a batch used to wait for BatchWait after its first record.
func TestHandOverWithNothingMoreBuffered(t *testing.T) {
	const n = 5
	cl := fakeTopic(t, n)
	l := pollLoader(t, time.Hour, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := make(chan polled, 1) // the applier is ready
	got := 0
	for got < n {
		f, err := l.poll(ctx, cl)
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		b := polled{recs: f.recs, decoded: l.decodeAll(f.recs)}
		if !l.handOver(ctx, cl, f, &b, out) {
			t.Fatalf("no batch handed over before the test's deadline (%d of %d records)", got, n)
		}
		b = <-out
		if len(b.recs) == 0 || len(b.decoded) != len(b.recs) {
			t.Fatalf("batch of %d records with %d decoded", len(b.recs), len(b.decoded))
		}
		got += len(b.recs)
	}
	if got != n {
		t.Fatalf("%d records handed over, want %d", got, n)
	}
}

// TestHasWatermark: only a decoded watermark record counts; changes and
// records that failed to decode do not.
func TestHasWatermark(t *testing.T) {
	wm := decodeResult{ev: &envelope.Event{Kind: envelope.KindWatermark}}
	ch := decodeResult{ev: &envelope.Event{Kind: envelope.KindChange}}
	bad := decodeResult{err: context.Canceled}
	for _, tc := range []struct {
		name string
		ds   []decodeResult
		want bool
	}{
		{"none", nil, false},
		{"changes only", []decodeResult{ch, ch}, false},
		{"undecodable", []decodeResult{bad}, false},
		{"watermark after changes", []decodeResult{ch, bad, wm}, true},
	} {
		if got := hasWatermark(tc.ds); got != tc.want {
			t.Errorf("%s: hasWatermark = %v, want %v", tc.name, got, tc.want)
		}
	}
}
