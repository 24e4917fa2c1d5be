package admin

// Status is tributaryctl status: the API's GET /v1/status (the status
// page's sections) as text for a terminal, or its JSON as it came.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"
)

// Status is the part of GET /v1/status the text overview prints.
type Status struct {
	Generated time.Time `json:"generated"`
	Shards    []struct {
		Shard     int `json:"shard"`
		Freshness *struct {
			CommitLSN string    `json:"commit_lsn"`
			CommitTS  time.Time `json:"commit_ts"`
			Complete  bool      `json:"complete"`
			Staleness float64   `json:"staleness_seconds"`
		} `json:"freshness"`
		Reader *struct {
			State    string  `json:"state"`
			Progress float64 `json:"snapshot_progress"`
			LagBytes float64 `json:"slot_lag_bytes"`
			Retained float64 `json:"retained_wal_bytes"`
			WAL      string  `json:"wal_status"`
			Errors   float64 `json:"errors"`
			// Resnapshots are the running resnapshots, by table.
			Resnapshots []struct {
				Table         string  `json:"table"`
				Progress      float64 `json:"progress"`
				EstimatedRows float64 `json:"estimated_rows"`
				SweepPending  bool    `json:"sweep_pending"`
			} `json:"resnapshots"`
		} `json:"reader"`
	} `json:"shards"`
	ShardsErr string `json:"shards_error"`
	Stopped   []struct {
		Table  string    `json:"table"`
		Reason string    `json:"reason"`
		Since  time.Time `json:"since"`
	} `json:"stopped_tables"`
	Components struct {
		Configured bool `json:"configured"`
		Endpoints  []struct {
			URL string `json:"url"`
			Err string `json:"error"`
		} `json:"endpoints"`
		Lag []struct {
			Topic     string  `json:"topic"`
			Partition int     `json:"partition"`
			Records   float64 `json:"records"`
		} `json:"loader_lag"`
		DLQTotal float64 `json:"dead_letters_total"`
		DLQ      []struct {
			Reason string  `json:"reason"`
			Count  float64 `json:"count"`
		} `json:"dead_letters"`
		Loaders int `json:"loaders"`
	} `json:"components"`
	Anomalies []struct {
		Title   string   `json:"title"`
		Listing string   `json:"listing"`
		Err     string   `json:"error"`
		Items   []string `json:"items"`
		More    bool     `json:"more"`
	} `json:"anomalies"`
}

// FetchStatus reads GET /v1/status of the API at base with token ("" for
// none), returning the parsed overview and the body as it came.
func FetchStatus(ctx context.Context, client *http.Client, base, token string) (*Status, []byte, error) {
	url := strings.TrimRight(base, "/") + "/v1/status"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("--api %q: %w", base, err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error, Message string }
		if json.Unmarshal(body, &e) == nil && e.Message != "" {
			return nil, nil, fmt.Errorf("GET %s: %d %s: %s", url, resp.StatusCode, e.Error, e.Message)
		}
		return nil, nil, fmt.Errorf("GET %s: %s (an API older than /v1/status answers 404)", url, resp.Status)
	}
	var st Status
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, nil, fmt.Errorf("GET %s: unreadable answer: %w", url, err)
	}
	return &st, body, nil
}

// WriteStatus writes the overview as text: shards, stopped tables, the
// loaders, dead letters and open anomalies, each failure where its
// section would be.
func WriteStatus(w io.Writer, st *Status) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "as of %s\n\n", st.Generated.UTC().Format(time.RFC3339))
	fmt.Fprintln(tw, "SHARD\tFRESH TO\tSTALE\tREADER\tSLOT LAG\tRETAINED WAL\tWAL")
	for _, s := range st.Shards {
		fresh, stale := "-", "-"
		if f := s.Freshness; f != nil {
			fresh = f.CommitLSN
			if !f.Complete {
				fresh += " (incomplete)"
			}
			stale = fmt.Sprintf("%.1fs", f.Staleness)
		}
		state, lag, retained, wal := "no metrics", "-", "-", "-"
		if r := s.Reader; r != nil {
			state = r.State
			if r.State == "snapshotting" {
				state = fmt.Sprintf("snapshotting %.0f%%", 100*r.Progress)
			}
			for _, rs := range r.Resnapshots {
				if rs.SweepPending {
					state += fmt.Sprintf(" (resnapshot of %s copied, sweep pending)", rs.Table)
					continue
				}
				state += fmt.Sprintf(" (resnapshot of %s %.0f%%", rs.Table, 100*rs.Progress)
				if rs.EstimatedRows > 0 {
					state += fmt.Sprintf(" of ~%.0f rows", rs.EstimatedRows)
				}
				state += ")"
			}
			lag, retained, wal = bytesText(r.LagBytes), bytesText(r.Retained), r.WAL
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Shard, fresh, stale, state, lag, retained, wal)
	}
	if st.ShardsErr != "" {
		fmt.Fprintf(tw, "shards: %s\n", st.ShardsErr)
	}
	if err := tw.Flush(); err != nil {
		return err //nolint:wrapcheck // the terminal's error
	}
	for _, t := range st.Stopped {
		fmt.Fprintf(w, "\nSTOPPED table %s since %s: %s\n", t.Table, t.Since.UTC().Format(time.RFC3339), t.Reason)
	}
	c := st.Components
	fmt.Fprintln(w)
	if !c.Configured {
		fmt.Fprintln(w, "components: no metrics endpoints configured on the API (--component-metrics)")
	} else {
		var lag float64
		for _, l := range c.Lag {
			lag += l.Records
		}
		fmt.Fprintf(w, "loaders: %d, lag %.0f records over %d partitions, dead letters %.0f", c.Loaders, lag, len(c.Lag), c.DLQTotal)
		for _, d := range c.DLQ {
			fmt.Fprintf(w, " (%s %.0f)", d.Reason, d.Count)
		}
		fmt.Fprintln(w)
		for _, e := range c.Endpoints {
			if e.Err != "" {
				fmt.Fprintf(w, "metrics endpoint %s failed: %s\n", e.URL, e.Err)
			}
		}
	}
	fmt.Fprintln(w)
	for _, a := range st.Anomalies {
		switch {
		case a.Err != "":
			fmt.Fprintf(w, "%s: unknown (%s)\n", a.Title, a.Err)
		case len(a.Items) == 0:
			fmt.Fprintf(w, "%s: none\n", a.Title)
		default:
			more := ""
			if a.More {
				more = ", more at " + a.Listing
			}
			fmt.Fprintf(w, "%s: %d%s\n", a.Title, len(a.Items), more)
			for _, it := range a.Items {
				fmt.Fprintf(w, "  %s\n", it)
			}
		}
	}
	return nil
}

// bytesText is n bytes in KiB/MiB/GiB.
func bytesText(n float64) string {
	for _, u := range []string{"B", "KiB", "MiB", "GiB"} {
		if n < 1024 || u == "GiB" {
			if u == "B" {
				return fmt.Sprintf("%.0f B", n)
			}
			return fmt.Sprintf("%.1f %s", n, u)
		}
		n /= 1024
	}
	return ""
}
