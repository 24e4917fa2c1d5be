package latency

import (
	"math"
	"strings"
	"testing"

	"github.com/tributary/tributary/bench/internal/benchwork"
)

// TestLatStageSummaries: bucket counts of two scrapes give the run's
// observations per stage, their interpolated quantiles and mean.
func TestLatStageSummaries(t *testing.T) {
	scrape := func(text string) benchwork.Scrape {
		out := benchwork.Scrape{}
		out.Parse(strings.NewReader(text))
		return out
	}
	before := scrape(`tributary_loader_freshness_seconds_bucket{stage="kafka",le="0.01"} 5
tributary_loader_freshness_seconds_bucket{stage="kafka",le="0.02"} 5
tributary_loader_freshness_seconds_bucket{stage="kafka",le="+Inf"} 5
tributary_loader_freshness_seconds_sum{stage="kafka"} 0.02
tributary_loader_freshness_seconds_count{stage="kafka"} 5
`)
	// 100 more: 50 below 10 ms, 49 in (10, 20] ms, 1 above.
	after := scrape(`tributary_loader_freshness_seconds_bucket{stage="kafka",le="0.01"} 55
tributary_loader_freshness_seconds_bucket{stage="kafka",le="0.02"} 104
tributary_loader_freshness_seconds_bucket{stage="kafka",le="+Inf"} 105
tributary_loader_freshness_seconds_sum{stage="kafka"} 1.52
tributary_loader_freshness_seconds_count{stage="kafka"} 105
tributary_loader_freshness_seconds_bucket{stage="batch",le="0.01"} 0
tributary_loader_freshness_seconds_bucket{stage="batch",le="+Inf"} 0
`)
	rows := stageSummaries(before, after)
	if len(rows) != 1 || rows[0].Name != "loader: produced -> polled" {
		t.Fatalf("rows %+v, want the kafka stage only (batch has no observations)", rows)
	}
	r := rows[0]
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if r.N != 100 || !near(r.P50MS, 10) || !near(r.P99MS, 20) || !near(r.MeanMS, 15) {
		t.Errorf("kafka stage %+v, want n 100, p50 10 ms, p99 20 ms, mean 15 ms", r)
	}
	// Within a bucket, linear: rank 75 of 100 is 25 of the 49 in (10, 20].
	if got, want := bucketQuantile(0.75, []float64{0.01, 0.02, math.Inf(1)}, []float64{50, 99, 100}), 0.01+0.01*25/49; !near(got, want) {
		t.Errorf("p75 = %v, want %v", got, want)
	}
}
