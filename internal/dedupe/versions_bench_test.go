package dedupe

import (
	"strconv"
	"testing"
)

// BenchmarkVersions is the loader's per-change use of the version map at
// bench loader's 5M/1M scale: a Stale check, then Written, over a million
// keys (each lookup a cache miss).
func BenchmarkVersions(b *testing.B) {
	const keys = 1 << 20
	ids := make([]string, keys)
	for i := range ids {
		ids[i] = strconv.Itoa(734197815705617408 + i*7919%keys)
	}
	v := NewVersions(1 << 20) // the loader's default
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := Key{Table: "docs", ID: ids[(i*40503)%keys], Shard: i % 4}
		if !v.Stale(k, uint64(i)) {
			v.Written(k, uint64(i))
		}
		i++
	}
}
