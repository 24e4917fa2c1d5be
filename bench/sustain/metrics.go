package sustain

// What a step reads of the pipeline: its metrics and the API's staleness.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/tributary/tributary/bench/internal/benchwork"
)

// scrape reads the pipeline's metrics and the API's staleness.
func scrape(ctx context.Context, c config) (sample, error) {
	var s sample
	out := benchwork.Scrape{}
	targets := append([]string{c.loaderMetrics}, c.readerMetrics...)
	for i, t := range targets {
		if err := benchwork.ScrapeURL(ctx, "http://"+t+"/metrics", out); err != nil {
			what := "the loader's"
			if i > 0 {
				what = "a reader's"
			}
			return s, fmt.Errorf("%s metrics (%s): %w (is the demo running? make demo)", what, t, err)
		}
	}
	s.Changes = out["tributary_reader_changes_total"]
	s.Records = out["tributary_loader_records_total"]
	s.Rows = out["tributary_loader_rows_inserted_total"]
	s.Backlog = out["tributary_loader_consumer_lag_records"]
	s.ReaderLagB = out["tributary_reader_lag_bytes"]
	s.Staleness = apiStaleness(ctx, c.apiURL)
	return s, nil
}

// scrapeFull is every metric of the loader and the readers, summed
// (and per label value: see benchwork.Scrape).
func scrapeFull(ctx context.Context, c config) (benchwork.Scrape, error) {
	out := benchwork.Scrape{}
	for _, t := range append([]string{c.loaderMetrics}, c.readerMetrics...) {
		if err := benchwork.ScrapeURL(ctx, "http://"+t+"/metrics", out); err != nil {
			return nil, fmt.Errorf("metrics (%s): %w", t, err)
		}
	}
	return out, nil
}

// pipeline is what the pipeline's own counters say about a step: where
// the loader's time went and how long the readers waited for Kafka.
type pipeline struct {
	LoaderBatches         float64 `json:"loader_batches"`
	LoaderRecordsPerBatch float64 `json:"loader_records_per_batch"`
	// LoaderStageBusy is, per stage, the stage's seconds per second of the
	// step (1.0: the loader's loop spent the whole step in it).
	LoaderStageBusy map[string]float64 `json:"loader_stage_busy"`
	// LoaderStageMSPerBatch is the stage's time per batch.
	LoaderStageMSPerBatch map[string]float64 `json:"loader_stage_ms_per_batch"`
	// LoaderApplyBusy sums the stages that apply a batch (all but poll and
	// decode, which the poller overlaps with them): near 1, the loader is
	// never idle waiting for records. Above 1 when stages of consecutive
	// batches overlap (a batch's duplicate check runs beside the next
	// batch's inserts).
	LoaderApplyBusy float64 `json:"loader_apply_busy"`
	ReaderProduceMS float64 `json:"reader_produce_ack_ms_mean"`
	// ReaderLagSecondsMax is the largest tributary_reader_lag_seconds of a
	// shard at the step's end.
	ReaderLagSecondsMax float64 `json:"reader_lag_seconds_max"`
	ReaderRecordsPerS   float64 `json:"reader_records_produced_per_s"`
}

// derive computes a step's pipeline from the counters before and after.
func derive(a, b benchwork.Scrape, wall time.Duration) pipeline {
	d := func(k string) float64 { return b[k] - a[k] }
	var p pipeline
	secs := wall.Seconds()
	if secs <= 0 {
		return p
	}
	p.LoaderBatches = d("tributary_loader_batch_records_count")
	if p.LoaderBatches > 0 {
		p.LoaderRecordsPerBatch = d("tributary_loader_batch_records_sum") / p.LoaderBatches
	}
	p.LoaderStageBusy, p.LoaderStageMSPerBatch = map[string]float64{}, map[string]float64{}
	for st, ss := range benchwork.LoaderStageSeconds(a, b) {
		p.LoaderStageBusy[st] = ss / secs
		if p.LoaderBatches > 0 {
			p.LoaderStageMSPerBatch[st] = 1000 * ss / p.LoaderBatches
		}
		if st != "poll" && st != "decode" {
			p.LoaderApplyBusy += ss / secs
		}
	}
	p.ReaderProduceMS = benchwork.MeanMS(a, b, "tributary_reader_produce_seconds")
	for k, v := range b {
		if strings.HasPrefix(k, "tributary_reader_lag_seconds|shard=") {
			p.ReaderLagSecondsMax = max(p.ReaderLagSecondsMax, v)
		}
	}
	p.ReaderRecordsPerS = d("tributary_reader_records_produced_total") / secs
	return p
}

// stageList prints stages in a fixed order, the others after them.
func stageList(m map[string]float64, format string) string {
	order := []string{"poll", "decode", "convert", "read", "insert", "detect", "replicas", "watermarks", "dlq", "commit"}
	for k := range m {
		if !slices.Contains(order, k) {
			order = append(order, k)
		}
	}
	var parts []string
	for _, k := range order {
		if v, ok := m[k]; ok {
			parts = append(parts, k+" "+fmt.Sprintf(format, v))
		}
	}
	return strings.Join(parts, ", ")
}

// apiStaleness is the largest staleness_seconds of GET /v1/shards, or -1.
func apiStaleness(ctx context.Context, base string) float64 {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/shards", nil)
	if err != nil {
		return -1
	}
	if tok := os.Getenv("TRIBUTARY_API_TOKEN"); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var body struct {
		Shards []struct {
			Staleness float64 `json:"staleness_seconds"`
		} `json:"shards"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body) != nil || len(body.Shards) == 0 {
		return -1
	}
	worst := 0.0
	for _, sh := range body.Shards {
		worst = max(worst, sh.Staleness)
	}
	return worst
}
