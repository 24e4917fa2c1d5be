package api

// Read-your-writes. A client that wrote to shard S reads
// `SELECT pg_current_wal_lsn()` on that shard after its COMMIT returned
// (pg_current_wal_insert_lsn() when synchronous_commit is off: the write
// position may then still be before the commit record), and passes
// `after=S:X/Y` to any read. The API answers only once, for every named
// shard, the watermark of the topics the route reads is complete and at or
// past X/Y: every change the shard committed up to there is then in
// ClickHouse, so the client's write is in the answer.
//
// Waiting reads the watermarks again as soon as the last reading came back
// short (at most one query start per waitPoll): concurrent waiters share
// one query per topic set — a waiter joins the query in flight, which
// started after the reading it saw, or starts the next one — so the load
// on ClickHouse does not grow with the number of waiting clients, and a
// watermark written is seen within about one query's time, not a polling
// interval's. Reads without after= do not wait for
// a query at all: they take the newest shared reading (snapshot), and a
// reading older than pollInterval starts a refresh in the background for
// the next request. A watermark observed before the data is read is still
// a lower bound of what the data holds, so the answer stays exact; only
// its freshness is older, by at most maxSnapshotAge (an older reading, e.g.
// after an idle spell, is refreshed before the request goes on), and the
// staleness it states is computed when it is served. The wait is bounded by `wait=`
// (default 5 s, at most 30 s) and by the request timeout, less a reserve
// for the read itself. When it runs out the answer is 503 not_yet_visible
// with Retry-After and the named shards' current freshness. A named shard
// that no replicated table's watermarks know is a 400 unknown_shard at
// once (knownShards): waiting cannot make it appear.

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/query"
)

const (
	// defaultWait and maxWait bound wait=.
	defaultWait = 5 * time.Second
	maxWait     = 30 * time.Second
	// maxAfter bounds the after= positions of one request.
	maxAfter = 64
	// maxShard is the largest shard number (_shard is a UInt16).
	maxShard = math.MaxUint16
	// pollInterval is the age up to which a reading is shared without a
	// new query (a waiter's first look, a read without after=).
	pollInterval = 25 * time.Millisecond
	// waitPoll is the least time between the starts of two queries a
	// waiter makes: while clients wait, a topic set's watermarks are read
	// back to back, but not more often than this.
	waitPoll = 5 * time.Millisecond
	// maxSnapshotAge is the oldest reading a request without after= is
	// answered with without waiting for a new one.
	maxSnapshotAge = time.Second
)

// position is one after= token: shard S has committed up to LSN.
type position struct {
	Shard int          `json:"shard"`
	LSN   envelope.LSN `json:"lsn"`
}

// consistency is a parsed after=/wait= pair.
type consistency struct {
	after []position // sorted by shard, one per shard (the highest LSN)
	wait  time.Duration
}

// parseConsistency reads after= (repeatable and/or comma-separated S:X/Y)
// and wait= (a Go duration such as 500ms or 5s). Without after= the result
// has no positions and nothing is waited for.
func parseConsistency(v url.Values) (consistency, error) {
	c := consistency{wait: defaultWait}
	switch ws := v["wait"]; {
	case len(ws) > 1:
		return c, badRequest("bad_wait", "wait may be given once")
	case len(ws) == 1:
		d, err := time.ParseDuration(ws[0])
		if err != nil || d < 0 || d > maxWait {
			return c, badRequest("bad_wait", "wait %q is not a duration between 0s and %s (e.g. 500ms, 5s)", ws[0], maxWait)
		}
		c.wait = d
	}
	byShard := map[int]envelope.LSN{}
	n := 0
	for _, raw := range v["after"] {
		for _, tok := range strings.Split(raw, ",") {
			n++
			if n > maxAfter {
				return c, badRequest("bad_after", "at most %d after= positions", maxAfter)
			}
			p, err := parsePosition(strings.TrimSpace(tok))
			if err != nil {
				return c, err
			}
			byShard[p.Shard] = max(byShard[p.Shard], p.LSN)
		}
	}
	for s, lsn := range byShard {
		c.after = append(c.after, position{Shard: s, LSN: lsn})
	}
	sort.Slice(c.after, func(i, j int) bool { return c.after[i].Shard < c.after[j].Shard })
	return c, nil
}

