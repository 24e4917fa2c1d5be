package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/loader"
)

// TestLoaderBatchBytes: with large rows waiting in Kafka, the loader's
// batches stay within --batch-bytes (its memory bound), however many
// records --batch-records would allow, and every row still arrives whole.
func TestLoaderBatchBytes(t *testing.T) {
	const (
		rows     = 400
		bodySize = 8000
		bound    = 64 << 10
	)
	p, ctx, runCtx := oneShardPipeline(t, 3*time.Minute)
	p.startReader(runCtx, 0)
	p.exec(ctx, 0, fmt.Sprintf(`INSERT INTO %s (workspace_id, title, body)
		SELECT g, 'doc ' || g, repeat(chr(97 + g %% 26), %d) FROM generate_series(1, %d) g`,
		pgx.Identifier{p.table()}.Sanitize(), bodySize, rows))

	// Every row is in Kafka before the loader starts, so that nothing but
	// the bounds ends its first batches (~3.3 MB would fit one fetch).
	p.waitChanges(ctx, rows)
	reg := p.startMeteredLoader(runCtx, "l1", func(c *loader.Config) {
		c.BatchBytes = bound
		c.BatchWait = time.Second
	})
	p.waitFor(ctx, 2*time.Minute, "every row in ClickHouse", func() bool {
		var n uint64
		q := fmt.Sprintf("SELECT count() FROM `%s`.`%s` FINAL WHERE _deleted = 0", p.chDB, p.table())
		return p.store.Conn().QueryRow(ctx, q).Scan(&n) == nil && n == rows // the table appears with the first batch
	})
	if got := p.chCount(ctx, "SELECT toUInt64(sum(length(body))) FROM %[1]s.%[2]s FINAL WHERE _deleted = 0"); got != rows*bodySize {
		t.Errorf("bodies hold %d bytes in ClickHouse, want %d", got, rows*bodySize)
	}

	count, sum, within := histogramWithin(t, reg, "tributary_loader_batch_bytes", 4*bound)
	t.Logf("%d batches, %.0f bytes, %d of them <= %d bytes", count, sum, within, 4*bound)
	if sum < rows*bodySize {
		t.Errorf("batches held %.0f bytes, want >= %d (every row's body)", sum, rows*bodySize)
	}
	// A batch ends within about one record of the bound (~8.3 KB here):
	// none reaches the histogram's next bucket, 4x the bound.
	if within != count {
		t.Errorf("%d of %d batches over %d bytes (bound %d)", count-within, count, 4*bound, bound)
	}
	if min := uint64(rows * bodySize / (2 * bound)); count < min {
		t.Errorf("%d batches, want >= %d for %d bytes at a %d-byte bound", count, min, rows*bodySize, bound)
	}
}

// waitChanges waits until the table's topic holds n change records
// (committed: the reader's snapshot runs in a Kafka transaction).
func (p *pipeline) waitChanges(ctx context.Context, n int) {
	p.t.Helper()
	cl := p.kafka(kgo.ConsumeTopics(p.topic()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	seen := 0
	for seen < n && pctx.Err() == nil {
		if err := p.failed(); err != nil {
			p.t.Fatal(err)
		}
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
			if ev, err := envelope.Decode(r.Value); err == nil && ev.Kind == envelope.KindChange {
				seen++
			}
		})
	}
	if seen < n {
		p.t.Fatalf("%d of %d changes in %s", seen, n, p.topic())
	}
}

// histogramWithin returns a histogram's sample count and sum, and how many
// samples are <= le (a bucket bound of the histogram).
func histogramWithin(t *testing.T, reg *prometheus.Registry, name string, le float64) (count uint64, sum float64, within uint64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		for _, b := range h.GetBucket() {
			if b.GetUpperBound() == le {
				return h.GetSampleCount(), h.GetSampleSum(), b.GetCumulativeCount()
			}
		}
		t.Fatalf("%s has no bucket le=%g", name, le)
	}
	t.Fatalf("no metric %s", name)
	return
}
