package api

// Stopped tables. A loader that cannot follow a table (an incompatible
// schema change, an unmapped type) stops it and records that in ClickHouse
// (internal/loader/stopped.go). The table's watermarks stay where they
// were, so:
//
//   - GET /v1/shards leaves stopped tables out of the fleet's freshness
//     (every other table's is complete and current) and lists them under
//     stopped_tables with the reason and their own, frozen, freshness;
//   - a route that reads a stopped table answers as of its watermarks and
//     says so: header Tributary-Stopped-Tables on every route, and
//     stopped_tables in the body of by-id reads and search;
//   - after= that the stopped table's watermarks do not reach is 503
//     table_stopped at once, with the reason: waiting cannot help.
//
// Routes read the watermarks of the tables they read only, so a stopped
// table never holds another table's freshness or read-your-writes back.

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/tributary/tributary/internal/query"
)

// A reading of the stopped tables younger than stoppedMaxAge is used as
// it is; one younger than stoppedStaleAge is used while a new one is read
// for the next request; an older one (after an idle spell) is read anew
// before the request goes on. A stop shows within a few seconds.
const (
	stoppedMaxAge   = time.Second
	stoppedStaleAge = 5 * time.Second
)

// stoppedHeader names the stopped tables among those an answer reads.
const stoppedHeader = "Tributary-Stopped-Tables"

// stoppedWatch shares readings of the stopped tables among requests.
type stoppedWatch struct {
	fetch   func(ctx context.Context, now time.Time) ([]query.StoppedTable, error)
	timeout time.Duration
	flight  singleflight.Group

	mu   sync.Mutex
	at   time.Time            // guarded by mu
	last []query.StoppedTable // guarded by mu
}

// get returns the stopped tables as read at most stoppedMaxAge ago.
func (w *stoppedWatch) get(ctx context.Context) ([]query.StoppedTable, error) {
	w.mu.Lock()
	at, last := w.at, w.last
	w.mu.Unlock()
	age := time.Since(at)
	if !at.IsZero() && age < stoppedMaxAge {
		return last, nil
	}
	ch := w.flight.DoChan("", func() (any, error) {
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.timeout)
		defer cancel()
		now := time.Now()
		ts, err := w.fetch(qctx, now)
		if err != nil {
			return nil, err
		}
		w.mu.Lock()
		w.at, w.last = now, ts
		w.mu.Unlock()
		return ts, nil
	})
	if !at.IsZero() && age < stoppedStaleAge {
		return last, nil // the refresh goes on for the next request
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case res := <-ch:
		if res.Err != nil {
			return nil, res.Err
		}
		return res.Val.([]query.StoppedTable), nil
	}
}

// stoppedIn are the stopped tables whose topic is one of topics.
func (s *Server) stoppedIn(ctx context.Context, topics []string) ([]query.StoppedTable, error) {
	all, err := s.stopped.get(ctx)
	if err != nil {
		return nil, err
	}
	var out []query.StoppedTable
	for _, t := range all {
		if slices.Contains(topics, t.Topic) {
			out = append(out, t)
		}
	}
	return out, nil
}

// withoutStopped is topics less those of stopped tables (all of topics
// when every one is stopped: their freshness is then all there is).
func withoutStopped(topics []string, stopped []query.StoppedTable) []string {
	out := slices.DeleteFunc(slices.Clone(topics), func(topic string) bool {
		return slices.ContainsFunc(stopped, func(t query.StoppedTable) bool { return t.Topic == topic })
	})
	if len(out) == 0 {
		return topics
	}
	return out
}

// markStopped names the stopped tables of an answer in its header.
func markStopped(w http.ResponseWriter, stopped []query.StoppedTable) {
	if len(stopped) == 0 {
		return
	}
	names := make([]string, len(stopped))
	for i, t := range stopped {
		names[i] = t.Table
	}
	w.Header().Set(stoppedHeader, strings.Join(names, ", "))
}

// stoppedTableStatus is a stopped table in /v1/shards: why, since when,
// and how fresh its own data is.
type stoppedTableStatus struct {
	query.StoppedTable
	Freshness []query.ShardFreshness `json:"freshness"`
}

// tableStopped is the 503 of an after= wait that a stopped table's
// watermarks do not reach: the table will not advance until a loader can
// follow it again.
func tableStopped(w http.ResponseWriter, c consistency, stopped []query.StoppedTable, fresh []query.ShardFreshness) *Error {
	names := make([]string, len(stopped))
	for i, t := range stopped {
		names[i] = t.Table + " (" + t.Reason + ")"
	}
	w.Header().Set("Retry-After", "60")
	return &Error{Status: http.StatusServiceUnavailable, Code: "table_stopped",
		Message: "the loader has stopped " + strings.Join(names, ", ") +
			"; its data stays as of the freshness below until the table is fixed (docs/runbook.md#tributarytablestopped)",
		Detail: map[string]any{"after": c.after, "stopped_tables": stopped, "freshness": fresh}}
}
