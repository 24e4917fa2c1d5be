package tests

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/loader"
)

// dlqRecords is the number of records in the pipeline's dead-letter topic
// (0 while it does not exist: the loader creates it with its first dead
// letter).
func (p *pipeline) dlqRecords(ctx context.Context) int64 {
	p.t.Helper()
	ends, err := kadm.NewClient(p.kafka()).ListEndOffsets(ctx, p.dlqTopic())
	if err != nil {
		p.t.Fatalf("dlq end offsets: %v", err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) {
		switch {
		case errors.Is(o.Err, kerr.UnknownTopicOrPartition):
		case o.Err != nil:
			p.t.Errorf("dlq partition %d: %v", o.Partition, o.Err)
		default:
			total += max(o.Offset, 0)
		}
	})
	return total
}

// stoppableLoader runs a loader of the pipeline's group until the returned
// stop is called; stop returns once Run has returned (and fails the test
// if it returned an error).
func (p *pipeline) stoppableLoader(ctx context.Context, name string) (*prometheus.Registry, func()) {
	reg := prometheus.NewRegistry()
	l := loader.New(loader.Config{
		Brokers: p.brokers, Group: p.group(), DLQTopic: p.dlqTopic(), Tables: p.tables,
		BatchRecords: 5000, BatchWait: 50 * time.Millisecond,
		DuplicateGrace: 3 * time.Second, AnomalyInterval: 200 * time.Millisecond,
	}, p.store, p.log.With(slog.String("loader", name)), reg)
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.Run(lctx) }()
	return reg, func() {
		p.t.Helper()
		cancel()
		if err := <-done; err != nil {
			p.t.Errorf("loader %s: %v", name, err)
		}
	}
}

// TestLoaderReplayBehindMove: the order in which a killed loader sent an
// update to the dead-letter topic as "no earlier version is stored". A
// row is inserted on shard 0 and edited twice, each edit leaving its
// TOASTed body unchanged; then it moves (copied to shard 1, deleted on
// shard 0). The loader writes all of it; it dies before committing the
// last offsets, so its successor — cold image cache, empty version map —
// replays from an edit. The stored row on shard 0 is then the move's
// tombstone, newer than the edit: the edit is superseded (dropped), not
// baseless. Two replays: from the second edit (its base is in ClickHouse,
// behind the tombstone: the reported case), and from the first edit (the
// second's base is then in the batch). After each, the DLQ is empty and
// the document is its one copy on shard 1 with the edits' title and the
// insert's body.
func TestLoaderReplayBehindMove(t *testing.T) {
	p, ctx, runCtx := oneShardPipeline(t, 4*time.Minute)
	p.startReader(runCtx, 0)
	reg, stop := p.stoppableLoader(runCtx, "l1")
	cols, part, ids := p.craftedIDs(ctx, 1)
	id := ids[0]

	p.produce(ctx, p.record(p.changeEnv(cols, envelope.OpInsert, id, lsn("0/1000"), docRow(id, "1", "t1", "the body")), part))
	p.waitDoc(ctx, id, "insert", func(s int, d docAnswer) bool { return s == http.StatusOK })
	edit1 := p.produce(ctx, p.record(p.keepBody(cols, id, "0/1500", "t2"), part))[0]
	p.waitDoc(ctx, id, "first edit", func(s int, d docAnswer) bool {
		return s == http.StatusOK && len(d.Copies) == 1 && d.Copies[0].Row["title"] == "t2"
	})
	copied := p.changeEnv(cols, envelope.OpInsert, id, lsn("0/700"), docRow(id, "1", "t3", "the body"))
	copied.Shard = 1 // the move's copy, on the target shard
	moved := p.produce(ctx,
		p.record(p.keepBody(cols, id, "0/2000", "t3"), part),
		p.record(copied, part),
		p.record(p.changeEnv(cols, envelope.OpDelete, id, lsn("0/2600"), nil), part),
	)
	edit2, last := moved[0], moved[len(moved)-1]
	movedDone := func(s int, d docAnswer) bool {
		return s == http.StatusOK && len(d.Copies) == 1 && d.Copies[0].Shard == 1
	}
	p.waitDoc(ctx, id, "the move", movedDone)
	p.waitFor(ctx, 30*time.Second, "commit past the move", func() bool { return p.committed(ctx, part) > last.Offset })
	if v, _ := metricOf(t, reg, "tributary_loader_dlq_records_total",
		map[string]string{"topic": p.topic(), "reason": "toast_without_base"}); v != 0 {
		t.Fatalf("first delivery: %v updates without a base", v)
	}
	stop()

	for _, from := range []struct {
		name string
		rec  *kgo.Record
	}{{"second edit", edit2}, {"first edit", edit1}} {
		// The offsets the dead loader had not committed yet.
		adm := kadm.NewClient(p.kafka())
		err := adm.CommitAllOffsets(ctx, p.group(), kadm.Offsets{p.topic(): {part: {Topic: p.topic(), Partition: part, At: from.rec.Offset, LeaderEpoch: -1}}})
		if err != nil {
			t.Fatalf("rewind %s to the %s (offset %d): %v", p.group(), from.name, from.rec.Offset, err)
		}
		reg, stop := p.stoppableLoader(runCtx, "replay from the "+from.name)
		p.waitFor(ctx, 60*time.Second, "the replay from the "+from.name+" committed", func() bool {
			return p.committed(ctx, part) > last.Offset
		})
		if v, _ := metricOf(t, reg, "tributary_loader_dlq_records_total",
			map[string]string{"topic": p.topic(), "reason": "toast_without_base"}); v != 0 {
			t.Errorf("replay from the %s: %v updates sent to the dead-letter topic without a base", from.name, v)
		}
		if n := p.dlqRecords(ctx); n != 0 {
			t.Errorf("replay from the %s: the dead-letter topic holds %d records, want 0", from.name, n)
		}
		if s, d := p.getDoc(ctx, id); !movedDone(s, d) || d.Copies[0].Row["title"] != "t3" || d.Copies[0].Row["body"] != "the body" {
			t.Errorf("replay from the %s: id %d: status %d, %+v; want one copy on shard 1, title t3, body %q",
				from.name, id, s, d, "the body")
		}
		stop()
	}
}

