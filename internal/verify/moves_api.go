package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// apiDocument is the part of GET /v1/documents/{id} the move check reads.
type apiDocument struct {
	Status    int // HTTP status: 200, or 404 for no live copy
	Shards    []int
	Duplicate bool
	MoveID    string
	// MoveLogShard is the shard the move's log row lives on (with MoveID,
	// the move's identity).
	MoveLogShard int
	MoveState    string
	Anomaly      string // "stuck", "lost" or ""
}

// document reads GET /v1/documents/{id}.
func (c *apiClient) document(ctx context.Context, id string) (*apiDocument, error) {
	path := "/v1/documents/" + url.PathEscape(id)
	status, body, err := c.get(ctx, path)
	if err != nil {
		return nil, err
	}
	type moveBlock struct {
		MoveID   string `json:"move_id"`
		LogShard int    `json:"log_shard"`
		State    string `json:"state"`
	}
	type anomaly struct {
		Kind string `json:"kind"`
	}
	var ans struct {
		Copies []struct {
			Shard int `json:"shard"`
		} `json:"copies"`
		Duplicate bool       `json:"duplicate"`
		Move      *moveBlock `json:"move"`
		Anomaly   *anomaly   `json:"anomaly"`
		Code      string     `json:"error"`
		Detail    struct {
			Move    *moveBlock `json:"move"`
			Anomaly *anomaly   `json:"anomaly"`
		} `json:"detail"`
	}
	if status != http.StatusOK && status != http.StatusNotFound {
		return nil, apiError(status, body, path)
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		return nil, fmt.Errorf("api %s: decode: %w", path, err)
	}
	if status == http.StatusNotFound && ans.Code != "not_found" {
		return nil, apiError(status, body, path)
	}
	d := &apiDocument{Status: status, Duplicate: ans.Duplicate}
	for _, c := range ans.Copies {
		d.Shards = append(d.Shards, c.Shard)
	}
	mv, an := ans.Move, ans.Anomaly
	if status == http.StatusNotFound {
		mv, an = ans.Detail.Move, ans.Detail.Anomaly
	}
	if mv != nil {
		d.MoveID, d.MoveLogShard, d.MoveState = mv.MoveID, mv.LogShard, mv.State
	}
	if an != nil {
		d.Anomaly = an.Kind
	}
	return d, nil
}

// moveAnomalies reads every page of GET /v1/anomalies/moves: moveKey (log
// shard and move id) -> kind, and the cutoff of the first page. ok is false when the API has no
// move log configured.
func (c *apiClient) moveAnomalies(ctx context.Context) (map[string]string, time.Time, bool, error) {
	out := map[string]string{}
	var cutoff time.Time
	next := ""
	for page := 0; page < 10000; page++ {
		path := "/v1/anomalies/moves?limit=500"
		if next != "" {
			path += "&cursor=" + url.QueryEscape(next)
		}
		status, body, err := c.get(ctx, path)
		if err != nil {
			return nil, cutoff, false, err
		}
		if status != http.StatusOK {
			e := apiError(status, body, path)
			if status == http.StatusNotFound && e.Code == "no_move_log" {
				return nil, cutoff, false, nil
			}
			return nil, cutoff, false, e
		}
		var ans struct {
			Anomalies []struct {
				MoveID   string `json:"move_id"`
				LogShard *int   `json:"log_shard"`
				Kind     string `json:"kind"`
			} `json:"anomalies"`
			Next   string    `json:"next_cursor"`
			Cutoff time.Time `json:"cutoff"`
		}
		if err := json.Unmarshal(body, &ans); err != nil {
			return nil, cutoff, false, fmt.Errorf("api %s: decode: %w", path, err)
		}
		if page == 0 {
			cutoff = ans.Cutoff
		}
		for _, a := range ans.Anomalies {
			if a.LogShard == nil {
				return nil, cutoff, false, fmt.Errorf("api %s: move %s has no log_shard (an API older than this verifier?)", path, a.MoveID)
			}
			out[moveKey(*a.LogShard, a.MoveID)] = a.Kind
		}
		if ans.Next == "" {
			return out, cutoff, true, nil
		}
		next = ans.Next
	}
	return nil, cutoff, false, fmt.Errorf("api /v1/anomalies/moves: more than 10000 pages")
}
