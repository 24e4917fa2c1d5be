package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/query"
)

func TestParseConsistency(t *testing.T) {
	lsn := func(s string) envelope.LSN {
		l, err := envelope.ParseLSN(s)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	for _, c := range []struct {
		query string
		after []position
		wait  time.Duration
		code  string
	}{
		{query: "", wait: defaultWait},
		{query: "wait=2s", wait: 2 * time.Second},
		{query: "after=0:0/3000148", after: []position{{0, lsn("0/3000148")}}, wait: defaultWait},
		{query: "after=2:16/B374D848&wait=250ms", after: []position{{2, lsn("16/B374D848")}}, wait: 250 * time.Millisecond},
		{query: "after=3:0/10&after=1:0/20,0:A/b", after: []position{{0, lsn("A/B")}, {1, lsn("0/20")}, {3, lsn("0/10")}}, wait: defaultWait},
		{query: "after=1:0/20&after=1:0/10&after=1:0/30", after: []position{{1, lsn("0/30")}}, wait: defaultWait},
		{query: "after=65535:FFFFFFFF/FFFFFFFF&wait=0s", after: []position{{65535, lsn("FFFFFFFF/FFFFFFFF")}}},
		{query: "after=1:0/1&wait=30s", after: []position{{1, 1}}, wait: 30 * time.Second},
		{query: "after=%201:0/1%20", after: []position{{1, 1}}, wait: defaultWait},
		{query: "after=", code: "bad_after"},
		{query: "after=1", code: "bad_after"},
		{query: "after=1:", code: "bad_after"},
		{query: "after=:0/1", code: "bad_after"},
		{query: "after=-1:0/1", code: "bad_after"},
		{query: "after=01:0/1", code: "bad_after"},
		{query: "after=%2B1:0/1", code: "bad_after"},
		{query: "after=65536:0/1", code: "bad_after"},
		{query: "after=99999999999999999999:0/1", code: "bad_after"},
		{query: "after=1:0", code: "bad_after"},
		{query: "after=1:0/", code: "bad_after"},
		{query: "after=1:/1", code: "bad_after"},
		{query: "after=1:G/1", code: "bad_after"},
		{query: "after=1:0x1/1", code: "bad_after"},
		{query: "after=1:123456789/0", code: "bad_after"},
		{query: "after=1:0/1/2", code: "bad_after"},
		{query: "after=1:0/1,", code: "bad_after"},
		{query: "after=1:0/1:2", code: "bad_after"},
		{query: "after=" + strings.Repeat("1:0/1,", maxAfter) + "1:0/1", code: "bad_after"},
		{query: "wait=5", code: "bad_wait"},
		{query: "wait=-1s", code: "bad_wait"},
		{query: "wait=31s", code: "bad_wait"},
		{query: "wait=soon", code: "bad_wait"},
		{query: "wait=1s&wait=2s", code: "bad_wait"},
	} {
		v, err := url.ParseQuery(c.query)
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseConsistency(v)
		if c.code != "" {
			var e *Error
			if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Code != c.code || e.Message == "" {
				t.Errorf("%q: error %v, want 400 %s", c.query, err, c.code)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.query, err)
			continue
		}
		if !slices.Equal(got.after, c.after) || got.wait != c.wait {
			t.Errorf("%q: %+v, want after %v wait %v", c.query, got, c.after, c.wait)
		}
	}
}

func TestReached(t *testing.T) {
	ts := time.Unix(1790000000, 0)
	fresh := []query.ShardFreshness{
		query.FreshnessAt(0, 100, ts, true),
		query.FreshnessAt(1, 200, ts, false),
		query.FreshnessAt(2, 300, ts, true),
	}
	for _, c := range []struct {
		after []position
		want  bool
	}{
		{nil, true},
		{[]position{{0, 100}}, true},
		{[]position{{0, 99}, {2, 300}}, true},
		{[]position{{0, 101}}, false},
		{[]position{{1, 1}}, false}, // incomplete: never trusted
		{[]position{{2, 1}, {3, 1}}, false},
	} {
		if got := reached(fresh, c.after); got != c.want {
			t.Errorf("reached(%v) = %v, want %v", c.after, got, c.want)
		}
	}
}

// fakeWatermarks is a freshness source whose shard 0 advances by step on
// every call.
type fakeWatermarks struct {
	calls atomic.Int64
	step  envelope.LSN
	delay time.Duration
}

func (f *fakeWatermarks) fetch(ctx context.Context, topics []string) ([]query.ShardFreshness, error) {
	n := f.calls.Add(1)
	select {
	case <-time.After(f.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	out := []query.ShardFreshness{query.FreshnessAt(0, envelope.LSN(n)*f.step, time.Now(), true)}
	if !slices.Equal(topics, []string{"t"}) {
		// Shard 7 has watermarks in another table's topic only: known to
		// the fleet, not (yet) to the route's topic t.
		out = append(out, query.FreshnessAt(7, 1, time.Now(), false))
	}
	return out, nil
}

// waitFor runs the after= wait of s for query q and returns the recorder.
func waitFor(s *Server, q string) (*httptest.ResponseRecorder, []query.ShardFreshness, error) {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/v1/shards?"+q, nil)
	ctx, cancel := context.WithTimeout(req.Context(), s.cfg.QueryTimeout)
	defer cancel()
	fresh, err := s.freshness(rec, req.WithContext(ctx), []string{"t"})
	return rec, fresh, err
}

func TestFreshnessWaits(t *testing.T) {
	s := newTestServer(t)
	f := &fakeWatermarks{step: 10}
	s.watch = &watermarkWatch{fetch: f.fetch, timeout: time.Second}

	// Reached on the third poll (10, 20, 30).
	_, fresh, err := waitFor(s, "after=0:0/1E&wait=5s")
	if err != nil || len(fresh) != 1 || fresh[0].LSN() < 30 {
		t.Fatalf("wait for 0/1E: %v %v", fresh, err)
	}
	if n := f.calls.Load(); n != 3 {
		t.Errorf("%d polls, want 3", n)
	}

	// Not reached: 503 not_yet_visible with Retry-After and the named
	// shards' freshness; a shard without watermarks is listed as unknown.
	rec, _, err := waitFor(s, "after=0:FFFF/0,7:0/1&wait=60ms")
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusServiceUnavailable || e.Code != "not_yet_visible" {
		t.Fatalf("far-future position: %v", err)
	}
	if rec.Header().Get("Retry-After") != "1" {
		t.Errorf("Retry-After %q", rec.Header().Get("Retry-After"))
	}
	b, _ := json.Marshal(e.Detail)
	var d struct {
		After     []map[string]any `json:"after"`
		Freshness []map[string]any `json:"freshness"`
		Unknown   []int            `json:"unknown_shards"`
	}
	if err := json.Unmarshal(b, &d); err != nil || len(d.After) != 2 || len(d.Freshness) != 1 ||
		d.Freshness[0]["shard"] != 0.0 || !slices.Equal(d.Unknown, []int{7}) || d.After[0]["lsn"] != "FFFF/0" {
		t.Errorf("detail %s", b)
	}

	// A shard no table's watermarks know: 400 at once, naming the known
	// shards; waiting cannot make it appear.
	f.calls.Store(0)
	_, _, err = waitFor(s, "after=0:0/1,99:0/0&wait=5s")
	if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Code != "unknown_shard" ||
		!strings.Contains(e.Message, "shard 99") || !strings.Contains(e.Message, "0, 7") {
		t.Fatalf("after= naming shard 99: %v, want 400 unknown_shard naming 99 and the shards 0, 7", err)
	}
	if n := f.calls.Load(); n > 2 {
		t.Errorf("an unknown shard took %d watermark readings; want the first (and the fleet's) only", n)
	}

	// wait=0s looks once.
	f.calls.Store(0)
	s.watch = &watermarkWatch{fetch: f.fetch, timeout: time.Second} // no shared recent answer
	if _, _, err := waitFor(s, "after=0:FFFF/0&wait=0s"); !errors.As(err, &e) || e.Code != "not_yet_visible" {
		t.Fatalf("wait=0s: %v", err)
	}
	if n := f.calls.Load(); n != 1 {
		t.Errorf("wait=0s polled %d times", n)
	}

	// The request timeout bounds the wait, leaving room for the read: the
	// answer is a 503, not the request's own timeout.
	s.cfg.QueryTimeout = 400 * time.Millisecond
	start := time.Now()
	if _, _, err := waitFor(s, "after=0:FFFF/0&wait=30s"); !errors.As(err, &e) || e.Code != "not_yet_visible" {
		t.Fatalf("capped wait: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("a 30s wait under a 400ms request timeout took %v", took)
	}
}

// TestUnknownShardBeforeAnyWatermark: with no watermark at all (nothing
// loaded yet) no shard can be called unknown: the wait runs as usual.
func TestUnknownShardBeforeAnyWatermark(t *testing.T) {
	s := newTestServer(t)
	var calls atomic.Int64
	s.watch = &watermarkWatch{timeout: time.Second, fetch: func(context.Context, []string) ([]query.ShardFreshness, error) {
		calls.Add(1)
		return nil, nil
	}}
	_, _, err := waitFor(s, "after=99:0/1&wait=100ms")
	var e *Error
	if !errors.As(err, &e) || e.Code != "not_yet_visible" {
		t.Fatalf("after= before any watermark: %v, want 503 not_yet_visible", err)
	}
	if calls.Load() < 2 {
		t.Errorf("%d watermark readings: the wait did not poll", calls.Load())
	}
}

// TestFleetShards: with the fleet's shard numbers configured, after=
// naming a shard outside the fleet is a 400 at once, and a shard of the
// fleet with no watermark yet (its initial copy running) is waited for,
// not refused, even while other shards have watermarks.
func TestFleetShards(t *testing.T) {
	s := newTestServer(t)
	s.cfg.Shards = []int{3, 7}
	var calls atomic.Int64
	s.watch = &watermarkWatch{timeout: time.Second, fetch: func(context.Context, []string) ([]query.ShardFreshness, error) {
		// Shard 3 is streaming; shard 7 has written no watermark yet,
		// until the third reading.
		out := []query.ShardFreshness{query.FreshnessAt(3, 100, time.Now(), true)}
		if calls.Add(1) >= 3 {
			out = append(out, query.FreshnessAt(7, 100, time.Now(), true))
		}
		return out, nil
	}}
	if _, _, err := waitFor(s, "after=7:0/1&wait=2s"); err != nil {
		t.Fatalf("after= a fleet shard still copying: %v, want an answer once its watermark comes", err)
	}
	_, _, err := waitFor(s, "after=4:0/1&wait=2s")
	var e *Error
	if !errors.As(err, &e) || e.Status != 400 || e.Code != "unknown_shard" || !strings.Contains(e.Message, "not in the fleet") {
		t.Fatalf("after= a shard outside the fleet: %v, want 400 unknown_shard", err)
	}
}

// TestWaitersShareQueries: many concurrent waiters cost one watermark
// query per poll, not one each.
func TestWaitersShareQueries(t *testing.T) {
	s := newTestServer(t)
	f := &fakeWatermarks{step: 1, delay: 20 * time.Millisecond}
	s.watch = &watermarkWatch{fetch: f.fetch, timeout: time.Second}
	const waiters = 50
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	for range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := waitFor(s, "after=0:0/5&wait=5s")
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := f.calls.Load(); n > 10 {
		t.Errorf("%d waiters made %d watermark queries", waiters, n)
	}
}

// FuzzParseConsistency: any after=/wait= is a 400 or positions that
// satisfy the invariants the wait relies on.
func FuzzParseConsistency(f *testing.F) {
	for _, s := range []string{"after=0:0/3000148", "after=1:0/1,2:16/B374D848&wait=1ms", "after=65536:0/0", "after=1:0/1&after=1:0/2",
		"wait=30s", "after=1:%", "after=%E2%82%AC:0/1", "after=" + strings.Repeat(",", 70)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		c, err := parseConsistency(v)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Status != http.StatusBadRequest || (e.Code != "bad_after" && e.Code != "bad_wait") {
				t.Fatalf("%q: error %v", raw, err)
			}
			return
		}
		if c.wait < 0 || c.wait > maxWait || len(c.after) > maxAfter {
			t.Fatalf("%q: %+v", raw, c)
		}
		for i, p := range c.after {
			if p.Shard < 0 || p.Shard > maxShard || (i > 0 && c.after[i-1].Shard >= p.Shard) {
				t.Fatalf("%q: positions %v", raw, c.after)
			}
			if back, err := envelope.ParseLSN(p.LSN.String()); err != nil || back != p.LSN {
				t.Fatalf("%q: LSN %v does not round-trip", raw, p.LSN)
			}
		}
	})
}

// blockingWatermarks is a freshness source that answers only when release
// is closed.
type blockingWatermarks struct {
	calls   atomic.Int64
	release chan struct{}
}

func (f *blockingWatermarks) fetch(ctx context.Context, _ []string) ([]query.ShardFreshness, error) {
	n := f.calls.Add(1)
	select {
	case <-f.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return []query.ShardFreshness{query.FreshnessAt(0, envelope.LSN(1000+n), time.Now(), true)}, nil
}

// TestSnapshotDoesNotWait: a read without after= is answered from the
// newest reading while a refresh runs, and a reading too old is refreshed
// first.
func TestSnapshotDoesNotWait(t *testing.T) {
	f := &blockingWatermarks{release: make(chan struct{})}
	w := &watermarkWatch{fetch: f.fetch, timeout: 10 * time.Second}
	key := "t"
	ts := time.Now().Add(-time.Hour)
	w.last = map[string]watchResult{key: {at: time.Now().Add(-3 * pollInterval), fresh: []query.ShardFreshness{query.FreshnessAt(0, 7, ts, true)}}}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := w.snapshot(ctx, []string{key})
	if err != nil {
		t.Fatalf("snapshot waited for the refresh: %v", err)
	}
	if len(got) != 1 || got[0].LSN() != 7 || got[0].Staleness < 3599 {
		t.Errorf("snapshot %+v, want the stored reading (LSN 7) with its staleness as of now", got)
	}
	// A second read while the refresh runs shares it.
	if _, err := w.snapshot(ctx, []string{key}); err != nil {
		t.Fatal(err)
	}
	close(f.release)
	// get waits for a reading at most pollInterval old: the refresh's.
	var fresh []query.ShardFreshness
	for ctx.Err() == nil {
		if fresh, err = w.get(ctx, []string{key}); err != nil {
			t.Fatal(err)
		}
		if fresh[0].LSN() != 7 {
			break
		}
	}
	if n := f.calls.Load(); n < 1 || fresh[0].LSN() != envelope.LSN(1000+n) {
		t.Errorf("after the refresh: %v (%d queries)", fresh, n)
	}

	// A reading older than maxSnapshotAge is not served: the read waits
	// for a new one.
	w.mu.Lock()
	w.last[key] = watchResult{at: time.Now().Add(-2 * maxSnapshotAge), fresh: []query.ShardFreshness{query.FreshnessAt(0, 7, ts, true)}}
	w.mu.Unlock()
	got, err = w.snapshot(ctx, []string{key})
	if err != nil || got[0].LSN() == 7 {
		t.Errorf("old reading: %v %v, want a new one", got, err)
	}
}

// TestWaiterReadsAfterWhatItSaw: a waiter whose reading came back short
// gets one whose query started after it — never the same reading again,
// however recent — and waiters share that query.
func TestWaiterReadsAfterWhatItSaw(t *testing.T) {
	f := &fakeWatermarks{step: 1}
	w := &watermarkWatch{fetch: f.fetch, timeout: time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	seen := time.Now()
	w.last = map[string]watchResult{"t": {at: seen, fresh: []query.ShardFreshness{query.FreshnessAt(0, 0, seen, true)}}}
	fresh, at, err := w.newer(ctx, []string{"t"}, seen)
	if err != nil {
		t.Fatal(err)
	}
	if !at.After(seen) || f.calls.Load() != 1 || fresh[0].LSN() != 1 {
		t.Fatalf("reading at %v (seen %v), LSN %v, %d queries: want a new query's reading", at, seen, fresh[0].LSN(), f.calls.Load())
	}
	// A reading newer than what the caller saw is shared, not queried again.
	if _, again, err := w.newer(ctx, []string{"t"}, seen); err != nil || !again.Equal(at) || f.calls.Load() != 1 {
		t.Fatalf("second waiter: reading at %v, %d queries, %v: want the shared reading at %v", again, f.calls.Load(), err, at)
	}
}

// TestAfterReadsTimed: an after= read that is answered is timed from the
// watermark reading that let it through (each reading takes 20 ms here);
// a read without after=, and
// one whose wait ran out, are not.
func TestAfterReadsTimed(t *testing.T) {
	s := newTestServer(t)
	f := &fakeWatermarks{step: 10, delay: 20 * time.Millisecond}
	s.watch = &watermarkWatch{fetch: f.fetch, timeout: time.Second}
	get := func(q string) int {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/shards?"+q, nil))
		return rec.Code
	}
	answered := func() (uint64, float64) {
		var m dto.Metric
		if err := s.answered.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
	}
	if code := get(""); code != http.StatusOK {
		t.Fatalf("GET /v1/shards: %d", code)
	}
	if n, _ := answered(); n != 0 {
		t.Fatalf("a read without after= timed: %d observations", n)
	}
	start := time.Now()
	if code := get("after=0:0/1E&wait=5s"); code != http.StatusOK {
		t.Fatalf("GET /v1/shards?after=0:0/1E: %d", code)
	}
	took := time.Since(start).Seconds()
	n, sum := answered()
	// The reaching reading (LSN 30) took its 20 ms, and the answer followed
	// it; it started after the request's own first reading (LSN 20, 20 ms
	// at least; the one of the read before is shared).
	if n != 1 || sum < 0.020 || sum > took-0.020 {
		t.Errorf("after= read timed %d times, %.3f s in all; want once, at least the reading's 0.020 s and at most the request's %.3f s less the reading before", n, sum, took)
	}
	if code := get("after=0:FFFF/0&wait=30ms"); code != http.StatusServiceUnavailable {
		t.Fatalf("GET /v1/shards?after=0:FFFF/0: %d, want 503", code)
	}
	if n, _ := answered(); n != 1 {
		t.Errorf("a wait that ran out was timed: %d observations, want the 1 before", n)
	}
}
