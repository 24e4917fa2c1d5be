package api

// Revenue from the pre-aggregates (internal/query/preagg.go): whether they
// may answer a request, and with which freshness.

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/tributary/tributary/internal/query"
	"github.com/tributary/tributary/internal/revenueblocks"
)

// maxDirtyBlocks bounds the live delta: with more blocks changed since
// the aggregator's last round (an aggregator stopped or far behind), the
// live query answers instead.
const maxDirtyBlocks = 2000

// preaggTTL is how long a read of the pre-aggregates' state is reused.
// An older state only widens the live delta: the blocks marked after it
// are read from the table whatever the state, so answers stay exact.
const preaggTTL = 250 * time.Millisecond

// preaggCache holds the last read of one table's pre-aggregate state and
// ring version.
type preaggCache struct {
	mu    sync.Mutex
	at    time.Time
	table string
	st    *revenueblocks.State
	ring  int64
}

// get returns the state and the ring version in force, read at most
// preaggTTL ago.
func (c *preaggCache) get(ctx context.Context, q *query.Queries, table string) (*revenueblocks.State, int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.table == table && time.Since(c.at) < preaggTTL {
		return c.st, c.ring, nil
	}
	at := time.Now()
	st, err := q.ReadPreaggState(ctx, table)
	if err != nil {
		return nil, 0, err
	}
	ring, err := q.RingVersion(ctx, table)
	if err != nil {
		return nil, 0, err
	}
	c.at, c.table, c.st, c.ring = at, table, st, ring
	return st, ring, nil
}

// preaggRead says how the pre-aggregates answer req, or nil when they
// cannot: req must be eligible, the state computed under the ring version
// in force and a known block layout, cover every shard of live, and the
// blocks marked since it (read now, after live was read: every row up to
// live's watermarks has its mark visible) must be few enough to read
// live. The answer is then exact at live's watermarks, like the live
// query's.
func (s *Server) preaggRead(r *http.Request, table, idColumn string, req query.RevenueRequest, live []query.ShardFreshness) *query.PreaggRead {
	if !query.PreaggEligible(req) || len(live) == 0 {
		return nil
	}
	st, ring, err := s.preagg.get(r.Context(), s.q, table)
	if err != nil {
		s.log.Warn("pre-aggregate state unreadable; answering live", slog.Any("err", err))
		return nil
	}
	if st == nil || ring != st.RingVersion || st.Kind == "" || st.Bits <= 0 {
		return nil // none yet, computed under other ownership (a cutover not caught up with), or an unknown layout
	}
	byShard := map[int]bool{}
	for _, f := range st.Shards {
		byShard[f.Shard] = true
	}
	for _, f := range live {
		if !byShard[f.Shard] || !f.Complete {
			return nil
		}
	}
	dirty, all, err := s.q.PreaggDirty(r.Context(), table, st, maxDirtyBlocks)
	if err != nil {
		s.log.Warn("revenue marks unreadable; answering live", slog.Any("err", err))
		return nil
	}
	if all {
		return nil
	}
	return &query.PreaggRead{IDColumn: idColumn, Kind: st.Kind, Bits: st.Bits, Dirty: dirty}
}
