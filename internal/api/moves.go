package api

// Moves (the table config's `moves` section): GET /v1/documents/{id} shows
// a document that a saga is moving between shards once — the copy the move
// log says is current — and says the move is in progress; a move half-done
// past the grace period, and a document the log says moved but that is on
// neither shard, are flagged in the answer and listed by
// GET /v1/anomalies/moves. GET /v1/tables/{table}/rows/{id} stays the raw
// view: every live copy, one per shard.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/tributary/tributary/internal/query"
	"github.com/tributary/tributary/internal/tables"
)

// Move statuses in a by-id answer.
const (
	statusMoveInProgress = "move in progress"
	statusMoved          = "moved"
)

// moveStatus is the `move` block of a by-id answer: the document's newest
// move, when the log has one.
type moveStatus struct {
	Status string `json:"status"`
	query.Move
	// Since is when the move started (in progress) or finished (moved).
	Since time.Time `json:"since"`
	// PastGrace: in progress (or finished without arriving) for longer
	// than the configured grace period.
	PastGrace bool `json:"past_grace"`
	// HiddenShards are shards with a live copy that is not the current one
	// (the source, or the target not yet switched to).
	HiddenShards []int `json:"hidden_copies_on_shards,omitempty"`
}

// rowAnomaly flags what is wrong with the document in a by-id answer.
type rowAnomaly struct {
	Kind    string `json:"kind"` // query.MoveStuck or query.MoveLost
	Message string `json:"message"`
}

// readCopies reads the live copies of id in t and, when moves is set, the
// document's newest move, and keeps the current copy. The move log is the
// only rule today; PickCurrent takes more (e.g. ring-map ownership) in
// order.
//
// Most documents never move, so once the log's index is built the copies
// are read together with the index's count of the document's moves
// (query.RowWithMoves), and the log only when that count is not 0 or there
// is no copy (a 404 still shows the move of a document lost or deleted
// after it moved). Exact: with the count at 0 the index names no move of
// the document, and LatestMove, which finds the move ids through that
// index, would answer nil — the answer without the read. The loader
// inserts a move into the log in one INSERT whose materialized view writes
// the index row (chstore/byid_index.go); ClickHouse writes the log's part
// first and the view's after it, so for the length of that INSERT (or,
// were the view's write to fail, until the loader's retry of the batch,
// whose Kafka offsets it has not committed) the log can hold a move the
// index does not. In that window this read shows the document without
// the move, exactly as LatestMove through the index did before: both find
// the document's moves through the index only. When the log is read, it
// is read after the copies rather than beside them; the two reads were
// never one snapshot, and parallel reads could end in this order too.
// The cost: a 404 now makes its two reads one after the other
// (docs/benchmarks.md, by-id session 7). Without the index (not built, or
// gone) the copies and the move are read in parallel as before.
func (s *Server) readCopies(ctx context.Context, t *tables.Table, id any, moves *query.MoveLog) ([]query.Copy, *moveStatus, *rowAnomaly, error) {
	var copies []query.Copy
	var move *query.Move
	var err error
	if moves != nil {
		var moved bool
		copies, moved, err = s.q.RowWithMoves(ctx, moves, id)
		switch {
		case errors.Is(err, query.ErrNoMoveIndex):
			copies, move, err = s.readCopiesAndMove(ctx, t, id, moves)
		case err == nil && moved:
			move, err = s.q.LatestMove(ctx, moves, id)
		}
	} else if parts, ok := id.(keyParts); ok {
		copies, err = s.q.KeyRow(ctx, t.Name, t.Key(), parts)
	} else {
		copies, err = s.q.Row(ctx, t.Name, t.IDColumn, id)
	}
	if err != nil || move == nil {
		return copies, nil, nil, err
	}
	current, _ := query.PickCurrent(copies, query.MoveRule(move, moves.Moves.InProgress))
	st, anomaly := describeMove(move, moves.Moves, copies, current, time.Now())
	if anomaly != nil && anomaly.Kind == query.MoveLost {
		// Lost means it never arrived: a document deleted at the target
		// after its move left a tombstone there (the listing's rule too).
		arrived, err := s.q.Arrived(ctx, t.Name, t.IDColumn, id, move.ToShard)
		if err != nil {
			return nil, nil, nil, err
		}
		if arrived {
			st.PastGrace, anomaly = false, nil
		}
	}
	return current, st, anomaly, nil
}