// TestLoaderUpdateOfRowNotCopied: an unchanged-TOAST update of a row of
// which no version exists anywhere. Streamed before its shard's copy ended
// (below every watermark of the shard), it is the update of a row the
// copy missed because it was deleted meanwhile — its delete follows, and
// the update is dropped, not dead-lettered (the TOAST-heavy kill-nine test
// found this with rows edited and moved during the copy). Streamed after a
// watermark of its shard, it is a real gap and goes to the dead-letter
// topic, as before.
func TestLoaderUpdateOfRowNotCopied(t *testing.T) {
	p := newMeteredPipeline(t, []int{0}, false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cols, part, ids := p.craftedIDs(ctx, 3)
	missed, gap, sentinel := ids[0], ids[1], ids[2]
	// The reader's watermarks of shard 0 are stored: every one is far
	// above 0/1600 and far below FF/0.
	p.waitFor(ctx, 30*time.Second, "a stored watermark of shard 0", func() bool {
		return p.chCount(ctx, "SELECT count() FROM %[1]s._watermarks WHERE shard = 0 AND partition = ?", uint32(part)) > 0
	})
	recs := p.produce(ctx,
		p.record(p.keepBody(cols, missed, "0/1500", "edited during the copy"), part),
		p.record(p.changeEnv(cols, envelope.OpDelete, missed, lsn("0/1600"), nil), part),
		p.record(p.keepBody(cols, gap, "FF/0", "no copy, no insert"), part),
		p.record(p.changeEnv(cols, envelope.OpInsert, sentinel, lsn("FF/100"), docRow(sentinel, "1", "s", "b")), part),
	)
	p.waitDoc(ctx, sentinel, "sentinel", func(s int, _ docAnswer) bool { return s == http.StatusOK })
	p.waitFor(ctx, 30*time.Second, "commit past the sentinel", func() bool { return p.committed(ctx, part) > recs[3].Offset })
	if n := p.dlqRecords(ctx); n != 1 {
		t.Errorf("the dead-letter topic holds %d records, want 1 (the update after a watermark, offset %d)", n, recs[2].Offset)
	}
	if v, _ := p.metric("tributary_loader_dlq_records_total", map[string]string{"topic": p.topic(), "reason": "toast_without_base"}); v != 1 {
		t.Errorf("%v updates without a base dead-lettered, want 1", v)
	}
	for _, id := range []int64{missed, gap} {
		if s, d := p.getDoc(ctx, id); s != http.StatusNotFound {
			t.Errorf("id %d: status %d, %+v; want 404", id, s, d)
		}
	}
}
