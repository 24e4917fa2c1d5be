package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/reader"
)

// TestReaderStateLostAfterRecopies: the shard's data reached epoch 2 (two
// copies taken again after the slot was lost), then the reader's state is
// lost (here: a new state topic) while the reader is down, and rows are
// updated, deleted and inserted. The reader starts with no state; the
// epoch recorded on its publication makes the new copy epoch 3, so it
// beats the epoch-2 rows in ClickHouse and its snapshot end deletes the
// rows it no longer contains. Without the record it copied in epoch 1: its
// rows lost to the stale ones.
func TestReaderStateLostAfterRecopies(t *testing.T) {
	p, ctx, runCtx := oneShardPipeline(t, 3*time.Minute)
	tbl := pgx.Identifier{p.table()}.Sanitize()
	p.startLoader(runCtx, "l1")

	cfg := p.readerConfig(0)
	start := func(cfg reader.Config) context.CancelFunc {
		rctx, stop := context.WithCancel(runCtx)
		r := reader.New(cfg, p.log, prometheus.NewRegistry())
		p.goRun("reader 0", func() error { return r.Run(rctx) })
		return stop
	}
	stop := start(cfg)
	var ids []int64
	for i := 0; i < 12; i++ {
		ids = append(ids, p.insert(ctx, 0, int64(i%3+1), fmt.Sprintf("doc %d", i), "b"))
	}
	p.waitFor(ctx, 30*time.Second, "the first copy and stream applied", func() bool { return p.compare(ctx, p.table()) == "" })

	// Two copies taken again (epochs 1 and 2), each after the slot was
	// dropped while the reader was down, each with a change in the gap.
	for e := 1; e <= 2; e++ {
		stop()
		slot := p.waitSlotInactive(ctx, 0)
		p.exec(ctx, 0, "SELECT pg_drop_replication_slot($1)", slot)
		p.exec(ctx, 0, fmt.Sprintf("UPDATE %s SET title = $2 WHERE id = $1", tbl), ids[e], fmt.Sprintf("changed before epoch %d", e))
		stop = start(cfg)
		p.waitFor(ctx, 60*time.Second, fmt.Sprintf("epoch %d applied", e), func() bool { return p.compare(ctx, p.table()) == "" })
	}
	if got := p.chCount(ctx, "SELECT toUInt64(max(bitShiftRight(_version, 48))) FROM %[1]s.%[2]s"); got != 2 {
		t.Fatalf("highest epoch in ClickHouse %d, want 2", got)
	}

	// The reader stops and its state is lost; the shard changes meanwhile.
	stop()
	p.waitSlotInactive(ctx, 0)
	p.exec(ctx, 0, fmt.Sprintf("UPDATE %s SET title = 'changed while the state was lost' WHERE id = ANY($1)", tbl), ids[:6])
	p.exec(ctx, 0, fmt.Sprintf("DELETE FROM %s WHERE id = ANY($1)", tbl), ids[9:])
	p.insert(ctx, 0, 7, "inserted while the state was lost", "b")
	lost := cfg
	lost.StateTopic = cfg.StateTopic + "2"
	t.Cleanup(func() { p.deleteTopics(lost.StateTopic) })
	start(lost)
	p.waitFor(ctx, 60*time.Second, "ClickHouse equal to the shard after a copy with no state", func() bool {
		return p.compare(ctx, p.table()) == ""
	})
	if got := p.chCount(ctx, "SELECT toUInt64(max(bitShiftRight(_version, 48))) FROM %[1]s.%[2]s"); got != 3 {
		t.Errorf("highest epoch in ClickHouse %d, want 3", got)
	}
	// Streaming goes on in the new epoch.
	p.exec(ctx, 0, fmt.Sprintf("UPDATE %s SET title = 'after the copy' WHERE id = $1", tbl), ids[0])
	p.waitFor(ctx, 30*time.Second, "a change streamed after the copy", func() bool { return p.compare(ctx, p.table()) == "" })
}

// deleteTopics deletes Kafka topics the test made beyond the pipeline's.
func (p *pipeline) deleteTopics(topics ...string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.brokers...))
	if err != nil {
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kadm.NewClient(cl).DeleteTopics(ctx, topics...) //nolint:errcheck // best effort
}