// parsePosition parses S:X/Y: a decimal shard number and an LSN as
// pg_current_wal_lsn() prints it.
func parsePosition(tok string) (position, error) {
	const want = "after must be S:X/Y — a shard number and an LSN as pg_current_wal_lsn() returns it, e.g. 2:0/3000148"
	shard, lsn, ok := strings.Cut(tok, ":")
	if !ok || shard == "" || len(shard) > 5 {
		return position{}, badRequest("bad_after", "%s; got %q", want, clip(tok))
	}
	s, err := strconv.Atoi(shard)
	if err != nil || s < 0 || s > maxShard || strconv.Itoa(s) != shard {
		return position{}, badRequest("bad_after", "%s; shard %q is not a number in 0..%d", want, clip(shard), maxShard)
	}
	l, err := envelope.ParseLSN(lsn)
	if err != nil {
		return position{}, badRequest("bad_after", "%s; %q is not an LSN", want, clip(lsn))
	}
	return position{Shard: s, LSN: l}, nil
}

// clip shortens user input echoed in a message.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// reached reports whether fresh covers every position: the shard's
// watermark is complete and at or past the LSN.
func reached(fresh []query.ShardFreshness, after []position) bool {
	for _, p := range after {
		i := slices.IndexFunc(fresh, func(f query.ShardFreshness) bool { return f.Shard == p.Shard })
		if i < 0 || !fresh[i].Complete || fresh[i].LSN() < p.LSN {
			return false
		}
	}
	return true
}

// freshnessFunc reads the current freshness of topics (query.Queries.Freshness).
type freshnessFunc func(ctx context.Context, topics []string) ([]query.ShardFreshness, error)

// watermarkWatch shares watermark queries among concurrent waiters.
type watermarkWatch struct {
	fetch freshnessFunc
	// timeout bounds one shared query (it outlives any one request).
	timeout time.Duration
	flight  singleflight.Group

	mu   sync.Mutex
	last map[string]watchResult // by topic set; guarded by mu
}

type watchResult struct {
	at    time.Time
	fresh []query.ShardFreshness
}

// get returns the freshness of topics, at most pollInterval old.
func (w *watermarkWatch) get(ctx context.Context, topics []string) ([]query.ShardFreshness, error) {
	fresh, _, err := w.newer(ctx, topics, time.Now().Add(-pollInterval))
	return fresh, err
}

// newer returns a reading of topics whose query started after since, and
// when it started: the stored one if it is, else the query in flight
// (which started after the stored reading came back) or a new one.
func (w *watermarkWatch) newer(ctx context.Context, topics []string, since time.Time) ([]query.ShardFreshness, time.Time, error) {
	key := strings.Join(topics, "\x00")
	w.mu.Lock()
	r, ok := w.last[key]
	w.mu.Unlock()
	if ok && r.at.After(since) {
		return r.fresh, r.at, nil
	}
	return w.refreshAt(ctx, key, topics)
}

// snapshot returns the newest reading of topics without waiting for a
// query when there is one at most maxSnapshotAge old; a reading older than
// pollInterval is refreshed in the background. Staleness is as of now.
func (w *watermarkWatch) snapshot(ctx context.Context, topics []string) ([]query.ShardFreshness, error) {
	key := strings.Join(topics, "\x00")
	w.mu.Lock()
	r, ok := w.last[key]
	w.mu.Unlock()
	age := time.Since(r.at)
	if !ok || age >= maxSnapshotAge {
		return w.refresh(ctx, key, topics)
	}
	if age >= pollInterval {
		w.flight.DoChan(key, w.fetchFunc(ctx, key, topics)) // the answer is not awaited
	}
	now := time.Now()
	out := make([]query.ShardFreshness, len(r.fresh))
	for i, f := range r.fresh {
		out[i] = f.At(now)
	}
	return out, nil
}

// refresh queries the freshness of topics (one query shared by every
// concurrent caller) and waits for it.
func (w *watermarkWatch) refresh(ctx context.Context, key string, topics []string) ([]query.ShardFreshness, error) {
	fresh, _, err := w.refreshAt(ctx, key, topics)
	return fresh, err
}

// refreshAt is refresh, also returning when the query started.
func (w *watermarkWatch) refreshAt(ctx context.Context, key string, topics []string) ([]query.ShardFreshness, time.Time, error) {
	ch := w.flight.DoChan(key, w.fetchFunc(ctx, key, topics))
	select {
	case <-ctx.Done():
		return nil, time.Time{}, ctx.Err()
	case res := <-ch:
		if res.Err != nil {
			return nil, time.Time{}, res.Err
		}
		r := res.Val.(watchResult)
		return r.fresh, r.at, nil
	}
}

