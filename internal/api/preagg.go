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
)

// maxPreaggLag is how far behind the table the pre-aggregates may be and
// still answer: beyond it (an aggregator stopped or slow), the live query
// does.
const maxPreaggLag = 30 * time.Second

// preaggTTL is how long a read of the pre-aggregates' state is reused.
// Rounds run every second or more, and an older state only makes the
// answer's freshness more conservative: the blocks it reads are at least as
// new as the state says.
const preaggTTL = 250 * time.Millisecond

// preaggCache holds the last read of one table's pre-aggregate state and
// ring version.
type preaggCache struct {
	mu    sync.Mutex
	at    time.Time
	table string
	st    *query.PreaggState
	ring  int64
}

// get returns the state and the ring version in force, read at most
// preaggTTL ago.
func (c *preaggCache) get(ctx context.Context, q *query.Queries, table string) (*query.PreaggState, int64, error) {
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

// preaggFreshness returns the pre-aggregates' freshness when they can
// answer req — an eligible request without after=, pre-aggregates computed
// under the ring version in force, covering every shard of live and at
// most maxPreaggLag behind it — or nil.
func (s *Server) preaggFreshness(r *http.Request, table string, req query.RevenueRequest, live []query.ShardFreshness) []query.ShardFreshness {
	if !query.PreaggEligible(req) || r.URL.Query().Has("after") || len(live) == 0 {
		return nil
	}
	st, ring, err := s.preagg.get(r.Context(), s.q, table)
	if err != nil {
		s.log.Warn("pre-aggregate state unreadable; answering live", slog.Any("err", err))
		return nil
	}
	if st == nil || ring != st.RingVersion {
		return nil // none yet, or computed under other ownership (a cutover not caught up with)
	}
	byShard := map[int]query.ShardFreshness{}
	for _, f := range st.Freshness {
		byShard[f.Shard] = f
	}
	for _, f := range live {
		p, ok := byShard[f.Shard]
		if !ok || !f.Complete || f.CommitTS.Sub(p.CommitTS) > maxPreaggLag {
			return nil
		}
	}
	return st.Freshness
}
