package tests

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/tables"
)

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
	// No reader: every record is this test's, so each produce below is
	// one batch (a reader's watermark records would make batches of their
	// own, and the loop waits for a held-up tail after one more batch).
	p := setupPipeline(t, []int{0}, nil, true)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const partitions = 4
	if _, err := kadm.NewClient(p.kafka()).CreateTopics(ctx, partitions, -1, nil, p.topic()); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	runCtx, runCancel := context.WithCancel(context.Background())
	t.Cleanup(func() { runCancel(); p.wg.Wait() }) // before setupPipeline's cleanup
	l1ctx, l1cancel := context.WithCancel(runCtx)
	defer l1cancel()
	p.startMeteredLoader(l1ctx, "l1")

	cols := []envelope.Column{{Name: "id", Type: "bigint", OID: 20, Key: true}, {Name: "workspace_id", Type: "bigint", OID: 20},
		{Name: "title", Type: "text", OID: 25}, {Name: "body", Type: "text", OID: 25},
		{Name: "amount", Type: "numeric(12,2)", OID: 1700}, {Name: "created_at", Type: "timestamp with time zone", OID: 1184}}
	const part = 0
	ids := idsIn(part, partitions, 2)
	dup, next := ids[0], ids[1]
	live := func(id int64, shard int) bool { // false until the loader created the table
		var n uint64
		q := fmt.Sprintf("SELECT count() FROM `%s`.`%s` FINAL WHERE id = ? AND _shard = ? AND _deleted = 0", p.chDB, p.table())
		return p.store.Conn().QueryRow(ctx, q, id, uint16(shard)).Scan(&n) == nil && n == 1
	}
	onShard := func(ev *envelope.Event, shard int) *envelope.Event { ev.Shard = shard; return ev }

	p.produce(ctx, p.record(p.changeEnv(cols, envelope.OpInsert, dup, lsn("0/100"), docRow(dup, "1", "first copy", "b")), part))
	p.waitFor(ctx, 30*time.Second, "the first copy", func() bool { return live(dup, 0) })

	anomalies := "`" + p.chDB + "`._anomalies"
	if err := p.store.Conn().Exec(ctx, "DETACH TABLE "+anomalies); err != nil {
		t.Fatalf("detach: %v", err)
	}
	attached := false
	attach := func() {
		if !attached {
			if err := p.store.Conn().Exec(ctx, "ATTACH TABLE "+anomalies); err != nil {
				t.Fatalf("attach: %v", err)
			}
			attached = true
		}
	}
	defer attach()

	// Batch N: the same id on shard 1. Its rows go in; its detection finds
	// the id on two shards and cannot store the anomaly.
	second := p.produce(ctx, p.record(onShard(p.changeEnv(cols, envelope.OpInsert, dup, lsn("0/200"), docRow(dup, "1", "second copy", "b")), 1), part))[0]
	p.waitFor(ctx, 30*time.Second, "the second copy", func() bool { return live(dup, 1) })
	// Batch N+1, polled after N was applied.
	third := p.produce(ctx, p.record(p.changeEnv(cols, envelope.OpInsert, next, lsn("0/300"), docRow(next, "2", "next batch", "b")), part))[0]
	p.waitFor(ctx, 30*time.Second, "the next batch's row while the previous batch's detection waits", func() bool { return live(next, 0) })
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

// TestLoaderTablesConcurrently: the tables of a batch are written
// concurrently, each after its own ownership and marks. One table's insert
// is held up (its ClickHouse table detached, so the insert fails and is
// retried) while another table's row, in the same batch, reaches
// ClickHouse; written one table after the other, it waited. Neither
// table's offset moves until both are in.
func TestLoaderTablesConcurrently(t *testing.T) {
	p := setupPipeline(t, []int{0}, nil, true)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	first, second := p.table(), "other_"+p.suffix
	cfg, err := tables.Parse([]byte(fmt.Sprintf(`{"topic_prefix":"e2e_%s.","tables":[`+
		`{"name":%q,"id_column":"id","id_layout":"seed000","shard_key":"workspace_id"},`+
		`{"name":%q,"id_column":"id","id_layout":"seed000","shard_key":"workspace_id"}]}`, p.suffix, first, second)))
	if err != nil {
		t.Fatal(err)
	}
	p.tables = cfg // the cleanup deletes the topics of both
	const partitions = 4
	if _, err := kadm.NewClient(p.kafka()).CreateTopics(ctx, partitions, -1, nil, p.tables.Topics()...); err != nil {
		t.Fatalf("create topics: %v", err)
	}
	runCtx, runCancel := context.WithCancel(context.Background())
	t.Cleanup(func() { runCancel(); p.wg.Wait() }) // before setupPipeline's cleanup
	p.startMeteredLoader(runCtx, "l1")

	cols := []envelope.Column{{Name: "id", Type: "bigint", OID: 20, Key: true}, {Name: "workspace_id", Type: "bigint", OID: 20},
		{Name: "title", Type: "text", OID: 25}, {Name: "body", Type: "text", OID: 25},
		{Name: "amount", Type: "numeric(12,2)", OID: 1700}, {Name: "created_at", Type: "timestamp with time zone", OID: 1184}}
	const part = 0
	ids := idsIn(part, partitions, 4)
	rec := func(table string, id int64, at string) *kgo.Record {
		ev := p.changeEnv(cols, envelope.OpInsert, id, lsn(at), docRow(id, "1", "t", "b"))
		ev.Table = table
		r := p.record(ev, part)
		r.Topic = "e2e_" + p.suffix + "." + table
		return r
	}
	live := func(table string, id int64) bool { // false while the table is missing
		var n uint64
		q := fmt.Sprintf("SELECT count() FROM `%s`.`%s` FINAL WHERE id = ? AND _deleted = 0", p.chDB, table)
		return p.store.Conn().QueryRow(ctx, q, id).Scan(&n) == nil && n == 1
	}

	// Both tables exist in ClickHouse (and in the loader's layout cache).
	p.produce(ctx, rec(first, ids[0], "0/100"), rec(second, ids[1], "0/100"))
	p.waitFor(ctx, 30*time.Second, "a row in each table", func() bool { return live(first, ids[0]) && live(second, ids[1]) })

	held := "`" + p.chDB + "`.`" + first + "`"
	if err := p.store.Conn().Exec(ctx, "DETACH TABLE "+held); err != nil {
		t.Fatalf("detach: %v", err)
	}
	attached := false
	attach := func() {
		if !attached {
			if err := p.store.Conn().Exec(ctx, "ATTACH TABLE "+held); err != nil {
				t.Fatalf("attach: %v", err)
			}
			attached = true
		}
	}
	defer attach()
	// One batch: the held table's row first, then the other table's.
	recs := p.produce(ctx, rec(first, ids[2], "0/200"), rec(second, ids[3], "0/200"))
	p.waitFor(ctx, 30*time.Second, "the other table's row while the first table's insert is retried",
		func() bool { return live(second, ids[3]) })
	time.Sleep(time.Second) // a commit, if one were made, is done
	for _, r := range recs {
		if got := p.committedOf(ctx, r.Topic, part); got > r.Offset {
			t.Errorf("committed offset %d of %s/%d moved past the batch (offset %d) while one of its tables was not written",
				got, r.Topic, part, r.Offset)
		}
	}
	attach()
	p.waitFor(ctx, 30*time.Second, "the held table's row once it is back", func() bool { return live(first, ids[2]) })
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