// fetchFunc is the shared query of refresh, which stores its reading.
func (w *watermarkWatch) fetchFunc(ctx context.Context, key string, topics []string) func() (any, error) {
	return func() (any, error) {
		// Not tied to one waiter's request: the others share the answer.
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.timeout)
		defer cancel()
		at := time.Now()
		fresh, err := w.fetch(qctx, topics)
		if err != nil {
			return nil, err
		}
		w.mu.Lock()
		if w.last == nil {
			w.last = map[string]watchResult{}
		}
		r := watchResult{at: at, fresh: fresh}
		w.last[key] = r
		w.mu.Unlock()
		return r, nil
	}
}

// waitReserve is the part of the request timeout kept for the read that
// follows the wait.
func waitReserve(timeout time.Duration) time.Duration {
	return min(max(timeout/4, 100*time.Millisecond), 2*time.Second)
}

// freshness returns the freshness of topics for r. With after= in r's
// query it first waits until every named shard is visible (or answers 503
// not_yet_visible); bad after= or wait= are 400. A stopped table among
// topics is named in the answer's header, and a wait its watermarks cannot
// end is 503 table_stopped at once (stopped.go).
func (s *Server) freshness(w http.ResponseWriter, r *http.Request, topics []string) ([]query.ShardFreshness, error) {
	return s.freshnessOf(w, r, topics, false)
}

// freshnessOf is freshness; with skipStopped, the topics of stopped
// tables are left out instead (GET /v1/shards), as read at every poll: a
// table stopped during the wait stops holding it back.
func (s *Server) freshnessOf(w http.ResponseWriter, r *http.Request, topics []string, skipStopped bool) ([]query.ShardFreshness, error) {
	c, err := parseConsistency(r.URL.Query())
	if err != nil {
		return nil, err
	}
	// The stopped tables among topics, and the topics to read.
	current := func() ([]query.StoppedTable, []string, error) {
		stopped, err := s.stoppedIn(r.Context(), topics) // stopped.go
		if err != nil || !skipStopped {
			return stopped, topics, err
		}
		return nil, withoutStopped(topics, stopped), nil
	}
	stopped, read, err := current()
	if err != nil {
		return nil, err
	}
	markStopped(w, stopped)
	if len(c.after) == 0 {
		return s.watch.snapshot(r.Context(), read)
	}
	return s.waitVisible(w, r, c, current, stopped, read)
}

// waitVisible polls the watermarks of the topics current names until
// every shard of c.after is visible in them (the reading), a stopped
// table makes that impossible (503 table_stopped), or the wait ends (503
// not_yet_visible). stopped and read are current's first answer.
func (s *Server) waitVisible(w http.ResponseWriter, r *http.Request, c consistency,
	current func() ([]query.StoppedTable, []string, error), stopped []query.StoppedTable, read []string) ([]query.ShardFreshness, error) {
	start := time.Now()
	deadline := s.waitDeadline(r, start, c.wait)
	since := start.Add(-pollInterval) // the first look may share a recent reading
	for first := true; ; first = false {
		var err error
		if !first {
			if stopped, read, err = current(); err != nil {
				return nil, err
			}
		}
		fresh, at, err := s.watch.newer(r.Context(), read, since)
		if err != nil {
			return nil, err
		}
		since = at
		if first {
			if err := s.knownShards(r.Context(), c.after, fresh); err != nil {
				return nil, err
			}
		}
		if reached(fresh, c.after) {
			s.waited.WithLabelValues("visible").Observe(time.Since(start).Seconds())
			noteReached(r.Context(), at)
			markStopped(w, stopped)
			return fresh, nil
		}
		if err := s.checkFrozen(w, r, c, stopped, start); err != nil {
			return nil, err
		}
		if !time.Now().Add(waitPoll).Before(deadline) {
			s.waited.WithLabelValues("not_yet_visible").Observe(time.Since(start).Seconds())
			return nil, notYetVisible(w, c, fresh, time.Since(start))
		}
		// The next reading is one whose query starts after this one's,
		// and no sooner than waitPoll after it.
		if pause := time.Until(at.Add(waitPoll)); pause > 0 {
			select {
			case <-r.Context().Done():
				return nil, r.Context().Err()
			case <-time.After(pause):
			}
		}
	}
}

// waitDeadline is when a wait of up to wait, started at start, ends: no
// later than the request's deadline less what the read after it needs.
func (s *Server) waitDeadline(r *http.Request, start time.Time, wait time.Duration) time.Time {
	deadline := start.Add(wait)
	if d, ok := r.Context().Deadline(); ok {
		if limit := d.Add(-waitReserve(s.cfg.QueryTimeout)); limit.Before(deadline) {
			deadline = limit
		}
	}
	return deadline
}

