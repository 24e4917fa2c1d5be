package loader

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/tributary/tributary/internal/tables"
)

// TestLagCountsOnlyRecordsOneSampleOld is the ordering a converged
// pipeline meets all the time: a reader's watermark round lands in every
// partition just before the sample lists the end offsets, and the loader
// commits it just after. Measured against the commits of the next sample,
// that round is no lag; a record that is still not committed then is.
func TestLagCountsOnlyRecordsOneSampleOld(t *testing.T) {
	const topic = "t.docs"
	committedAt := func(offs map[int32]int64) kadm.OffsetResponses {
		out := kadm.OffsetResponses{topic: {}}
		for p, o := range offs {
			out[topic][p] = kadm.OffsetResponse{Offset: kadm.Offset{Topic: topic, Partition: p, At: o}}
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		listed    listedRange // start and end at the previous sample
		committed kadm.OffsetResponses
		want      map[topicPart]int64
	}{
		{
			// Ends 41 and 7 were listed with a round in flight (the
			// commits then were 40 and 6); by now the loader committed it.
			name:      "round in flight at the listing, committed since",
			listed:    listedRange{{topic, 0}: {0, 41}, {topic, 1}: {0, 7}},
			committed: committedAt(map[int32]int64{0: 41, 1: 7}),
			want:      map[topicPart]int64{{topic, 0}: 0, {topic, 1}: 0},
		},
		{
			// More rounds came after the listing and are not committed
			// yet: not lag until they are one sample old.
			name:      "newer records than the listing",
			listed:    listedRange{{topic, 0}: {0, 41}},
			committed: committedAt(map[int32]int64{0: 41}),
			want:      map[topicPart]int64{{topic, 0}: 0},
		},
		{
			name:      "behind: what was listed and is still not committed",
			listed:    listedRange{{topic, 0}: {0, 1000}, {topic, 1}: {0, 50}},
			committed: committedAt(map[int32]int64{0: 400, 1: 50}),
			want:      map[topicPart]int64{{topic, 0}: 600, {topic, 1}: 0},
		},
		{
			name:      "committed past the listing",
			listed:    listedRange{{topic, 0}: {0, 41}},
			committed: committedAt(map[int32]int64{0: 45}),
			want:      map[topicPart]int64{{topic, 0}: 0},
		},
		{
			name:      "never committed: all of it from the start",
			listed:    listedRange{{topic, 0}: {10, 25}},
			committed: kadm.OffsetResponses{},
			want:      map[topicPart]int64{{topic, 0}: 15},
		},
		{
			name:      "commit below what retention kept",
			listed:    listedRange{{topic, 0}: {100, 130}},
			committed: committedAt(map[int32]int64{0: 20}),
			want:      map[topicPart]int64{{topic, 0}: 30},
		},
		{
			name:   "a commit that could not be read has no reading",
			listed: listedRange{{topic, 0}: {0, 41}, {topic, 1}: {0, 9}},
			committed: kadm.OffsetResponses{topic: {
				0: {Offset: kadm.Offset{Topic: topic, Partition: 0, At: 41}},
				1: {Offset: kadm.Offset{Topic: topic, Partition: 1}, Err: errors.New("not coordinator")},
			}},
			want: map[topicPart]int64{{topic, 0}: 0},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.listed.lag(tc.committed)
			if len(got) != len(tc.want) {
				t.Fatalf("lag = %v, want %v", got, tc.want)
			}
			for p, w := range tc.want {
				if g, ok := got[p]; !ok || g != w {
					t.Errorf("lag of %s/%d = %d (present %v), want %d", p.topic, p.part, g, ok, w)
				}
			}
		})
	}
}

// roundsInFlight is a Kafka where a reader's watermark round lands in
// every partition just before each listing of the end offsets, and the
// loader commits it right after: at every listing, each partition's end is
// one past its commit; by the next, that round is committed.
type roundsInFlight struct {
	topic string
	parts int32
	mu    sync.Mutex
	end   int64 // every partition's end offset after the last listing
	lists int
}

func (f *roundsInFlight) FetchOffsets(context.Context, string) (kadm.OffsetResponses, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := kadm.OffsetResponses{f.topic: {}}
	for p := range f.parts {
		out[f.topic][p] = kadm.OffsetResponse{Offset: kadm.Offset{Topic: f.topic, Partition: p, At: f.end}}
	}
	return out, nil
}

func (f *roundsInFlight) ListStartOffsets(_ context.Context, topics ...string) (kadm.ListedOffsets, error) {
	return f.listed(topics, func() int64 { return 0 }), nil
}

func (f *roundsInFlight) ListEndOffsets(_ context.Context, topics ...string) (kadm.ListedOffsets, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.end++ // the next round, not committed yet
	f.lists++
	end := f.end
	return f.listed(topics, func() int64 { return end }), nil
}

func (f *roundsInFlight) listed(topics []string, at func() int64) kadm.ListedOffsets {
	out := kadm.ListedOffsets{}
	for _, t := range topics {
		out[t] = map[int32]kadm.ListedOffset{}
		for p := range f.parts {
			out[t][p] = kadm.ListedOffset{Topic: t, Partition: p, Offset: at()}
		}
	}
	return out
}

// TestWatchLagZeroWithRoundsInFlight samples 20 times from that Kafka:
// the metric reads 0 on every partition, sample after sample.
func TestWatchLagZeroWithRoundsInFlight(t *testing.T) {
	tc, err := tables.Parse([]byte(`{"topic_prefix":"t.","tables":[{"name":"docs","id_column":"id","id_layout":"seed000"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	l := &Loader{
		cfg: Config{Tables: tc, Group: "g", LagInterval: 5 * time.Millisecond},
		log: slog.New(slog.DiscardHandler), m: newMetrics(reg, tc, nil),
	}
	kafka := &roundsInFlight{topic: tc.Topics()[0], parts: 4}
	for range 20 {
		if err := l.sampleLag(context.Background(), kafka); err != nil {
			t.Fatal(err)
		}
	}
	for p := range kafka.parts {
		g, err := l.m.lag.GetMetricWithLabelValues(kafka.topic, strconv.Itoa(int(p)))
		if err != nil {
			t.Fatal(err)
		}
		var m dto.Metric
		if err := g.Write(&m); err != nil {
			t.Fatal(err)
		}
		if v := m.GetGauge().GetValue(); v != 0 {
			t.Errorf("partition %d: lag %g after %d samples with a round in flight at each, want 0", p, v, kafka.lists)
		}
	}
}
