package query

import (
	"time"

	"github.com/tributary/tributary/internal/envelope"
)

// FreshnessAt builds the freshness of one shard whose watermark is at lsn
// (committed at ts). Freshness computes it from the watermarks table; this
// is for callers that need one by hand (fakes in tests).
func FreshnessAt(shard int, lsn envelope.LSN, ts time.Time, complete bool) ShardFreshness {
	return ShardFreshness{Shard: shard, CommitLSN: lsn.String(), CommitTS: ts.UTC(), Complete: complete,
		Staleness: max(0, time.Since(ts).Seconds()), lsn: lsn}
}

// At is f with its staleness as of now (a reading served later than it
// was taken).
func (f ShardFreshness) At(now time.Time) ShardFreshness {
	f.Staleness = max(0, now.Sub(f.CommitTS).Seconds())
	return f
}
