package envelope

import (
	"strconv"
	"testing"
	"time"
)

// bulkRecords are envelopes shaped like bench loader's (bench/loader/loader.go):
// five columns, no escapes, 80 % updates and 20 % deletes after inserts.
func bulkRecords(n int) [][]byte {
	cols := []Column{{Name: "id", Type: "bigint", OID: 20, Key: true}, {Name: "workspace_id", Type: "bigint", OID: 20},
		{Name: "title", Type: "text", OID: 25}, {Name: "amount", Type: "numeric(12,2)", OID: 1700},
		{Name: "created_at", Type: "timestamp with time zone", OID: 1184}}
	var enc Encoder
	out := make([][]byte, n)
	for i := range out {
		id := strconv.Itoa(734197815705617408 + i)
		lsn := LSN(0x1000000 + 64*i)
		ev := &Event{Kind: KindChange, Shard: i % 4, Schema: "public", Table: "docs", ID: id, LSN: lsn, CommitLSN: lsn + 32,
			CommitTime: time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC), Columns: cols}
		switch i % 5 {
		case 0:
			ev.Op = OpDelete
			ev.Before = map[string]*string{"id": &id}
		default:
			ev.Op = OpUpdate
			if i%10 == 1 {
				ev.Op = OpInsert
			}
			ws, title, amt, ts := strconv.Itoa(i%1000), "title "+strconv.Itoa(i), strconv.Itoa(i%100000)+".42", "2026-11-30 12:00:00.123456+00"
			ev.After = map[string]*string{"id": &id, "workspace_id": &ws, "title": &title, "amount": &amt, "created_at": &ts}
		}
		out[i] = enc.Append(nil, ev)
	}
	return out
}

// BenchmarkDecoderBulk decodes bench loader's envelopes, as the loader's
// decoders do in bulk.
func BenchmarkDecoderBulk(b *testing.B) {
	recs := bulkRecords(1000)
	var d Decoder
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := d.Decode(recs[i%len(recs)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