// readCopiesAndMove reads the live copies of id in t and the document's
// newest move at the same time: the by-id read when the log has no index.
func (s *Server) readCopiesAndMove(ctx context.Context, t *tables.Table, id any, moves *query.MoveLog) ([]query.Copy, *query.Move, error) {
	var copies []query.Copy
	var move *query.Move
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		copies, err = s.q.Row(gctx, t.Name, t.IDColumn, id)
		return err
	})
	g.Go(func() (err error) {
		move, err = s.q.LatestMove(gctx, moves, id)
		return err
	})
	err := g.Wait()
	return copies, move, err
}

// describeMove builds the move block and the anomaly, if any, at now.
func describeMove(m *query.Move, cfg *tables.Moves, all, current []query.Copy, now time.Time) (*moveStatus, *rowAnomaly) {
	st := &moveStatus{Move: *m, Since: m.StartedAt}
	for _, c := range all {
		if !containsShard(current, c.Shard) {
			st.HiddenShards = append(st.HiddenShards, c.Shard)
		}
	}
	grace := cfg.GraceDuration()
	switch {
	case cfg.InProgress(m.State):
		st.Status = statusMoveInProgress
		st.PastGrace = now.Sub(m.StartedAt) > grace
		if st.PastGrace {
			return st, &rowAnomaly{Kind: query.MoveStuck, Message: fmt.Sprintf(
				"move %s (logged on shard %d) from shard %d to shard %d has been %s since %s, longer than the grace period of %s",
				m.MoveID, m.LogShard, m.FromShard, m.ToShard, m.State, m.StartedAt.Format(time.RFC3339), grace)}
		}
	case cfg.Done(m.State):
		st.Status = statusMoved
		if m.FinishedAt != nil {
			st.Since = *m.FinishedAt
		}
		st.PastGrace = len(current) == 0 && now.Sub(st.Since) > grace
		if st.PastGrace {
			return st, &rowAnomaly{Kind: query.MoveLost, Message: fmt.Sprintf(
				"move %s (logged on shard %d) from shard %d to shard %d is done, but the document is live on no shard",
				m.MoveID, m.LogShard, m.FromShard, m.ToShard)}
		}
	default:
		st.Status = m.State // e.g. failed: the copies are shown as they are
	}
	return st, nil
}

// notFoundDetail is the detail of a by-id 404: freshness and the decoded
// id, and the document's newest move when the log has one (a lost document
// says so here).
func notFoundDetail(fresh []query.ShardFreshness, decoded *idInfo, move *moveStatus, anomaly *rowAnomaly) map[string]any {
	d := map[string]any{"freshness": fresh, "decoded_id": decoded}
	if move != nil {
		d["move"] = move
	}
	if anomaly != nil {
		d["anomaly"] = anomaly
	}
	return d
}

func containsShard(cs []query.Copy, shard int) bool {
	for _, c := range cs {
		if c.Shard == shard {
			return true
		}
	}
	return false
}

