package tests

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary/tributary/internal/verify"
)

// TestVerifyRevenue: the verifier compares GET /v1/revenue, by month, shard
// and workspace, with the shards' own sums (partial refunds included), and
// catches a difference: an amount changed at the source that the pipeline
// never saw (its reader stopped).
func TestVerifyRevenue(t *testing.T) {
	p := setupRevenuePipeline(t, []int{0, 1}, true)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	runCtx, runCancel := context.WithCancel(context.Background())
	defer runCancel()
	readers, stopReaders := context.WithCancel(runCtx)
	for _, s := range p.shards {
		p.startReader(readers, s)
	}
	p.startLoader(runCtx, "l1")
	rng := rand.New(rand.NewPCG(5, 9))
	ids := map[int][]int64{}
	for _, s := range p.shards {
		ids[s] = p.insertRevenueOrders(ctx, s, revGenOrders(rng, 150))
	}
	tbl := pgx.Identifier{p.table()}.Sanitize()
	p.exec(ctx, 0, "UPDATE "+tbl+" SET state = 'paid', refunded = round(total / 4, 2) WHERE id = ANY($1)", ids[0][:10])
	p.waitRevenueFresh(ctx, p.revenueWALPositions(ctx))

	rep := p.runVerify(ctx)
	if !rep.Passed || rep.Revenue == nil || rep.Revenue.Groups < 20 {
		t.Fatalf("verify on an intact pipeline: passed %v, revenue %+v, differences %+v", rep.Passed, rep.Revenue, rep.Differences)
	}

	// The readers stop; a paid order's amount changes at the source only.
	stopReaders()
	p.exec(ctx, 1, "UPDATE "+tbl+" SET total = total + 1000, state = 'paid' WHERE id = $1", ids[1][0])
	rep = p.runVerifyWait(ctx, 3*time.Second)
	if rep.Passed || rep.Mismatches.Revenue == 0 {
		t.Fatalf("a source-only change of an amount: mismatches %+v", rep.Mismatches)
	}
	found := false
	for _, d := range rep.Differences {
		found = found || (d.Kind == verify.KindRevenue && strings.HasPrefix(d.ID, "shard,currency=1|"))
	}
	if !found {
		t.Errorf("no revenue difference for shard 1: %+v", rep.Differences)
	}
}