// checkFrozen is 503 table_stopped when the watermarks of the stopped
// tables are what is short of c.after: they do not move, so waiting
// cannot help.
func (s *Server) checkFrozen(w http.ResponseWriter, r *http.Request, c consistency, stopped []query.StoppedTable, start time.Time) error {
	if len(stopped) == 0 {
		return nil
	}
	frozenTopics := make([]string, len(stopped))
	for i, t := range stopped {
		frozenTopics[i] = t.Topic
	}
	frozen, err := s.watch.get(r.Context(), frozenTopics)
	if err != nil {
		return err
	}
	if reached(frozen, c.after) {
		return nil
	}
	s.waited.WithLabelValues("not_yet_visible").Observe(time.Since(start).Seconds())
	markStopped(w, stopped)
	return tableStopped(w, c, stopped, frozen)
}

// knownShards is a 400 when after= names a shard outside the fleet
// (Config.Shards) or, without a fleet, one that no configured table's
// watermarks know (fresh is the route's reading): waiting for it cannot
// help. Only when no shard has a watermark yet (nothing loaded)
// is every shard given the benefit of the doubt. A shard is known once
// its reader has written its first watermark, which follows its initial
// copy.
func (s *Server) knownShards(ctx context.Context, after []position, fresh []query.ShardFreshness) error {
	if len(s.cfg.Shards) > 0 {
		var unknown []int
		for _, p := range after {
			if !slices.Contains(s.cfg.Shards, p.Shard) {
				unknown = append(unknown, p.Shard)
			}
		}
		if len(unknown) == 0 {
			return nil
		}
		return &Error{Status: http.StatusBadRequest, Code: "unknown_shard",
			Message: fmt.Sprintf("after names shard %s, which is not in the fleet; the shards are %s",
				joinInts(unknown), joinInts(s.cfg.Shards)),
			Detail: map[string]any{"unknown_shards": unknown, "known_shards": s.cfg.Shards}}
	}
	missing := func(fresh []query.ShardFreshness) []int {
		var out []int
		for _, p := range after {
			if !slices.ContainsFunc(fresh, func(f query.ShardFreshness) bool { return f.Shard == p.Shard }) {
				out = append(out, p.Shard)
			}
		}
		return out
	}
	if len(missing(fresh)) == 0 {
		return nil
	}
	all, err := s.watch.get(ctx, s.cfg.Tables.Topics())
	if err != nil {
		return err
	}
	unknown := missing(all)
	if len(unknown) == 0 || len(all) == 0 {
		return nil
	}
	known := make([]int, len(all))
	for i, f := range all {
		known[i] = f.Shard
	}
	return &Error{Status: http.StatusBadRequest, Code: "unknown_shard",
		Message: fmt.Sprintf("after names shard %s, which has no watermark in any replicated table; the shards are %s",
			joinInts(unknown), joinInts(known)),
		Detail: map[string]any{"unknown_shards": unknown, "known_shards": known}}
}

// joinInts is "1, 2, 3".
func joinInts(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ", ")
}

// notYetVisible is the 503 of a wait that ran out, with the named shards'
// freshness (a shard with no watermark at all is listed as missing).
func notYetVisible(w http.ResponseWriter, c consistency, fresh []query.ShardFreshness, waited time.Duration) *Error {
	named := []query.ShardFreshness{}
	missing := []int{}
	for _, p := range c.after {
		i := slices.IndexFunc(fresh, func(f query.ShardFreshness) bool { return f.Shard == p.Shard })
		if i < 0 {
			missing = append(missing, p.Shard)
			continue
		}
		named = append(named, fresh[i])
	}
	w.Header().Set("Retry-After", "1")
	return &Error{Status: http.StatusServiceUnavailable, Code: "not_yet_visible",
		Message: fmt.Sprintf("after %s, not every named shard's changes up to the given positions are visible yet; retry", waited.Round(time.Millisecond)),
		Detail: map[string]any{"after": c.after, "freshness": named, "unknown_shards": missing,
			"waited_seconds": waited.Seconds()}}
}

// reachedKey keys, in a request's context, when the watermark reading
// that let its after= wait through started (the route times the answer
// from it: tributary_api_read_after_watermark_seconds).
type reachedKey struct{}

// withReached gives ctx a place for that time; it stays zero for a
// request without after=.
func withReached(ctx context.Context) (context.Context, *time.Time) {
	at := new(time.Time)
	return context.WithValue(ctx, reachedKey{}, at), at
}

// noteReached notes at in ctx's place, if it has one.
func noteReached(ctx context.Context, at time.Time) {
	if p, ok := ctx.Value(reachedKey{}).(*time.Time); ok {
		*p = at
	}
}
