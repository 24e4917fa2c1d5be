package loader

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/envelope"
)

// TestFreshnessAccounting: each watermark record written is counted once
// in every stage, with the spans between its commit, its Kafka timestamp,
// the poll that fetched it, the hand-over, the insert and the watermark
// write; the stages add up to the delay; records of skipped topics,
// changes and undecodable records are not counted.
func TestFreshnessAccounting(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	wm := func(commitMS int) decodeResult {
		return decodeResult{ev: &envelope.Event{Kind: envelope.KindWatermark, CommitTime: at(commitMS)}}
	}
	b := &polled{
		recs: []*kgo.Record{
			{Topic: "a", Timestamp: at(1)},  // a change
			{Topic: "a", Timestamp: at(10)}, // watermark, first poll
			{Topic: "a", Timestamp: at(12)}, // watermark, second poll
			{Topic: "b", Timestamp: at(20)}, // watermark of a skipped topic
			{Topic: "a", Timestamp: at(21)}, // undecodable
		},
		decoded: []decodeResult{
			{ev: &envelope.Event{Kind: envelope.KindChange}},
			wm(4), wm(5), wm(8),
			{err: envelope.ErrUnsupportedVersion},
		},
		polls: []pollMark{{n: 2, at: at(30)}, {n: 5, at: at(35)}},
	}
	c := collectClock(b, at(50), at(80), func(topic string) bool { return topic == "b" })
	want := []wmClock{{at(4), at(10), at(30)}, {at(5), at(12), at(35)}}
	if len(c.wms) != len(want) {
		t.Fatalf("clock has %d watermark records, want %d: %+v", len(c.wms), len(want), c.wms)
	}
	for i, w := range want {
		if c.wms[i] != w {
			t.Errorf("watermark record %d: %+v, want %+v", i, c.wms[i], w)
		}
	}

	reg := prometheus.NewRegistry()
	f := newFreshness(reg)
	f.observe(c, at(100))
	f.observe(batchClock{handed: at(0), inserted: at(1)}, at(2)) // no watermark records: nothing
	// ms summed over the two records.
	wantSum := map[string]float64{
		freshReader:    (10 - 4) + (12 - 5),
		freshKafka:     (30 - 10) + (35 - 12),
		freshBatch:     (50 - 30) + (50 - 35),
		freshInsert:    2 * (80 - 50),
		freshWatermark: 2 * (100 - 80),
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var stagesTotal, delayTotal float64
	seen := 0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			switch mf.GetName() {
			case "tributary_loader_freshness_seconds":
				stage := label(m, "stage")
				seen++
				if h.GetSampleCount() != 2 {
					t.Errorf("stage %s: %d observations, want 2", stage, h.GetSampleCount())
				}
				if got := h.GetSampleSum() * 1000; !near(got, wantSum[stage]) {
					t.Errorf("stage %s: %.3f ms in all, want %.0f", stage, got, wantSum[stage])
				}
				stagesTotal += h.GetSampleSum()
			case "tributary_loader_watermark_delay_seconds":
				if got, want := h.GetSampleSum()*1000, float64((100-4)+(100-5)); h.GetSampleCount() != 2 || !near(got, want) {
					t.Errorf("delay: %d observations, %.3f ms, want 2 and %.0f", h.GetSampleCount(), got, want)
				}
				delayTotal = h.GetSampleSum()
			}
		}
	}
	if !near(stagesTotal, delayTotal) {
		t.Errorf("stages add up to %.3f s, the delay is %.3f s", stagesTotal, delayTotal)
	}
	if seen != len(freshStages) {
		t.Errorf("%d stages exported, want %d", seen, len(freshStages))
	}

	// A clock that runs backwards between hosts counts 0, not a negative span.
	reg = prometheus.NewRegistry()
	f = newFreshness(reg)
	f.observe(batchClock{wms: []wmClock{{at(10), at(5), at(20)}}, handed: at(20), inserted: at(20)}, at(20))
	if got := testHistogramSum(t, reg, freshReader); got != 0 {
		t.Errorf("reader stage with the record produced before its commit: %v s, want 0", got)
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func near(a, b float64) bool { return a-b < 1e-6 && b-a < 1e-6 }

// testHistogramSum is the sum of tributary_loader_freshness_seconds{stage}.
func testHistogramSum(t *testing.T, reg *prometheus.Registry, stage string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "tributary_loader_freshness_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label(m, "stage") == stage {
				return m.GetHistogram().GetSampleSum()
			}
		}
	}
	t.Fatalf("no stage %s", stage)
	return 0
}
