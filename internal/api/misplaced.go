package api

// GET /v1/anomalies/misplaced: live rows on a shard that does not own their
// shard-key value under the ring map in force (the stale-router failure of docs/design/moves.md),
// as the loader places them. Queries do not count them (revenue counts each
// row from its owner); this lists them so operators can move them to their
// owner. A planned arc move's copies are not misplaced.

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/tributary/tributary/internal/query"
)

const cursorMisplaced byte = 'm'

// placedTables are the configured tables with a shard key, in order.
func (s *Server) placedTables() []query.PlacedTable {
	var out []query.PlacedTable
	for _, t := range s.cfg.Tables.Tables {
		if t.ShardKey != "" {
			out = append(out, query.PlacedTable{Name: t.Name, IDColumn: t.IDColumn, IDColumns: t.IDColumns, ShardKey: t.ShardKey})
		}
	}
	return out
}

// parseMisplacedQuery validates a raw query string against the placed
// tables.
func parseMisplacedQuery(raw string, placed []query.PlacedTable) (query.MisplacedRequest, [8]byte, error) {
	req := query.MisplacedRequest{Tables: placed, Limit: defaultAnomalyLimit}
	var filters [8]byte
	v, err := url.ParseQuery(raw)
	if err != nil {
		return req, filters, badRequest("bad_query", "the query string is malformed: %v", err)
	}
	known := map[string]bool{"table": true, "limit": true, "cursor": true, "after": true, "wait": true}
	for k, vals := range v {
		if !known[k] {
			return req, filters, badRequest("unknown_parameter", "unknown parameter %q; use table, limit, cursor, after, wait", k)
		}
		if k != "after" && len(vals) > 1 {
			return req, filters, badRequest("bad_"+k, "%s may be given once", k)
		}
	}
	byName := func(name string) int {
		return slices.IndexFunc(placed, func(t query.PlacedTable) bool { return t.Name == name })
	}
	if t := v.Get("table"); t != "" {
		i := byName(t)
		if i < 0 {
			return req, filters, badRequest("bad_table", "table %q is not a replicated table with a shard_key", clip(t))
		}
		req.Tables = placed[i : i+1]
	}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > maxAnomalyLimit {
			return req, filters, badRequest("bad_limit", "limit %q is not a number in 1..%d", clip(l), maxAnomalyLimit)
		}
		req.Limit = n
	}
	filters = filterPrint("misplaced", v.Get("table"))
	c, err := cursorParam(v.Get("cursor"), cursorMisplaced, filters)
	if err != nil {
		return req, filters, err
	}
	if c != nil {
		if byName(c.table) < 0 || c.id == "" || c.from != 0 || c.time != 0 {
			return req, filters, badRequest("bad_cursor", "cursor is not one this API returned; start again without it")
		}
		req.After = &query.MisplacedKey{Table: c.table, ID: c.id, Shard: c.shard}
	}
	return req, filters, nil
}

// misplacedResponse is the answer of GET /v1/anomalies/misplaced.
type misplacedResponse struct {
	Rows      []query.MisplacedRow   `json:"rows"`
	Next      string                 `json:"next_cursor,omitempty"`
	Freshness []query.ShardFreshness `json:"freshness"`
}

func (s *Server) misplaced(w http.ResponseWriter, r *http.Request) error {
	placed := s.placedTables()
	req, filters, err := parseMisplacedQuery(r.URL.RawQuery, placed)
	if err != nil {
		return err
	}
	var topics []string
	for _, pt := range req.Tables {
		t, _ := s.cfg.Tables.ByName(pt.Name)
		topics = append(topics, t.Topic)
	}
	fresh, err := s.freshness(w, r, topics)
	if err != nil {
		return err
	}
	resp := misplacedResponse{Rows: []query.MisplacedRow{}, Freshness: fresh}
	if len(req.Tables) == 0 {
		return writeJSON(w, http.StatusOK, resp) // no table is placed by a ring map
	}
	page, err := s.q.Misplaced(r.Context(), req)
	if err != nil {
		return err
	}
	resp.Rows = page.Rows
	if page.More && len(page.Rows) > 0 {
		k := page.Rows[len(page.Rows)-1].Position()
		resp.Next = cursor{kind: cursorMisplaced, filters: filters, table: k.Table, id: k.ID, shard: k.Shard}.encode()
	}
	return writeJSON(w, http.StatusOK, resp)
}
