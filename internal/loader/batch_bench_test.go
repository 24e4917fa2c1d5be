package loader

import (
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/envelope"
)

// benchBatch is a decoded batch of n changes of the notes table
// (steps_test.go) in one partition, as the poller hands one over.
func benchBatch(b *testing.B, l *Loader, n int) ([]*kgo.Record, []decodeResult) {
	b.Helper()
	var enc envelope.Encoder
	recs := make([]*kgo.Record, n)
	for i := range recs {
		id, title, body := strconv.Itoa(i), "title "+strconv.Itoa(i), "body"
		lsn := envelope.LSN(0x1000000 + 64*i)
		ev := &envelope.Event{Kind: envelope.KindChange, Schema: "public", Table: "notes", Op: envelope.OpUpdate, ID: id,
			LSN: lsn, CommitLSN: lsn + 32, CommitTime: time.Unix(1700000000, 0).UTC(), Columns: noteColumns,
			After: map[string]*string{"id": &id, "title": &title, "body": &body}}
		recs[i] = &kgo.Record{Topic: "unit.notes", Key: []byte(id), Value: enc.Append(nil, ev), Offset: int64(i)}
	}
	decoded := l.decodeAll(recs)
	for _, d := range decoded {
		if d.err != nil {
			b.Fatal(d.err)
		}
	}
	return recs, decoded
}

// BenchmarkSortBatch sorts a batch's records by table, as every batch
// is before it is converted (ns/op is per record).
func BenchmarkSortBatch(b *testing.B) {
	l := stepLoader(b, newFakeStore(), 0)
	recs, decoded := benchBatch(b, l, 10000)
	b.ReportAllocs()
	for b.Loop() {
		l.sortBatch(recs, decoded)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
}

// BenchmarkConvertAll converts a batch's changes into a block on every
// core, as every batch is before it is inserted.
func BenchmarkConvertAll(b *testing.B) {
	l := stepLoader(b, newFakeStore(), 0)
	recs, decoded := benchBatch(b, l, 10000)
	cs := l.sortBatch(recs, decoded).byTable["notes"]
	t, err := l.ensureSchema(b.Context(), "notes", []string{"id"}, cs)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		l.convertAll(t, []string{"id"}, cs, time.Now())
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(cs)), "ns/change")
}
