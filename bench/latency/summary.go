package latency

// The run's summaries: percentiles of the samples, and what the
// pipeline's own metrics say about the run.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tributary/tributary/bench/internal/benchwork"
	"github.com/tributary/tributary/internal/flagenv"
)

// summaries builds the table's rows.
func summaries(samples []sample, visible bool) []summary {
	row := func(name string, get func(sample) (float64, string)) summary {
		return summarize(name, len(samples), func(i int) (float64, string) { return get(samples[i]) })
	}
	ryw := row(rywRow, func(s sample) (float64, string) { return s.RYWMS, s.RYWOutcome })
	commit := row("(INSERT+COMMIT round trip)", func(s sample) (float64, string) {
		if s.Err != "" {
			return 0, "error"
		}
		return s.CommitMS, "ok"
	})
	if !visible {
		return []summary{ryw, commit}
	}
	return []summary{
		ryw,
		row(visibleRow, func(s sample) (float64, string) { return s.VisibleMS, s.VisibleOutcome }),
		row("  difference, same sample", func(s sample) (float64, string) {
			if s.RYWOutcome != "ok" || s.VisibleOutcome != "ok" {
				return 0, "either failed"
			}
			return s.RYWMS - s.VisibleMS, "ok"
		}),
		commit,
	}
}

// summarize is the row name over n samples, get(i) giving sample i's
// latency and outcome ("ok" or the failure's kind).
func summarize(name string, n int, get func(i int) (float64, string)) summary {
	r := summary{Name: name, N: n, Fails: map[string]int{}}
	var ok []float64
	for i := range n {
		v, outcome := get(i)
		if outcome == "ok" {
			ok = append(ok, v)
		} else {
			r.Fails[outcome]++
		}
	}
	r.OK = len(ok)
	if len(ok) > 0 {
		slices.Sort(ok)
		var sum float64
		for _, v := range ok {
			sum += v
		}
		r.P50MS, r.P90MS, r.P99MS = quantile(ok, 0.50), quantile(ok, 0.90), quantile(ok, 0.99)
		r.MaxMS, r.MeanMS = ok[len(ok)-1], sum/float64(len(ok))
	}
	return r
}

// quantile is the nearest-rank quantile of sorted values.
func quantile(sorted []float64, q float64) float64 {
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func ms(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) + "ms" }

func fails(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// scrape reads the pipeline's /metrics endpoints (loader, readers, API);
// an endpoint that does not answer is left out.
func (b *bench) scrape(ctx context.Context) benchwork.Scrape {
	out := benchwork.Scrape{}
	var targets []string
	if b.cfg.loaderMetrics != "" {
		targets = append(targets, "http://"+b.cfg.loaderMetrics+"/metrics")
	}
	for _, a := range flagenv.List(b.cfg.readerMetrics) {
		targets = append(targets, "http://"+a+"/metrics")
	}
	targets = append(targets, b.cfg.apiURL+"/metrics")
	for _, t := range targets {
		resp, err := b.get(ctx, t)
		if err != nil {
			continue
		}
		out.Parse(resp.Body)
		resp.Body.Close()
	}
	return out
}

// derived is what the pipeline's own metrics say about the run.
type derived struct {
	LoaderBatches         float64            `json:"loader_batches"`
	LoaderRecordsPerBatch float64            `json:"loader_records_per_batch"`
	LoaderStageMSPerBatch map[string]float64 `json:"loader_stage_ms_per_batch"`
	LoaderInsertMS        float64            `json:"loader_insert_ms_mean"`
	ReaderProduceMS       float64            `json:"reader_produce_ack_ms_mean"`
	ReaderWatermarkEvery  float64            `json:"reader_watermark_interval_ms"`
	APIWaitMS             float64            `json:"api_after_wait_ms_mean"`
	APIDocumentMS         float64            `json:"api_document_request_ms_mean"`
	APIDocumentRequests   float64            `json:"api_document_requests"`
}

func derive(a, b benchwork.Scrape, wall time.Duration) derived {
	d := func(k string) float64 { return b[k] - a[k] }
	ratio := func(x, y float64) float64 {
		if y <= 0 {
			return 0
		}
		return x / y
	}
	var out derived
	out.LoaderBatches = d("tributary_loader_batch_records_count")
	out.LoaderRecordsPerBatch = ratio(d("tributary_loader_batch_records_sum"), out.LoaderBatches)
	out.LoaderStageMSPerBatch = map[string]float64{}
	for st, secs := range benchwork.LoaderStageSeconds(a, b) {
		out.LoaderStageMSPerBatch[st] = 1000 * ratio(secs, out.LoaderBatches)
	}
	out.LoaderInsertMS = benchwork.MeanMS(a, b, "tributary_loader_insert_seconds")
	out.ReaderProduceMS = benchwork.MeanMS(a, b, "tributary_reader_produce_seconds")
	// Watermark rounds summed over the readers: per reader, the interval.
	if wm := d("tributary_reader_watermarks_total"); wm > 0 {
		readers := 0
		for k := range b {
			if strings.HasPrefix(k, "tributary_reader_watermarks_total|shard=") {
				readers++
			}
		}
		out.ReaderWatermarkEvery = 1000 * wall.Seconds() * float64(readers) / wm
	}
	out.APIWaitMS = 1000 * ratio(d(benchwork.Key("tributary_api_read_wait_seconds_sum", "outcome", "visible")),
		d(benchwork.Key("tributary_api_read_wait_seconds_count", "outcome", "visible")))
	route := "GET /v1/documents/{id}"
	out.APIDocumentRequests = d(benchwork.Key("tributary_api_request_seconds_count", "route", route))
	out.APIDocumentMS = 1000 * ratio(d(benchwork.Key("tributary_api_request_seconds_sum", "route", route)), out.APIDocumentRequests)
	return out
}

func printDerived(d derived) {
	if d.LoaderBatches == 0 && d.APIDocumentRequests == 0 {
		fmt.Println("pipeline metrics: none scraped (--loader-metrics, --reader-metrics)")
		return
	}
	fmt.Printf("loader: %.0f batches, %.0f records/batch, mean insert %.1f ms; per batch (ms):", d.LoaderBatches, d.LoaderRecordsPerBatch, d.LoaderInsertMS)
	stages := make([]string, 0, len(d.LoaderStageMSPerBatch))
	for st := range d.LoaderStageMSPerBatch {
		stages = append(stages, st)
	}
	slices.Sort(stages)
	for _, st := range stages {
		fmt.Printf(" %s %.1f", st, d.LoaderStageMSPerBatch[st])
	}
	fmt.Println()
	fmt.Printf("readers: mean produce ack %.1f ms, a watermark every %.0f ms per reader\n", d.ReaderProduceMS, d.ReaderWatermarkEvery)
	fmt.Printf("api: %.0f document requests, mean %.1f ms each; after= requests waited %.1f ms on average for the watermark\n",
		d.APIDocumentRequests, d.APIDocumentMS, d.APIWaitMS)
}
