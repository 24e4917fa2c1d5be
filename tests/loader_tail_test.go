package tests

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/tables"
)

// docColumns is the column list of the test documents table, for records
// written without a reader.
var docColumns = []envelope.Column{{Name: "id", Type: "bigint", OID: 20, Key: true}, {Name: "workspace_id", Type: "bigint", OID: 20},
	{Name: "title", Type: "text", OID: 25}, {Name: "body", Type: "text", OID: 25},
	{Name: "amount", Type: "numeric(12,2)", OID: 1700}, {Name: "created_at", Type: "timestamp with time zone", OID: 1184}}

// quietPipeline is a pipeline without readers: its table topics are
// created with quietPartitions partitions and every record is the test's, so
// each produce is a batch of its own (a reader's watermark records would
// make batches of their own). It returns the context the test's loaders
// run in, ended at cleanup.
func quietPipeline(ctx context.Context, t *testing.T, cfg func(p *pipeline) *tables.Config) (*pipeline, context.Context) {
	t.Helper()
	p := setupPipeline(t, []int{0}, nil, true)
	if cfg != nil {
		p.tables = cfg(p) // the cleanup deletes its topics
	}
	if _, err := kadm.NewClient(p.kafka()).CreateTopics(ctx, quietPartitions, -1, nil, p.tables.Topics()...); err != nil {
		t.Fatalf("create topics: %v", err)
	}
	runCtx, runCancel := context.WithCancel(context.Background())
	t.Cleanup(func() { runCancel(); p.wg.Wait() }) // before setupPipeline's cleanup
	return p, runCtx
}

// quietPartitions is the partition count of a quiet pipeline's topics.
const quietPartitions = 4

// liveIn says whether id is live in table (on shard, if shard >= 0);
// false while the loader has not created the table.
func (p *pipeline) liveIn(ctx context.Context, table string, id int64, shard int) bool {
	var n uint64
	q := fmt.Sprintf("SELECT count() FROM `%s`.`%s` FINAL WHERE id = ? AND _deleted = 0", p.chDB, table)
	args := []any{id}
	if shard >= 0 {
		q += " AND _shard = ?"
		args = append(args, uint16(shard))
	}
	return p.store.Conn().QueryRow(ctx, q, args...).Scan(&n) == nil && n == 1
}

// detach detaches a table of the pipeline's ClickHouse database (its
// inserts and reads fail until attached: held up, retried) and returns
// the function that attaches it again (also run at the end of the test).
func (p *pipeline) detach(ctx context.Context, table string) func() {
	p.t.Helper()
	name := "`" + p.chDB + "`.`" + table + "`"
	if err := p.store.Conn().Exec(ctx, "DETACH TABLE "+name); err != nil {
		p.t.Fatalf("detach %s: %v", name, err)
	}
	var once sync.Once
	attach := func() {
		once.Do(func() {
			if err := p.store.Conn().Exec(context.Background(), "ATTACH TABLE "+name); err != nil {
				p.t.Errorf("attach %s: %v", name, err)
			}
		})
	}
	p.t.Cleanup(attach)
	return attach
}

