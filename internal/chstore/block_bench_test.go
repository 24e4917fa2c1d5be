package chstore

import (
	"strconv"
	"testing"
	"time"

	"github.com/tributary/tributary/internal/envelope"
)

// BenchmarkBlockSet converts rows shaped like bench loader's (five columns:
// two bigints, text, numeric(12,2), timestamptz) into a block, as the
// loader's conversion does for every change.
func BenchmarkBlockSet(b *testing.B) {
	tab, err := Layout("docs", []string{"id"}, []envelope.Column{
		{Name: "id", Type: "bigint", Key: true}, {Name: "workspace_id", Type: "bigint"}, {Name: "title", Type: "text"},
		{Name: "amount", Type: "numeric(12,2)"}, {Name: "created_at", Type: "timestamp with time zone"},
	})
	if err != nil {
		b.Fatal(err)
	}
	const n = 1000
	rows := make([]*Row, n)
	for i := range rows {
		id, ws, title, amt, ts := strconv.Itoa(734197815705617408+i), strconv.Itoa(i%1000), "title "+strconv.Itoa(i),
			strconv.Itoa(i%100000)+".42", "2026-11-30 12:00:00.123456+00"
		rows[i] = &Row{Shard: uint16(i % 4), Version: uint64(i), CommitTS: time.Now(),
			Values: map[string]*string{"id": &id, "workspace_id": &ws, "title": &title, "amount": &amt, "created_at": &ts}}
	}
	blk := tab.NewBlock(n, time.Now())
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := blk.Set(i%n, rows[i%n]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
