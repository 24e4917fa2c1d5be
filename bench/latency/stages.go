package latency

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/tributary/tributary/bench/internal/benchwork"
)

// The pipeline's own per-stage freshness histograms, read before and after
// a run (the reader's commit → Kafka ack, the loader's stages of a
// watermark record, the API's watermark reading → answer), so that the
// run says where its milliseconds went.

// stage is one histogram (and stage label value, if any) of the table.
type stage struct {
	name, metric, stage string
}

// stages are the rows of the stage table, in pipeline order.
var stages = []stage{
	{"reader: commit -> Kafka ack", "tributary_reader_commit_ack_seconds", ""},
	{"loader: commit -> produced", "tributary_loader_freshness_seconds", "reader"},
	{"loader: produced -> polled", "tributary_loader_freshness_seconds", "kafka"},
	{"loader: polled -> handed over", "tributary_loader_freshness_seconds", "batch"},
	{"loader: handed over -> inserted", "tributary_loader_freshness_seconds", "insert"},
	{"loader: inserted -> watermark", "tributary_loader_freshness_seconds", "watermark"},
	{"loader: commit -> watermark (sum)", "tributary_loader_watermark_delay_seconds", ""},
	{"api: watermark read -> answer", "tributary_api_read_after_watermark_seconds", ""},
}

// stageSummary is one row of the stage table (ms; the quantiles are
// interpolated within the histogram's buckets, as Prometheus does).
type stageSummary struct {
	Name   string  `json:"name"`
	N      float64 `json:"n"`
	P50MS  float64 `json:"p50_ms"`
	P99MS  float64 `json:"p99_ms"`
	MeanMS float64 `json:"mean_ms"`
}

// stageSummaries are the stage rows of the observations between
// scrapes a and b; stages with none are left out.
func stageSummaries(a, b benchwork.Scrape) []stageSummary {
	var out []stageSummary
	for _, st := range stages {
		prefix := st.metric + "_bucket|stage=" + st.stage + "|le="
		var bounds []float64
		counts := map[float64]float64{}
		for k, v := range b {
			le, ok := strings.CutPrefix(k, prefix)
			if !ok {
				continue
			}
			bound, err := strconv.ParseFloat(le, 64) // "+Inf" parses as +Inf
			if err != nil {
				continue
			}
			bounds = append(bounds, bound)
			counts[bound] = v - a[k]
		}
		slices.Sort(bounds)
		if len(bounds) == 0 || counts[bounds[len(bounds)-1]] <= 0 {
			continue
		}
		cum := make([]float64, len(bounds))
		for i, bd := range bounds {
			cum[i] = counts[bd]
		}
		sumKey, countKey := st.metric+"_sum", st.metric+"_count"
		if st.stage != "" {
			sumKey, countKey = benchwork.Key(sumKey, "stage", st.stage), benchwork.Key(countKey, "stage", st.stage)
		}
		n := cum[len(cum)-1]
		mean := 0.0
		if c := b[countKey] - a[countKey]; c > 0 {
			mean = (b[sumKey] - a[sumKey]) / c
		}
		out = append(out, stageSummary{Name: st.name, N: n,
			P50MS: 1000 * bucketQuantile(0.5, bounds, cum), P99MS: 1000 * bucketQuantile(0.99, bounds, cum), MeanMS: 1000 * mean})
	}
	return out
}

// bucketQuantile is the q-quantile of a histogram with cumulative
// counts cum at upper bounds (ascending, the last +Inf), interpolated
// linearly within the bucket it falls in (the lowest from 0); in the +Inf
// bucket it is the highest finite bound.
func bucketQuantile(q float64, bounds, cum []float64) float64 {
	n := cum[len(cum)-1]
	rank := q * n
	for i, c := range cum {
		if c < rank {
			continue
		}
		if math.IsInf(bounds[i], 1) {
			if i == 0 {
				return 0
			}
			return bounds[i-1]
		}
		lo, below := 0.0, 0.0
		if i > 0 {
			lo, below = bounds[i-1], cum[i-1]
		}
		if c == below {
			return bounds[i]
		}
		return lo + (bounds[i]-lo)*(rank-below)/(c-below)
	}
	return bounds[len(bounds)-1]
}

// printStages prints the stage table.
func printStages(rows []stageSummary) {
	if len(rows) == 0 {
		fmt.Println("stages: no per-stage histograms scraped (a pipeline older than them, or no metrics endpoints)")
		return
	}
	fmt.Printf("\n%-34s %8s %8s %8s %8s   (the pipeline's own histograms over the run)\n", "stage", "n", "p50", "p99", "mean")
	for _, r := range rows {
		fmt.Printf("%-34s %8.0f %8s %8s %8s\n", r.Name, r.N, ms(r.P50MS), ms(r.P99MS), ms(r.MeanMS))
	}
}
