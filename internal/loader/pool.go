package loader

import (
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// decompressPool reuses the buffers franz-go decompresses fetched record
// batches into (kgo.WithPools): a batch's decompressed bytes are about as
// many as its JSON, the largest allocation per change, and without a pool
// each one is new garbage that brings the next GC cycle closer.
//
// A buffer goes back into the pool only when every record decoded from it
// was recycled (kgo.Record.Recycle), which recycle does once a batch's tail
// has ended (tail.go): the batch's rows are then in ClickHouse, its offsets
// committed, and nothing the loader keeps refers to its records' bytes —
// what outlives a batch is cloned from them (the version map's and image
// cache's keys and values, placed shard keys, the ids the duplicate check
// reads, the Decoder's column list). A record that is never recycled (a
// batch that failed, a paused or stopped table's records) is collected as
// before.
type decompressPool struct{ p sync.Pool }

// GetDecompressBytes implements kgo.PoolDecompressBytes. A buffer too
// small for the batch is grown by franz-go, and the grown one comes back.
func (d *decompressPool) GetDecompressBytes([]byte, kgo.CompressionCodecType) []byte {
	if b, ok := d.p.Get().(*[]byte); ok {
		return *b
	}
	return nil
}

// PutDecompressBytes implements kgo.PoolDecompressBytes.
func (d *decompressPool) PutDecompressBytes(b []byte) {
	b = b[:0]
	d.p.Put(&b)
}

// recycle hands the records' decompressed bytes back to the pool.
func recycle(recs []*kgo.Record) {
	for _, r := range recs {
		r.Recycle()
	}
}
