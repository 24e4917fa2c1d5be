package api

// GET /v1/anomalies/duplicates: ids live on more than one shard, as the
// loader records them (newest first, a page at a time).

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/tributary/tributary/internal/query"
)

// Anomaly listing limits.
const (
	defaultAnomalyLimit = 50
	maxAnomalyLimit     = query.MaxAnomalyLimit
)

// parseDuplicatesQuery validates a raw query string. tables are the
// configured table names (the default set, and what table= may name).
func parseDuplicatesQuery(raw string, tables []string) (query.DuplicatesRequest, [8]byte, error) {
	req := query.DuplicatesRequest{State: query.StateOpen, Limit: defaultAnomalyLimit}
	var filters [8]byte
	v, err := url.ParseQuery(raw)
	if err != nil {
		return req, filters, badRequest("bad_query", "the query string is malformed: %v", err)
	}
	known := map[string]bool{"table": true, "state": true, "limit": true, "cursor": true, "after": true, "wait": true}
	for k, vals := range v {
		if !known[k] {
			return req, filters, badRequest("unknown_parameter", "unknown parameter %q; use table, state, limit, cursor, after, wait", k)
		}
		if k != "after" && len(vals) > 1 {
			return req, filters, badRequest("bad_"+k, "%s may be given once", k)
		}
	}
	req.Tables = tables
	if t := v.Get("table"); t != "" {
		if !slices.Contains(tables, t) {
			return req, filters, badRequest("bad_table", "table %q is not a replicated table", clip(t))
		}
		req.Tables = []string{t}
	}
	if st := v.Get("state"); st != "" {
		if !slices.Contains(query.AnomalyStates, query.AnomalyState(st)) {
			return req, filters, badRequest("bad_state", "state %q is not one of open, alerting, all", clip(st))
		}
		req.State = query.AnomalyState(st)
	}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > maxAnomalyLimit {
			return req, filters, badRequest("bad_limit", "limit %q is not a number in 1..%d", clip(l), maxAnomalyLimit)
		}
		req.Limit = n
	}
	filters = filterPrint("duplicates", v.Get("table"), string(req.State))
	c, err := cursorParam(v.Get("cursor"), cursorAnomalies, filters)
	if err != nil {
		return req, filters, err
	}
	if c != nil {
		if !slices.Contains(tables, c.table) || c.id == "" || c.from != 0 || c.shard != 0 {
			return req, filters, badRequest("bad_cursor", "cursor is not one this API returned; start again without it")
		}
		req.After = &query.AnomalyKey{FirstSeen: time.Unix(c.time, 0).UTC(), Table: c.table, ID: c.id}
	}
	return req, filters, nil
}

// duplicatesResponse is the answer of GET /v1/anomalies/duplicates.
type duplicatesResponse struct {
	State     query.AnomalyState     `json:"state"`
	Anomalies []query.Anomaly        `json:"anomalies"`
	Next      string                 `json:"next_cursor,omitempty"`
	Freshness []query.ShardFreshness `json:"freshness"`
}

func (s *Server) duplicates(w http.ResponseWriter, r *http.Request) error {
	names := make([]string, len(s.cfg.Tables.Tables))
	for i, t := range s.cfg.Tables.Tables {
		names[i] = t.Name
	}
	req, filters, err := parseDuplicatesQuery(r.URL.RawQuery, names)
	if err != nil {
		return err
	}
	var topics []string
	for _, name := range req.Tables {
		t, _ := s.cfg.Tables.ByName(name)
		topics = append(topics, t.Topic)
	}
	fresh, err := s.freshness(w, r, topics)
	if err != nil {
		return err
	}
	page, err := s.q.Duplicates(r.Context(), req)
	if err != nil {
		return err
	}
	resp := duplicatesResponse{State: req.State, Anomalies: page.Anomalies, Freshness: fresh}
	if page.More && len(page.Anomalies) > 0 {
		k := page.Anomalies[len(page.Anomalies)-1].Key()
		resp.Next = cursor{kind: cursorAnomalies, filters: filters, time: k.FirstSeen.Unix(), table: k.Table, id: k.ID}.encode()
	}
	return writeJSON(w, http.StatusOK, resp)
}