// TestLoaderDetectionBesideNextBatch: a batch's duplicate-id detection
// runs beside the next batch's inserts, and still gates the batch's offset
// commit. The detection of a batch that makes an id live on two shards is
// held up (the _anomalies table is detached, so its read fails and is
// retried): the next batch's rows still reach ClickHouse meanwhile (they
// did not while the detection ran before the next batch), but no offset
// moves past the duplicate. The loader is then stopped with the detection
// unstored; once the table is back, a new loader replays the batch and the
// anomaly is recorded — none is lost to the overlap.
func TestLoaderDetectionBesideNextBatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, runCtx := quietPipeline(ctx, t, nil)
	l1ctx, l1cancel := context.WithCancel(runCtx)
	defer l1cancel()
	p.startMeteredLoader(l1ctx, "l1")

	const part = 0
	ids := idsIn(part, quietPartitions, 2)
	dup, next := ids[0], ids[1]
	onShard := func(ev *envelope.Event, shard int) *envelope.Event { ev.Shard = shard; return ev }

	p.produce(ctx, p.record(p.changeEnv(docColumns, envelope.OpInsert, dup, lsn("0/100"), docRow(dup, "1", "first copy", "b")), part))
	p.waitFor(ctx, 30*time.Second, "the first copy", func() bool { return p.liveIn(ctx, p.table(), dup, 0) })
	attach := p.detach(ctx, "_anomalies")

	// Batch N: the same id on shard 1. Its rows go in; its detection finds
	// the id on two shards and cannot store the anomaly.
	second := p.produce(ctx, p.record(onShard(p.changeEnv(docColumns, envelope.OpInsert, dup, lsn("0/200"), docRow(dup, "1", "second copy", "b")), 1), part))[0]
	p.waitFor(ctx, 30*time.Second, "the second copy", func() bool { return p.liveIn(ctx, p.table(), dup, 1) })
	// Batch N+1, polled after N was applied.
	third := p.produce(ctx, p.record(p.changeEnv(docColumns, envelope.OpInsert, next, lsn("0/300"), docRow(next, "2", "next batch", "b")), part))[0]
	p.waitFor(ctx, 30*time.Second, "the next batch's row while the previous batch's detection waits",
		func() bool { return p.liveIn(ctx, p.table(), next, 0) })
	time.Sleep(time.Second) // a commit, if one were made, is done
	if got := p.committed(ctx, part); got > second.Offset {
		t.Fatalf("committed offset %d of partition %d is past the change (offset %d) whose duplicate detection was not stored: "+
			"a crash now would lose the anomaly", got, part, second.Offset)
	}

	// Stop the loader with the detection unstored, restore the table, and
	// let a new loader replay the batch.
	l1cancel()
	attach()
	p.startMeteredLoader(runCtx, "l2")
	p.waitAnomaly(ctx, dup, "the duplicate, detected after the replay", func(a chstore.Anomaly, ok bool) bool {
		return ok && !a.Resolved && len(a.Shards) == 2 && a.Shards[0] == 0 && a.Shards[1] == 1
	})
	p.waitFor(ctx, 60*time.Second, "the commit past both batches", func() bool { return p.committed(ctx, part) > third.Offset })
	got, err := p.store.Anomalies(ctx, p.table(), []string{strconv.FormatInt(next, 10)}, false)
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := got[strconv.FormatInt(next, 10)]; ok {
		t.Errorf("id %d, on one shard only, has an anomaly: %+v", next, a)
	}
}

// TestLoaderWatermarksBesideNextBatch: a batch's watermarks are written
// beside the next batch's inserts, and still gate the batch's offset
// commit. The watermark write of a batch is held up (_watermarks
// detached): the next batch's rows reach ClickHouse meanwhile (they did
// not while the watermarks were written before the next batch), no offset
// moves past the watermark record, and once the table is back the
// watermark is stored and the offsets move.
func TestLoaderWatermarksBesideNextBatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, runCtx := quietPipeline(ctx, t, nil)
	p.startMeteredLoader(runCtx, "l1")

	const part = 0
	ids := idsIn(part, quietPartitions, 2)
	p.produce(ctx, p.record(p.changeEnv(docColumns, envelope.OpInsert, ids[0], lsn("0/100"), docRow(ids[0], "1", "before", "b")), part))
	p.waitFor(ctx, 30*time.Second, "the first row", func() bool { return p.liveIn(ctx, p.table(), ids[0], 0) })
	attach := p.detach(ctx, "_watermarks")

	const shard = 7 // no other watermark of it
	wm, err := envelope.Encode(&envelope.Event{Kind: envelope.KindWatermark, Shard: shard,
		CommitLSN: lsn("0/1000"), CommitTime: time.Now().UTC().Truncate(time.Second), Partitions: quietPartitions})
	if err != nil {
		t.Fatal(err)
	}
	held := p.produce(ctx, &kgo.Record{Topic: p.topic(), Partition: part, Value: wm})[0]
	time.Sleep(500 * time.Millisecond) // polled and applied: its watermark write is retried
	next := p.produce(ctx, p.record(p.changeEnv(docColumns, envelope.OpInsert, ids[1], lsn("0/2000"), docRow(ids[1], "1", "next", "b")), part))[0]
	p.waitFor(ctx, 30*time.Second, "the next batch's row while the previous batch's watermark write waits",
		func() bool { return p.liveIn(ctx, p.table(), ids[1], 0) })
	time.Sleep(time.Second) // a commit, if one were made, is done
	if got := p.committed(ctx, part); got > held.Offset {
		t.Fatalf("committed offset %d of partition %d is past the watermark record (offset %d) not yet written: "+
			"a crash now would lose it", got, part, held.Offset)
	}
	attach()
	p.waitFor(ctx, 30*time.Second, "the watermark", func() bool {
		var n uint64
		err := p.store.Conn().QueryRow(ctx, fmt.Sprintf("SELECT count() FROM `%s`._watermarks WHERE shard = ?", p.chDB), uint16(shard)).Scan(&n)
		return err == nil && n > 0
	})
	p.waitFor(ctx, 30*time.Second, "the commit past both batches", func() bool { return p.committed(ctx, part) > next.Offset })
}