// parseMovesQuery validates GET /v1/anomalies/moves's query string.
func parseMovesQuery(raw string, l *query.MoveLog, now time.Time) (query.MoveAnomaliesRequest, [8]byte, error) {
	req := query.MoveAnomaliesRequest{Kinds: []string{query.MoveStuck, query.MoveLost}, Limit: defaultAnomalyLimit,
		Cutoff: movesCutoff(now, l)}
	var filters [8]byte
	v, err := url.ParseQuery(raw)
	if err != nil {
		return req, filters, badRequest("bad_query", "the query string is malformed: %v", err)
	}
	known := map[string]bool{"kind": true, "limit": true, "cursor": true, "after": true, "wait": true}
	for k, vals := range v {
		if !known[k] {
			return req, filters, badRequest("unknown_parameter", "unknown parameter %q; use kind, limit, cursor, after, wait", k)
		}
		if k != "after" && len(vals) > 1 {
			return req, filters, badRequest("bad_"+k, "%s may be given once", k)
		}
	}
	kind := v.Get("kind")
	switch kind {
	case "", "all":
		kind = "all"
	case query.MoveStuck, query.MoveLost:
		req.Kinds = []string{kind}
	default:
		return req, filters, badRequest("bad_kind", "kind %q is not one of stuck, lost, all", clip(kind))
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxAnomalyLimit {
			return req, filters, badRequest("bad_limit", "limit %q is not a number in 1..%d", clip(s), maxAnomalyLimit)
		}
		req.Limit = n
	}
	filters = filterPrint("moves", kind)
	c, err := cursorParam(v.Get("cursor"), cursorAnomalies, filters)
	if err != nil {
		return req, filters, err
	}
	if c != nil {
		if c.table != l.Log.Name || c.id == "" || c.from != 0 {
			return req, filters, badRequest("bad_cursor", "cursor is not one this API returned; start again without it")
		}
		req.After = &query.MoveKey{StartedAt: time.Unix(c.time, 0).UTC(), LogShard: int(c.shard), MoveID: c.id}
	}
	return req, filters, nil
}

// movesCutoff is the moment before which a move is past the grace period:
// whole seconds, as ClickHouse stores the log's times, so that the answer
// (which states it) can be reproduced exactly from the source.
func movesCutoff(now time.Time, l *query.MoveLog) time.Time {
	return now.Add(-l.Moves.GraceDuration()).Truncate(time.Second).UTC()
}

// movesResponse is the answer of GET /v1/anomalies/moves.
type movesResponse struct {
	GraceSeconds float64 `json:"grace_seconds"`
	// Cutoff: moves started (stuck) or finished (lost) before it are past
	// the grace period.
	Cutoff    time.Time              `json:"cutoff"`
	Anomalies []query.MoveAnomaly    `json:"anomalies"`
	Next      string                 `json:"next_cursor,omitempty"`
	Freshness []query.ShardFreshness `json:"freshness"`
}

// moveAnomalies serves GET /v1/anomalies/moves.
func (s *Server) moveAnomalies(w http.ResponseWriter, r *http.Request) error {
	l, ok := query.MoveLogOf(s.cfg.Tables, s.cfg.DocumentsTable)
	if !ok {
		return &Error{Status: http.StatusNotFound, Code: "no_move_log",
			Message: "no move log is configured for the documents table (the table config's moves section)"}
	}
	req, filters, err := parseMovesQuery(r.URL.RawQuery, l, time.Now())
	if err != nil {
		return err
	}
	fresh, err := s.freshness(w, r, []string{l.Log.Topic, l.Documents.Topic})
	if err != nil {
		return err
	}
	page, err := s.q.MoveAnomalies(r.Context(), l, req)
	if err != nil {
		return err
	}
	resp := movesResponse{GraceSeconds: l.Moves.GraceDuration().Seconds(), Cutoff: req.Cutoff, Anomalies: page.Anomalies, Freshness: fresh}
	if page.More && len(page.Anomalies) > 0 {
		k := page.Anomalies[len(page.Anomalies)-1].Key()
		resp.Next = cursor{kind: cursorAnomalies, filters: filters, time: k.StartedAt.Unix(), shard: uint16(k.LogShard),
			table: l.Log.Name, id: k.MoveID}.encode()
	}
	return writeJSON(w, http.StatusOK, resp)
}
