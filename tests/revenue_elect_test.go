package tests

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/loader"
)

// TestRevenueAggregatorElected: two loaders in one group, both candidates
// to aggregate; exactly one (the owner of the revenue topic's partition 0)
// runs the aggregator, and when it stops the other takes over. Revenue
// from the pre-aggregates stays exact throughout.
func TestRevenueAggregatorElected(t *testing.T) {
	p := setupRevenuePipeline(t, []int{0, 1}, true)
	cfg := p.tables.Revenue
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	runCtx, runCancel := context.WithCancel(context.Background())
	defer runCancel()
	for _, s := range p.shards {
		p.startReader(runCtx, s)
	}
	candidate := func(c *loader.Config) {
		c.RevenueAggregator, c.PreaggInterval, c.PreaggBlockBits = true, 200*time.Millisecond, 30
	}
	ctxs := map[string]context.CancelFunc{}
	regs := map[string]*prometheus.Registry{}
	for _, name := range []string{"l1", "l2"} {
		lctx, lcancel := context.WithCancel(runCtx)
		ctxs[name], regs[name] = lcancel, p.startMeteredLoader(lctx, name, candidate)
	}
	leaders := func(names ...string) []string {
		var out []string
		for _, n := range names {
			if v, _ := metricOf(t, regs[n], "tributary_preagg_leader", nil); v == 1 {
				out = append(out, n)
			}
		}
		return out
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for _, s := range p.shards {
		p.insertRevenueOrders(ctx, s, revGenOrders(rng, 200))
	}
	p.preagg = true
	p.waitRevenueFresh(ctx, p.revenueWALPositions(ctx))

	rounds := func(n string) float64 {
		sum := 0.0
		for _, o := range []string{"incremental", "full", "idle", "waiting"} {
			v, _ := metricOf(t, regs[n], "tributary_preagg_rounds_total", map[string]string{"outcome": o})
			sum += v
		}
		return sum
	}
	// Once the group has settled on a leader, sampled for a few seconds:
	// never two, the same one, and only it runs rounds.
	deadline := time.Now().Add(60 * time.Second)
	for len(leaders("l1", "l2")) != 1 {
		if l := leaders("l1", "l2"); len(l) > 1 {
			t.Fatalf("two aggregators at once: %v", l)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no single aggregator after a minute: %v", leaders("l1", "l2"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	leader := leaders("l1", "l2")[0]
	other := "l1"
	if leader == "l1" {
		other = "l2"
	}
	r0 := map[string]float64{leader: rounds(leader), other: rounds(other)}
	for i := 0; i < 20; i++ {
		if l := leaders("l1", "l2"); !slices.Equal(l, []string{leader}) {
			t.Fatalf("aggregators %v, want only %s", l, leader)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if d := rounds(leader) - r0[leader]; d == 0 {
		t.Errorf("leader %s ran no round in 4 s", leader)
	}
	if d := rounds(other) - r0[other]; d != 0 {
		t.Errorf("%s, not the leader, ran %v rounds", other, d)
	}
	p.compareRevenue(ctx, cfg, revFrom, revTo, []string{"day"}, nil, nil, nil)

	// The leader stops: the other one takes partition 0 and the aggregator.
	ctxs[leader]()
	deadline = time.Now().Add(90 * time.Second)
	for !slices.Equal(leaders(other), []string{other}) {
		if time.Now().After(deadline) {
			t.Fatalf("%s never took over the aggregator after %s stopped", other, leader)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, s := range p.shards {
		p.insertRevenueOrders(ctx, s, revGenOrders(rng, 50))
	}
	p.waitRevenueFresh(ctx, p.revenueWALPositions(ctx))
	p.compareRevenue(ctx, cfg, revFrom, revTo, []string{"day", "shard"}, nil, nil, nil)
}
