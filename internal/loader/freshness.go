package loader

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/envelope"
)

// Where a shard's freshness goes, stage by stage. Read-your-writes waits
// for a watermark record (internal/reader publishes one per partition once
// Kafka acknowledged a commit), so each watermark record written is timed
// along its way, from the commit it covers to its row in ClickHouse:
//
//	reader     commit on the shard → the reader produced the record (its Kafka timestamp)
//	kafka      produced → polled by this loader (Kafka, the fetch, franz-go's buffer)
//	batch      polled → its batch handed to the applier (the batch growing, decoding)
//	insert     handed over → the batch's rows inserted in ClickHouse
//	watermark  inserted → the watermark written (dead letters, the previous tail, the write)
//
// The stages chain: their sum is tributary_loader_watermark_delay_seconds,
// the commit → watermark written delay of that record. reader and kafka
// compare clocks of two hosts (the shard's, the reader's and this
// loader's): a skew between them moves time from one to the other, and a
// negative span is counted as 0.
const (
	freshReader    = "reader"
	freshKafka     = "kafka"
	freshBatch     = "batch"
	freshInsert    = "insert"
	freshWatermark = "watermark"
)

// freshStages are the stage labels of tributary_loader_freshness_seconds.
var freshStages = []string{freshReader, freshKafka, freshBatch, freshInsert, freshWatermark}

// pollMark says that the records of a batch before index n (and after the
// previous mark's) were polled at at.
type pollMark struct {
	n  int
	at time.Time
}

// markPoll notes, after a poll appended to f, when its records arrived.
func (f *fill) markPoll(n int) {
	if len(f.recs) > n {
		f.polls = append(f.polls, pollMark{n: len(f.recs), at: time.Now()})
	}
}

// wmClock is one watermark record's times before its batch was handed over.
type wmClock struct {
	commit, produced, polled time.Time
}

// batchClock is a batch's times, for the freshness histograms.
type batchClock struct {
	wms      []wmClock
	handed   time.Time // the applier took the batch
	inserted time.Time // its rows were in ClickHouse
}

// clockOf is the clock of batch b, handed over and inserted at those
// times: the watermark records apply wrote (not those of stopped tables).
func (l *Loader) clockOf(b *polled, handed, inserted time.Time) batchClock {
	return collectClock(b, handed, inserted, func(topic string) bool {
		t, ok := l.cfg.Tables.ByTopic(topic)
		if !ok {
			return true
		}
		_, stopped := l.stopped[t.Name]
		return stopped
	})
}

// collectClock collects the times of b's watermark records; skip says
// which topics' records are not written.
func collectClock(b *polled, handed, inserted time.Time, skip func(topic string) bool) batchClock {
	c := batchClock{handed: handed, inserted: inserted}
	m := 0
	for i, d := range b.decoded {
		for m < len(b.polls) && b.polls[m].n <= i {
			m++
		}
		if d.err != nil || d.ev == nil || d.ev.Kind != envelope.KindWatermark || m == len(b.polls) {
			continue
		}
		r := b.recs[i]
		if skip != nil && skip(r.Topic) {
			continue
		}
		c.wms = append(c.wms, wmClock{commit: d.ev.CommitTime, produced: r.Timestamp, polled: b.polls[m].at})
	}
	return c
}

// freshness are the loader's freshness histograms.
type freshness struct {
	stages *prometheus.HistogramVec // stage
	delay  prometheus.Histogram
}

func newFreshness(reg prometheus.Registerer) freshness {
	buckets := prometheus.ExponentialBuckets(0.0005, 2, 16) // 0.5 ms .. 16 s
	f := freshness{
		stages: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tributary_loader_freshness_seconds", Buckets: buckets,
			Help: "Time a watermark record spent in each stage from the shard's commit to its row in ClickHouse (reader, kafka, batch, insert, watermark; internal/loader/freshness.go), one observation per watermark record written.",
		}, []string{"stage"}),
		delay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tributary_loader_watermark_delay_seconds", Buckets: buckets,
			Help: "Commit on the shard to the watermark that covers it written in ClickHouse, per watermark record: the earliest a read-your-writes read of that commit can answer.",
		}),
	}
	for _, s := range freshStages {
		f.stages.WithLabelValues(s)
	}
	reg.MustRegister(f.stages, f.delay)
	return f
}

// observe counts c's watermark records, written at written: each record
// once in every stage (insert and watermark are spans of the whole batch,
// shared by its records), so the stages have as many observations and
// their sum is the delay.
func (f freshness) observe(c batchClock, written time.Time) {
	span := func(from, to time.Time) float64 { return max(0, to.Sub(from).Seconds()) }
	for _, w := range c.wms {
		f.stages.WithLabelValues(freshReader).Observe(span(w.commit, w.produced))
		f.stages.WithLabelValues(freshKafka).Observe(span(w.produced, w.polled))
		f.stages.WithLabelValues(freshBatch).Observe(span(w.polled, c.handed))
		f.stages.WithLabelValues(freshInsert).Observe(span(c.handed, c.inserted))
		f.stages.WithLabelValues(freshWatermark).Observe(span(c.inserted, written))
		f.delay.Observe(span(w.commit, written))
	}
}

// timeWatermarks makes bt's watermark write observe c once it is done.
func (f freshness) timeWatermarks(bt *batchTail, c batchClock) {
	if bt.watermarks == nil || len(c.wms) == 0 {
		return
	}
	write := bt.watermarks
	bt.watermarks = func() error {
		if err := write(); err != nil {
			return err
		}
		f.observe(c, time.Now())
		return nil
	}
}
