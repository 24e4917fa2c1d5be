package dedupe

import (
	"strconv"
	"testing"
)

// BenchmarkVersions is the loader's per-change use of the version map at
// bench loader's 5M/1M scale: a Stale check, then Written, over a million
// keys in random order (each lookup of the map a cache miss). The ids are
// laid out in the order they are used, like the records of a batch.
func BenchmarkVersions(b *testing.B) {
	const keys, n = 1 << 20, 1 << 21
	var buf []byte
	ends := make([]int, n)
	for i := range n {
		buf = strconv.AppendInt(buf, 734197815705617408+int64((i*40503)%keys), 10)
		ends[i] = len(buf)
	}
	all := string(buf)
	v := NewVersions(1 << 20) // the loader's default
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		j := i % n
		start := 0
		if j > 0 {
			start = ends[j-1]
		}
		k := Key{Table: "docs", ID: all[start:ends[j]], Shard: i % 4}
		if !v.Stale(k, uint64(i)) {
			v.Written(k, uint64(i))
		}
		i++
	}
}