// TestLoaderTablesConcurrently: the tables of a batch are written
// concurrently, each after its own ownership and marks. One table's insert
// is held up (its ClickHouse table detached, so the insert fails and is
// retried) while another table's row, in the same batch, reaches
// ClickHouse; written one table after the other, it waited. Neither
// table's offset moves until both are in.
func TestLoaderTablesConcurrently(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var first, second string
	p, runCtx := quietPipeline(ctx, t, func(p *pipeline) *tables.Config {
		first, second = p.table(), "other_"+p.suffix
		cfg, err := tables.Parse([]byte(fmt.Sprintf(`{"topic_prefix":"e2e_%s.","tables":[`+
			`{"name":%q,"id_column":"id","id_layout":"seed000","shard_key":"workspace_id"},`+
			`{"name":%q,"id_column":"id","id_layout":"seed000","shard_key":"workspace_id"}]}`, p.suffix, first, second)))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	})
	p.startMeteredLoader(runCtx, "l1")

	const part = 0
	ids := idsIn(part, quietPartitions, 4)
	rec := func(table string, id int64, at string) *kgo.Record {
		ev := p.changeEnv(docColumns, envelope.OpInsert, id, lsn(at), docRow(id, "1", "t", "b"))
		ev.Table = table
		r := p.record(ev, part)
		r.Topic = "e2e_" + p.suffix + "." + table
		return r
	}

	// Both tables exist in ClickHouse (and in the loader's layout cache).
	p.produce(ctx, rec(first, ids[0], "0/100"), rec(second, ids[1], "0/100"))
	p.waitFor(ctx, 30*time.Second, "a row in each table", func() bool {
		return p.liveIn(ctx, first, ids[0], -1) && p.liveIn(ctx, second, ids[1], -1)
	})
	attach := p.detach(ctx, first)
	// One batch: the held table's row first, then the other table's.
	recs := p.produce(ctx, rec(first, ids[2], "0/200"), rec(second, ids[3], "0/200"))
	p.waitFor(ctx, 30*time.Second, "the other table's row while the first table's insert is retried",
		func() bool { return p.liveIn(ctx, second, ids[3], -1) })
	time.Sleep(time.Second) // a commit, if one were made, is done
	for _, r := range recs {
		if got := p.committedOf(ctx, r.Topic, part); got > r.Offset {
			t.Errorf("committed offset %d of %s/%d moved past the batch (offset %d) while one of its tables was not written",
				got, r.Topic, part, r.Offset)
		}
	}
	attach()
	p.waitFor(ctx, 30*time.Second, "the held table's row once it is back", func() bool { return p.liveIn(ctx, first, ids[2], -1) })
	for _, r := range recs {
		p.waitFor(ctx, 30*time.Second, "the commit of "+r.Topic, func() bool { return p.committedOf(ctx, r.Topic, part) > r.Offset })
	}
}

// committedOf returns the group's committed offset for partition part of
// topic (-1 if none).
func (p *pipeline) committedOf(ctx context.Context, topic string, part int32) int64 {
	p.t.Helper()
	offs, err := kadm.NewClient(p.kafka()).FetchOffsets(ctx, p.group())
	if err != nil {
		p.t.Fatalf("fetch offsets of %s: %v", p.group(), err)
	}
	o, ok := offs.Lookup(topic, part)
	if !ok || o.Err != nil {
		return -1
	}
	return o.At
}
