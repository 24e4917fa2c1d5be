package tests

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tributary/tributary/internal/loader"
)

// TestLoaderLagReachesZero: once a pipeline has converged, the loader's
// lag metric reads 0 on every partition, and keeps reading 0, although
// the readers go on writing watermark rounds (one record to every
// partition, several a second here) that are in Kafka and not yet
// committed at almost any instant. The metric used to count such a round
// whenever a sample met one in flight, so it read 1 on every partition of
// a converged pipeline for minutes and a lag alert could never clear.
func TestLoaderLagReachesZero(t *testing.T) {
	t.Parallel()
	p := setupPipeline(t, []int{0, 1}, nil, true)
	runCtx, runCancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		runCancel()
		p.wg.Wait()
	})
	for _, s := range p.shards {
		p.startReader(runCtx, s)
	}
	const interval = 2 * time.Second
	reg := p.startMeteredLoader(runCtx, "l1", func(c *loader.Config) { c.LagInterval = interval })

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for i := range 200 {
		p.insert(ctx, p.shards[i%2], int64(i%7), fmt.Sprintf("doc %d", i), "")
	}
	p.waitFor(ctx, 2*time.Minute, "the 200 rows in ClickHouse", func() bool { return p.compare(ctx, p.table()) == "" })

	parts := p.partitions(ctx)
	reading := func() (string, bool) {
		var vals []string
		zero := true
		for part := range parts {
			v, ok := metricOf(t, reg, "tributary_loader_consumer_lag_records",
				map[string]string{"topic": p.topic(), "partition": strconv.Itoa(part)})
			if !ok {
				vals = append(vals, "none")
				zero = false
				continue
			}
			vals = append(vals, strconv.FormatFloat(v, 'f', -1, 64))
			zero = zero && v == 0
		}
		return strings.Join(vals, " "), zero
	}
	// Reaches 0 on every partition at once...
	start := time.Now()
	p.waitFor(ctx, 2*time.Minute, "the lag metric at 0 on every partition", func() bool {
		_, zero := reading()
		return zero
	})
	t.Logf("lag 0 on all %d partitions %s after convergence", parts, time.Since(start).Round(time.Millisecond))
	// ...and stays there over ten samples, each with rounds in flight.
	for i := range 10 {
		time.Sleep(interval)
		if err := p.failed(); err != nil {
			t.Fatal(err)
		}
		if vals, zero := reading(); !zero {
			t.Fatalf("sample %d after convergence: lag per partition %s, want 0 on every one", i+1, vals)
		}
	}
}
