package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/loader"
	"github.com/tributary/tributary/internal/tables"
)

// Loader tests: the loader against the real Kafka and ClickHouse,
// fed both by real readers and by records this file produces directly into
// the table's topic (poison, out-of-order, redelivered and incompatible
// records that a healthy reader never writes).

// meteredPipeline is a pipeline whose readers and loader this file starts
// itself, so that the test can read the loader's metrics. With other set,
// a second table is replicated too (created on every shard, dropped at
// cleanup), to show that stopping one table leaves the others running.
type meteredPipeline struct {
	*pipeline
	reg   *prometheus.Registry
	other string // second table, or ""
}

func newMeteredPipeline(t *testing.T, shards []int, withOther bool) *meteredPipeline {
	t.Helper()
	p := setupPipeline(t, shards, nil, true)
	mp := &meteredPipeline{pipeline: p}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if withOther {
		mp.other = "other_" + p.suffix
		cfg, err := tables.Parse([]byte(fmt.Sprintf(`{"topic_prefix":"e2e_%s.","tables":[`+
			`{"name":%q,"id_column":"id","id_layout":"seed000","shard_key":"workspace_id"},`+
			`{"name":%q,"id_column":"id","id_layout":"seed000","shard_key":"workspace_id"}]}`,
			p.suffix, p.table(), mp.other)))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range shards {
			p.exec(ctx, s, fmt.Sprintf(docsDDL, mp.other))
		}
		// The first table stays Tables[0]: cleanup and the API use it; the
		// cleanup deletes the topics of both.
		p.tables = cfg
	}
	runCtx, runCancel := context.WithCancel(context.Background())
	// Registered after setupPipeline's cleanup, so it runs before it: stop
	// the components, then drop what only this file created.
	t.Cleanup(func() {
		runCancel()
		p.wg.Wait()
		if mp.other == "" {
			return
		}
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		for _, s := range shards {
			if conn, err := pgx.Connect(cctx, p.stack.ShardDSNs[s]); err == nil {
				conn.Exec(cctx, "DROP TABLE IF EXISTS "+pgx.Identifier{mp.other}.Sanitize()) //nolint:errcheck
				conn.Close(cctx)
			}
		}
	})
	for _, s := range shards {
		p.startReader(runCtx, s)
	}
	mp.reg = p.startMeteredLoader(runCtx, "l1")
	return mp
}

// startMeteredLoader is startLoader with a registry the test can read and
// optional changes to the loader's configuration.
func (p *pipeline) startMeteredLoader(ctx context.Context, name string, mods ...func(*loader.Config)) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	cfg := loader.Config{
		Brokers: p.brokers, KafkaSecurity: p.kafkaSec, Group: p.group(), DLQTopic: p.dlqTopic(), Tables: p.tables,
		BatchRecords: 5000, BatchWait: 50 * time.Millisecond,
		DuplicateGrace: 3 * time.Second, AnomalyInterval: 200 * time.Millisecond,
	}
	for _, m := range mods {
		m(&cfg)
	}
	l := loader.New(cfg, p.store, p.log.With(slog.String("loader", name)), reg)
	p.goRun("loader "+name, func() error { return l.Run(ctx) })
	return reg
}

func (p *pipeline) group() string    { return "e2e_" + p.suffix }
func (p *pipeline) dlqTopic() string { return "e2e_" + p.suffix + ".dlq" }
func (p *pipeline) topic() string    { return p.tables.Tables[0].Topic }

// metric returns the value of a gauge or counter of the first loader's
// registry with exactly the given labels, and whether it exists.
func (mp *meteredPipeline) metric(name string, labels map[string]string) (float64, bool) {
	return metricOf(mp.t, mp.reg, name, labels)
}

// metricOf returns the value of a gauge or counter of reg with exactly the
// given labels, and whether it exists.
func metricOf(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue next
				}
			}
			if g := m.GetGauge(); g != nil {
				return g.GetValue(), true
			}
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

// kafka returns a client for the pipeline's brokers, closed at cleanup.
func (p *pipeline) kafka(opts ...kgo.Opt) *kgo.Client {
	p.t.Helper()
	cl, err := p.kafkaSec.NewClient(p.brokers, opts...)
	if err != nil {
		p.t.Fatalf("kafka client: %v", err)
	}
	p.t.Cleanup(cl.Close)
	return cl
}

// partitions is the number of partitions of the table's topic.
func (p *pipeline) partitions(ctx context.Context) int {
	p.t.Helper()
	td, err := kadm.NewClient(p.kafka()).ListTopics(ctx, p.topic())
	if err != nil || td[p.topic()].Err != nil || len(td[p.topic()].Partitions) == 0 {
		p.t.Fatalf("list topic %s: %v %v", p.topic(), err, td[p.topic()].Err)
	}
	return len(td[p.topic()].Partitions)
}

// keyPartitioner routes keys as the reader does (Kafka's murmur2).
var keyPartitioner = kgo.StickyKeyPartitioner(nil).ForTopic("")

func partitionOf(id int64, n int) int32 {
	return int32(keyPartitioner.Partition(&kgo.Record{Key: []byte(strconv.FormatInt(id, 10))}, n))
}

// idsIn returns n distinct ids, far from any tributary.next_id(), that
// Kafka's key partitioner sends to partition part.
func idsIn(part int32, partitions, n int) []int64 {
	var out []int64
	for len(out) < n {
		id := 8_000_000_000_000_000_000 + rand.Int64N(1_000_000_000_000_000_000)
		if partitionOf(id, partitions) == part {
			out = append(out, id)
		}
	}
	return out
}

// produce writes recs as given (Partition set by the caller) in one go and
// returns them with their offsets. The linger makes them one record batch,
// so the loader sees them in one poll.
func (p *pipeline) produce(ctx context.Context, recs ...*kgo.Record) []*kgo.Record {
	p.t.Helper()
	cl := p.kafka(kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(100*time.Millisecond))
	res := cl.ProduceSync(ctx, recs...)
	if err := res.FirstErr(); err != nil {
		p.t.Fatalf("produce: %v", err)
	}
	out := make([]*kgo.Record, len(res))
	for i, r := range res {
		out[i] = r.Record
	}
	return out
}

// topicColumns returns the column list of a change the reader wrote to the
// table's topic: what a real envelope of this table carries.
func (p *pipeline) topicColumns(ctx context.Context) []envelope.Column {
	p.t.Helper()
	cl := p.kafka(kgo.ConsumeTopics(p.topic()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for pctx.Err() == nil {
		fs := cl.PollFetches(pctx)
		var cols []envelope.Column
		fs.EachRecord(func(r *kgo.Record) {
			if ev, err := envelope.Decode(r.Value); err == nil && ev.Kind == envelope.KindChange && len(ev.Columns) > 0 && cols == nil {
				cols = ev.Columns
			}
		})
		if cols != nil {
			return cols
		}
	}
	p.t.Fatalf("no change with a column list in %s", p.topic())
	return nil
}

// findChange returns the partition and offset of the first change of id in
// the table's topic whose column list satisfies match.
func (p *pipeline) findChange(ctx context.Context, id int64, match func([]envelope.Column) bool) (int32, int64) {
	p.t.Helper()
	cl := p.kafka(kgo.ConsumeTopics(p.topic()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	key := strconv.FormatInt(id, 10)
	for pctx.Err() == nil {
		fs := cl.PollFetches(pctx)
		part, off := int32(-1), int64(-1)
		fs.EachRecord(func(r *kgo.Record) {
			if off >= 0 || string(r.Key) != key {
				return
			}
			if ev, err := envelope.Decode(r.Value); err == nil && ev.Kind == envelope.KindChange && match(ev.Columns) {
				part, off = r.Partition, r.Offset
			}
		})
		if off >= 0 {
			return part, off
		}
	}
	p.t.Fatalf("no change of id %d in %s", id, p.topic())
	return 0, 0
}

// committed returns the group's committed offset for partition part of the
// table's topic (-1 if none).
func (p *pipeline) committed(ctx context.Context, part int32) int64 {
	p.t.Helper()
	offs, err := kadm.NewClient(p.kafka()).FetchOffsets(ctx, p.group())
	if err != nil {
		p.t.Fatalf("fetch offsets of %s: %v", p.group(), err)
	}
	o, ok := offs.Lookup(p.topic(), part)
	if !ok || o.Err != nil {
		return -1
	}
	return o.At
}

// waitFor polls cond every 100 ms until it holds or timeout passes; a
// component error fails the test at once.
func (p *pipeline) waitFor(ctx context.Context, timeout time.Duration, what string, cond func() bool) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if err := p.failed(); err != nil {
			p.t.Fatalf("waiting for %s: %v", what, err)
		}
		if cond() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.t.Fatalf("timed out waiting for %s", what)
}

// chCount runs a count query against the pipeline's ClickHouse database;
// %[1]s in q is the database, %[2]s the table.
func (p *pipeline) chCount(ctx context.Context, q string, args ...any) int64 {
	p.t.Helper()
	var n uint64
	if err := p.store.Conn().QueryRow(ctx, fmt.Sprintf(q, "`"+p.chDB+"`", "`"+p.table()+"`"), args...).Scan(&n); err != nil {
		p.t.Fatalf("clickhouse: %s: %v", q, err)
	}
	return int64(n)
}

// chCountOnceCreated is chCount for a wait that may start before the
// loader has created the pipeline's table: 0 until the table exists.
func (p *pipeline) chCountOnceCreated(ctx context.Context, q string, args ...any) int64 {
	p.t.Helper()
	var tables uint64
	q0 := "SELECT count() FROM system.tables WHERE database = ? AND name = ?"
	if err := p.store.Conn().QueryRow(ctx, q0, p.chDB, p.table()).Scan(&tables); err != nil {
		p.t.Fatalf("clickhouse: %s: %v", q0, err)
	}
	if tables == 0 {
		return 0
	}
	return p.chCount(ctx, q, args...)
}

// chDuplicates is the number of live (id, shard) pairs stored more than
// once after FINAL: always 0 when replacing works.
func (p *pipeline) chDuplicates(ctx context.Context) int64 {
	p.t.Helper()
	var n int64
	q := fmt.Sprintf("SELECT toInt64(count() - uniqExact(id, _shard)) FROM `%s`.`%s` FINAL WHERE _deleted = 0", p.chDB, p.table())
	if err := p.store.Conn().QueryRow(ctx, q).Scan(&n); err != nil {
		p.t.Fatalf("clickhouse: %s: %v", q, err)
	}
	return n
}

// queryID runs an INSERT ... RETURNING id on a shard.
func (p *pipeline) queryID(ctx context.Context, shard int, sql string, args ...any) int64 {
	p.t.Helper()
	conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[shard])
	if err != nil {
		p.t.Fatalf("connect shard %d: %v", shard, err)
	}
	defer conn.Close(ctx)
	var id int64
	if err := conn.QueryRow(ctx, sql, args...).Scan(&id); err != nil {
		p.t.Fatalf("shard %d: %s: %v", shard, sql, err)
	}
	return id
}

// craftedIDs prepares records written by hand: it waits for a row from the
// reader (so the table exists in ClickHouse with the topic's columns) and
// returns those columns, that row's partition and k unused ids in it.
func (p *pipeline) craftedIDs(ctx context.Context, k int) ([]envelope.Column, int32, []int64) {
	p.t.Helper()
	seed := p.insert(ctx, 0, 1, "from the reader", "b")
	p.waitDoc(ctx, seed, "reader row", func(s int, _ docAnswer) bool { return s == http.StatusOK })
	n := p.partitions(ctx)
	part := partitionOf(seed, n)
	return p.topicColumns(ctx), part, idsIn(part, n, k)
}

// changeEnv builds a change envelope of the pipeline's table on shard 0.
func (p *pipeline) changeEnv(cols []envelope.Column, op envelope.Op, id int64, lsn envelope.LSN, after map[string]*string) *envelope.Event {
	ev := &envelope.Event{
		V: envelope.Version, Kind: envelope.KindChange, Shard: 0, Schema: "public", Table: p.table(),
		Op: op, ID: strconv.FormatInt(id, 10), LSN: lsn, CommitLSN: lsn + 8, XID: 1000,
		CommitTime: time.Now().UTC().Truncate(time.Second), Columns: cols, After: after,
	}
	if op == envelope.OpDelete {
		ev.After = nil
		ev.Before = map[string]*string{"id": strPtr(ev.ID)}
	}
	return ev
}

// docRow is the after image of a documents row.
func docRow(id int64, ws, title, body string) map[string]*string {
	return map[string]*string{
		"id": strPtr(strconv.FormatInt(id, 10)), "workspace_id": strPtr(ws), "title": strPtr(title), "body": strPtr(body),
		"amount": strPtr("12.34"), "created_at": strPtr("2026-01-02 03:04:05.123456+00"),
	}
}

func strPtr(s string) *string { return &s }

// record encodes ev (stamping the current version) into a record for part.
func (p *pipeline) record(ev *envelope.Event, part int32) *kgo.Record {
	p.t.Helper()
	b, err := envelope.Encode(ev)
	if err != nil {
		p.t.Fatal(err)
	}
	return &kgo.Record{Topic: p.topic(), Partition: part, Key: []byte(ev.ID), Value: b}
}

func lsn(s string) envelope.LSN {
	l, err := envelope.ParseLSN(s)
	if err != nil {
		panic(err)
	}
	return l
}

// TestLoaderPoisonRecord: records that cannot be applied (not JSON, an
// envelope version this build does not read, a value that does not convert)
// go to the dead-letter topic with the reason and their source position,
// and the partition goes on: the valid changes around them are applied and
// the group's offset moves past all of them.
func TestLoaderPoisonRecord(t *testing.T) {
	p := newMeteredPipeline(t, []int{0}, false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	cols, part, ids := p.craftedIDs(ctx, 3)
	first, bad, second := ids[0], ids[1], ids[2]

	v2 := p.changeEnv(cols, envelope.OpInsert, bad, lsn("0/110"), docRow(bad, "1", "from the future", "b"))
	v2.V = envelope.Version + 1 // a format this build does not know
	v2JSON, err := json.Marshal(v2)
	if err != nil {
		t.Fatal(err)
	}
	recs := p.produce(ctx,
		p.record(p.changeEnv(cols, envelope.OpInsert, first, lsn("0/100"), docRow(first, "1", "valid before", "b")), part),
		&kgo.Record{Topic: p.topic(), Partition: part, Key: []byte("garbage"), Value: []byte("\x00\xff{not an envelope")},
		&kgo.Record{Topic: p.topic(), Partition: part, Key: []byte(v2.ID), Value: v2JSON},
		p.record(p.changeEnv(cols, envelope.OpInsert, bad, lsn("0/120"), docRow(bad, "not-a-number", "bad workspace", "b")), part),
		p.record(p.changeEnv(cols, envelope.OpInsert, second, lsn("0/130"), docRow(second, "2", "valid after", "b")), part),
	)
	wantReason := map[int64]string{recs[1].Offset: "decode", recs[2].Offset: "decode", recs[3].Offset: "convert"}

	for _, c := range []struct {
		id    int64
		title string
	}{{first, "valid before"}, {second, "valid after"}} {
		p.waitDoc(ctx, c.id, "valid change", func(s int, d docAnswer) bool {
			return s == http.StatusOK && len(d.Copies) == 1 && d.Copies[0].Row["title"] == c.title
		})
	}
	if s, _ := p.getDoc(ctx, bad); s != http.StatusNotFound {
		t.Errorf("poison row %d: status %d, want 404", bad, s)
	}

	// The partition was not stopped: its committed offset moves past the
	// last valid change (dead letters are produced before the commit).
	last := recs[len(recs)-1].Offset
	p.waitFor(ctx, 30*time.Second, "commit past the poison records", func() bool { return p.committed(ctx, part) > last })
	if v, _ := p.metric("tributary_loader_table_stopped", map[string]string{"table": p.table()}); v != 0 {
		t.Errorf("table stopped by poison records: tributary_loader_table_stopped = %v", v)
	}

	// The DLQ holds exactly the three poison records.
	adm := kadm.NewClient(p.kafka())
	ends, err := adm.ListEndOffsets(ctx, p.dlqTopic())
	if err != nil {
		t.Fatalf("dlq end offsets: %v", err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Errorf("dlq partition %d: %v", o.Partition, o.Err)
		}
		total += max(o.Offset, 0)
	})
	if total != 3 {
		t.Fatalf("DLQ %s holds %d records, want 3", p.dlqTopic(), total)
	}
	dlq := p.kafka(kgo.ConsumeTopics(p.dlqTopic()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := map[int64]string{}
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	defer dcancel()
	for len(got) < 3 && dctx.Err() == nil {
		dlq.PollFetches(dctx).EachRecord(func(r *kgo.Record) {
			h := map[string]string{}
			for _, kv := range r.Headers {
				h[kv.Key] = string(kv.Value)
			}
			off, err := strconv.ParseInt(h["tributary.source.offset"], 10, 64)
			if err != nil {
				t.Errorf("DLQ record without a source offset: headers %v", h)
				return
			}
			if h["tributary.source.topic"] != p.topic() || h["tributary.source.partition"] != strconv.Itoa(int(part)) {
				t.Errorf("DLQ record of offset %d: source %s/%s, want %s/%d", off, h["tributary.source.topic"],
					h["tributary.source.partition"], p.topic(), part)
			}
			if h["tributary.error"] == "" {
				t.Errorf("DLQ record of offset %d: no tributary.error header", off)
			}
			for _, src := range recs {
				if src.Offset == off && string(src.Value) != string(r.Value) {
					t.Errorf("DLQ record of offset %d: value %q, want the source record's %q", off, r.Value, src.Value)
				}
			}
			got[off] = h["tributary.reason"]
		})
	}
	if fmt.Sprint(got) != fmt.Sprint(wantReason) {
		t.Fatalf("DLQ source offsets and reasons = %v, want %v", got, wantReason)
	}
}

// TestLoaderOutOfOrder: a stale version never wins over a newer one that
// was applied first, a delete stays deleted when an older insert of the row
// arrives after it, and redelivering everything changes nothing. An update
// whose TOASTed body is unchanged keeps the body of the newest version, not
// of whichever version came last in the batch.
func TestLoaderOutOfOrder(t *testing.T) {
	p := newPipeline(t, []int{0}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	cols, part, ids := p.craftedIDs(ctx, 5)
	a, b, sentinel1, sentinel2, c := ids[0], ids[1], ids[2], ids[3], ids[4]

	batch := []*kgo.Record{
		p.record(p.changeEnv(cols, envelope.OpUpdate, a, lsn("0/2000"), docRow(a, "1", "new", "new body")), part),
		p.record(p.changeEnv(cols, envelope.OpInsert, a, lsn("0/1000"), docRow(a, "1", "old", "old body")), part),
		p.record(p.changeEnv(cols, envelope.OpDelete, b, lsn("0/1500"), nil), part),
		p.record(p.changeEnv(cols, envelope.OpInsert, b, lsn("0/1400"), docRow(b, "1", "deleted later", "b")), part),
	}
	p.produce(ctx, append(batch, p.record(p.changeEnv(cols, envelope.OpInsert, sentinel1, lsn("0/1600"), docRow(sentinel1, "1", "s1", "b")), part))...)
	p.waitDoc(ctx, sentinel1, "first sentinel", func(s int, _ docAnswer) bool { return s == http.StatusOK })

	check := func(stage string) {
		t.Helper()
		if s, d := p.getDoc(ctx, a); s != http.StatusOK || len(d.Copies) != 1 || d.Copies[0].Row["title"] != "new" || d.Copies[0].Row["body"] != "new body" {
			t.Errorf("%s: id %d: status %d, answer %+v; want the version at 0/2000 (title new)", stage, a, s, d)
		}
		if s, d := p.getDoc(ctx, b); s != http.StatusNotFound {
			t.Errorf("%s: id %d deleted at 0/1500 is back (insert at 0/1400 delivered after): status %d, %+v", stage, b, s, d)
		}
		if dups := p.chDuplicates(ctx); dups != 0 {
			t.Errorf("%s: %d duplicate live (id, _shard) rows after FINAL", stage, dups)
		}
	}
	check("first delivery")
	const finalCount = "SELECT count() FROM %[1]s.%[2]s FINAL"
	const liveCount = "SELECT count() FROM %[1]s.%[2]s FINAL WHERE _deleted = 0"
	rows, live := p.chCount(ctx, finalCount), p.chCount(ctx, liveCount)

	// Redeliver the same records (as a replay after a crash would), then a
	// sentinel behind them in the same partition.
	p.produce(ctx, append(batch, p.record(p.changeEnv(cols, envelope.OpInsert, sentinel2, lsn("0/1700"), docRow(sentinel2, "1", "s2", "b")), part))...)
	p.waitDoc(ctx, sentinel2, "second sentinel", func(s int, _ docAnswer) bool { return s == http.StatusOK })
	check("redelivery")
	if r, l := p.chCount(ctx, finalCount), p.chCount(ctx, liveCount); r != rows+1 || l != live+1 {
		t.Errorf("redelivery changed ClickHouse: %d rows (%d live) after FINAL, want %d (%d) plus the sentinel", r, l, rows, live)
	}

	// Out of order in one batch, then an update that leaves the TOASTed
	// body unchanged: the body is the newest version's (0/2000).
	unchanged := docRow(c, "1", "newer", "")
	delete(unchanged, "body")
	upd := p.changeEnv(cols, envelope.OpUpdate, c, lsn("0/3000"), unchanged)
	upd.Unchanged = []string{"body"}
	p.produce(ctx,
		p.record(p.changeEnv(cols, envelope.OpUpdate, c, lsn("0/2000"), docRow(c, "1", "new", "new body")), part),
		p.record(p.changeEnv(cols, envelope.OpInsert, c, lsn("0/1000"), docRow(c, "1", "old", "old body")), part),
		p.record(upd, part),
	)
	p.waitDoc(ctx, c, "update after out-of-order versions", func(s int, d docAnswer) bool {
		return s == http.StatusOK && len(d.Copies) == 1 && d.Copies[0].Row["title"] == "newer"
	})
	if _, d := p.getDoc(ctx, c); d.Copies[0].Row["body"] != "new body" {
		t.Errorf("unchanged TOAST body of id %d filled from a stale version: body %q, want %q (version 0/2000; 0/1000 came later in the batch)",
			c, d.Copies[0].Row["body"], "new body")
	}

	// A reader restarted behind what Kafka holds sends a row's changes
	// again; a new unchanged-TOAST update behind them in the same batch
	// takes its body from ClickHouse, not from the stale repeats.
	up2 := docRow(c, "1", "after the repeats", "")
	delete(up2, "body")
	upd2 := p.changeEnv(cols, envelope.OpUpdate, c, lsn("0/4000"), up2)
	upd2.Unchanged = []string{"body"}
	p.produce(ctx,
		p.record(p.changeEnv(cols, envelope.OpInsert, c, lsn("0/1000"), docRow(c, "1", "old", "old body")), part),
		p.record(p.changeEnv(cols, envelope.OpUpdate, c, lsn("0/2000"), docRow(c, "1", "new", "new body")), part),
		p.record(upd, part),
		p.record(upd2, part),
	)
	p.waitDoc(ctx, c, "unchanged-TOAST update behind repeated changes", func(s int, d docAnswer) bool {
		return s == http.StatusOK && len(d.Copies) == 1 && d.Copies[0].Row["title"] == "after the repeats"
	})
	if _, d := p.getDoc(ctx, c); d.Copies[0].Row["body"] != "new body" {
		t.Errorf("id %d after repeats: body %q, want %q", c, d.Copies[0].Row["body"], "new body")
	}

	// A re-snapshot (epoch 1) loaded in one batch: the new copy of the row,
	// the snapshot end, then a streamed update leaving the body unchanged.
	// The snapshot end tombstones older epochs only: the copy stays the
	// update's base (it was forgotten, and the update dead-lettered).
	copied := docRow(c, "1", "copied", "copy body")
	read := p.changeEnv(cols, envelope.OpRead, c, 0, copied)
	read.Epoch, read.CommitLSN = 1, 0
	end := &envelope.Event{V: envelope.Version, Kind: envelope.KindChange, Shard: 0, Schema: "public", Table: p.table(),
		Op: envelope.OpSnapshotEnd, Epoch: 1, CommitLSN: lsn("0/4800"), CommitTime: time.Now().UTC().Truncate(time.Second),
		Partitions: int32(p.partitions(ctx))}
	up3 := docRow(c, "1", "after the snapshot end", "")
	delete(up3, "body")
	upd3 := p.changeEnv(cols, envelope.OpUpdate, c, lsn("0/5000"), up3)
	upd3.Epoch, upd3.Unchanged = 1, []string{"body"}
	p.produce(ctx, p.record(read, part), p.record(end, part), p.record(upd3, part))
	p.waitDoc(ctx, c, "unchanged-TOAST update after a snapshot end", func(s int, d docAnswer) bool {
		return s == http.StatusOK && len(d.Copies) == 1 && d.Copies[0].Row["title"] == "after the snapshot end"
	})
	if _, d := p.getDoc(ctx, c); d.Copies[0].Row["body"] != "copy body" {
		t.Errorf("id %d after a snapshot end: body %q, want %q (the new epoch's copy)", c, d.Copies[0].Row["body"], "copy body")
	}
}

// TestLoaderSchemaEvolution: columns added at the source appear in
// ClickHouse and the API; a dropped column is NULL in newer rows while
// older rows keep their values. A type change stops that table loudly (its
// records stay uncommitted, the gauge says so) while the loader keeps
// running and another table keeps loading.
func TestLoaderSchemaEvolution(t *testing.T) {
	p := newMeteredPipeline(t, []int{0}, true)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	tbl := pgx.Identifier{p.table()}.Sanitize()

	a := p.insert(ctx, 0, 1, "before", "body a")
	p.waitDoc(ctx, a, "row before the change", func(s int, d docAnswer) bool {
		return s == http.StatusOK && len(d.Copies) == 1 && d.Copies[0].Row["title"] == "before"
	})

	// Columns added while streaming.
	p.exec(ctx, 0, fmt.Sprintf("ALTER TABLE %s ADD COLUMN tags text, ADD COLUMN price numeric(10,2)", tbl))
	b := p.queryID(ctx, 0, fmt.Sprintf("INSERT INTO %s (workspace_id, title, body, tags, price) VALUES (2, 'with tags', 'body b', '{red,blue}', 19.99) RETURNING id", tbl))
	p.waitDoc(ctx, b, "row with added columns", func(s int, d docAnswer) bool {
		return s == http.StatusOK && len(d.Copies) == 1 && d.Copies[0].Row["tags"] == "{red,blue}"
	})
	if _, d := p.getDoc(ctx, b); d.Copies[0].Row["price"] != "19.99" || d.Copies[0].Row["title"] != "with tags" {
		t.Errorf("row %d with added columns: %+v, want price 19.99 and title \"with tags\"", b, d.Copies[0].Row)
	}
	if _, d := p.getDoc(ctx, a); d.Copies[0].Row["tags"] != nil || d.Copies[0].Row["price"] != nil || d.Copies[0].Row["title"] != "before" {
		t.Errorf("row %d written before the columns existed: %+v, want tags and price null, title kept", a, d.Copies[0].Row)
	}

	// A dropped column: NULL from now on, kept in older rows.
	p.exec(ctx, 0, fmt.Sprintf("ALTER TABLE %s DROP COLUMN title", tbl))
	c := p.queryID(ctx, 0, fmt.Sprintf("INSERT INTO %s (workspace_id, body, tags, price) VALUES (3, 'body c', '{green}', 5.25) RETURNING id", tbl))
	p.waitDoc(ctx, c, "row after the drop", func(s int, d docAnswer) bool {
		return s == http.StatusOK && len(d.Copies) == 1 && d.Copies[0].Row["tags"] == "{green}"
	})
	if _, d := p.getDoc(ctx, c); d.Copies[0].Row["price"] != "5.25" || d.Copies[0].Row["body"] != "body c" {
		t.Errorf("row %d after the drop: %+v", c, d.Copies[0].Row)
	} else if title, ok := d.Copies[0].Row["title"]; !ok || title != nil {
		t.Errorf("row %d after the drop: title %v (present %v), want null", c, title, ok)
	}
	for id, title := range map[int64]string{a: "before", b: "with tags"} {
		if _, d := p.getDoc(ctx, id); len(d.Copies) != 1 || d.Copies[0].Row["title"] != title {
			t.Errorf("row %d lost its title after the drop: %+v", id, d)
		}
	}
	if v, _ := p.metric("tributary_loader_table_stopped", map[string]string{"table": p.table()}); v != 0 {
		t.Fatalf("compatible changes stopped the table")
	}

	// An incompatible change: the table stops, loudly, and nothing of it
	// after the change is applied or committed.
	p.exec(ctx, 0, fmt.Sprintf("ALTER TABLE %s ALTER COLUMN workspace_id TYPE text", tbl))
	d := p.queryID(ctx, 0, fmt.Sprintf("INSERT INTO %s (workspace_id, body) VALUES ('ws-d', 'body d') RETURNING id", tbl))
	p.waitFor(ctx, 60*time.Second, "tributary_loader_table_stopped = 1", func() bool {
		v, _ := p.metric("tributary_loader_table_stopped", map[string]string{"table": p.table()})
		return v == 1
	})

	// The other table still loads: the loader is alive.
	o := p.queryID(ctx, 0, fmt.Sprintf("INSERT INTO %s (workspace_id, title, body) VALUES (9, 'other', 'o') RETURNING id", pgx.Identifier{p.other}.Sanitize()))
	p.waitFor(ctx, 60*time.Second, "a row of the other table", func() bool {
		var n uint64
		err := p.store.Conn().QueryRow(ctx, fmt.Sprintf("SELECT count() FROM `%s`.`%s` FINAL WHERE id = ? AND _deleted = 0", p.chDB, p.other), o).Scan(&n)
		return err == nil && n == 1
	})
	if s, ans := p.getDoc(ctx, d); s != http.StatusNotFound {
		t.Errorf("row %d written after the type change is visible: status %d, %+v", d, s, ans)
	}
	if err := p.failed(); err != nil {
		t.Fatalf("a component failed instead of stopping one table: %v", err)
	}

	// The record that stopped the table is not committed, so a loader
	// restarted after the fix reads it again.
	part, off := p.findChange(ctx, d, func(cols []envelope.Column) bool {
		for _, c := range cols {
			if c.Name == "workspace_id" {
				return c.Type == "text"
			}
		}
		return false
	})
	time.Sleep(2 * time.Second) // several batches and watermark rounds later
	if got := p.committed(ctx, part); got > off {
		t.Errorf("stopped table: committed offset %d of partition %d is past the change that stopped it (offset %d): "+
			"a restarted loader would skip it", got, part, off)
	}
}

// TestLoaderStopCommitsNothingPast: when a table stops on an incompatible
// column list, records of that table behind the stopping change in the
// same batch (a watermark, a dead letter) must not be committed or
// applied either: committing them moves the group's offset past the
// stopping change, and the watermark claims freshness for changes that
// were never written.
func TestLoaderStopCommitsNothingPast(t *testing.T) {
	p := newMeteredPipeline(t, []int{0}, false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	cols, part, ids := p.craftedIDs(ctx, 1)
	id := ids[0]

	changed := make([]envelope.Column, len(cols))
	copy(changed, cols)
	for i := range changed {
		if changed[i].Name == "workspace_id" {
			changed[i].Type, changed[i].OID = "text", 25
		}
	}
	const ghostShard = 9 // no reader writes watermarks for it
	wm, err := envelope.Encode(&envelope.Event{Kind: envelope.KindWatermark, Shard: ghostShard,
		CommitLSN: lsn("0/FFFF0000"), CommitTime: time.Now().UTC(), Partitions: int32(p.partitions(ctx))})
	if err != nil {
		t.Fatal(err)
	}
	recs := p.produce(ctx,
		p.record(p.changeEnv(changed, envelope.OpInsert, id, lsn("0/100"), docRow(id, "ws-x", "typed anew", "b")), part),
		&kgo.Record{Topic: p.topic(), Partition: part, Value: wm},
		&kgo.Record{Topic: p.topic(), Partition: part, Key: []byte("garbage"), Value: []byte("not json")},
	)
	p.waitFor(ctx, 60*time.Second, "tributary_loader_table_stopped = 1", func() bool {
		v, _ := p.metric("tributary_loader_table_stopped", map[string]string{"table": p.table()})
		return v == 1
	})
	time.Sleep(2 * time.Second) // the batch's commit, if any, is done
	if got := p.committed(ctx, part); got > recs[0].Offset {
		t.Errorf("committed offset %d of partition %d is past the change that stopped the table (offset %d): "+
			"a restarted loader skips it and the rows behind it", got, part, recs[0].Offset)
	}
	if w := p.chCount(ctx, "SELECT count() FROM %[1]s._watermarks WHERE shard = ?", uint16(ghostShard)); w != 0 {
		t.Errorf("a watermark behind the stopping change was written (%d rows for shard %d): freshness claims changes that were not applied", w, ghostShard)
	}
	if err := p.failed(); err != nil {
		t.Fatal(err)
	}
}

// TestLoaderRebalance: a second loader joins the group while two shards
// take inserts, updates and deletes, then leaves; no change is lost or
// applied twice across the handovers.
func TestLoaderRebalance(t *testing.T) {
	p := newPipeline(t, []int{0, 1}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tbl := p.table()
	for _, s := range p.shards {
		id := p.insert(ctx, s, int64(s), "warm-up", "w")
		p.waitDoc(ctx, id, "warm-up row", func(st int, _ docAnswer) bool { return st == http.StatusOK })
	}

	// The workers pause 400 changes after the second loader got partitions
	// (however long the rebalance took on a loaded machine) until it left.
	const total, joinAt, afterJoin = 2600, 400, 400
	var issued, done, pause atomic.Int64
	pause.Store(math.MaxInt64)
	leave := make(chan struct{}) // closed once the second loader has left
	errs := make(chan error, len(p.shards))
	var wg sync.WaitGroup
	for _, s := range p.shards {
		wg.Add(1)
		go func(shard int) {
			defer wg.Done()
			errs <- churnCounted(ctx, p.stack.ShardDSNs[shard], tbl, shard, &issued, &done, total, &pause, leave)
		}(s)
	}

	adm := kadm.NewClient(p.kafka())
	members := func() (int, error) { return groupMembers(ctx, adm, p.group()) }
	p.waitFor(ctx, 60*time.Second, fmt.Sprintf("%d changes", joinAt), func() bool { return done.Load() >= joinAt })
	l2ctx, l2cancel := context.WithCancel(ctx)
	defer l2cancel()
	l2 := p.startMeteredLoader(l2ctx, "l2")
	p.waitFor(ctx, 60*time.Second, "two loaders with partitions", func() bool { n, err := members(); return err == nil && n == 2 })
	joined := done.Load()
	pause.Store(joined + afterJoin)
	t.Logf("second loader has partitions after %d changes", joined)
	p.waitFor(ctx, 120*time.Second, fmt.Sprintf("%d changes", min(joined+afterJoin, total)), func() bool {
		return done.Load() >= min(joined+afterJoin, total)
	})
	p.waitFor(ctx, 60*time.Second, "the second loader applied rows", func() bool {
		v, _ := metricOf(t, l2, "tributary_loader_rows_inserted_total", map[string]string{"table": tbl})
		return v > 0
	})
	l2cancel()
	close(leave)
	p.waitFor(ctx, 60*time.Second, "one loader with every partition", func() bool { n, err := members(); return err == nil && n == 1 })
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("workload: %v", err)
		}
	}
	t.Logf("%d changes written", done.Load())
	l2rows, _ := metricOf(t, l2, "tributary_loader_rows_inserted_total", map[string]string{"table": tbl})
	if l2rows == 0 {
		t.Fatalf("the second loader applied nothing while it held partitions")
	}
	t.Logf("the second loader applied %v rows", l2rows)

	var diff string
	p.waitFor(ctx, 120*time.Second, "ClickHouse equal to the shards", func() bool {
		diff = p.compare(ctx, tbl)
		return diff == ""
	})
	if dups := p.chDuplicates(ctx); dups != 0 {
		t.Fatalf("%d duplicate live (id, _shard) rows after FINAL", dups)
	}
}

// churnCounted writes single-row inserts (some with TOASTed bodies), updates
// (some keeping the TOASTed body) and deletes on one shard, sharing a
// budget of total changes with the other workers; change number pause and
// later wait until leave is closed. Errors are returned, never fatal.
func churnCounted(ctx context.Context, dsn, tbl string, shard int, issued, done *atomic.Int64, total int64, pause *atomic.Int64, leave <-chan struct{}) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	q := pgx.Identifier{tbl}.Sanitize()
	pick := "(SELECT id FROM " + q + " WHERE title <> 'warm-up' ORDER BY random() LIMIT 1)"
	for {
		n := issued.Add(1)
		if n > total {
			return nil
		}
		if n > pause.Load() {
			select {
			case <-leave:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		var err error
		switch op := rand.IntN(10); {
		case op < 5:
			body := "small"
			if rand.IntN(4) == 0 {
				body = strings.Repeat(strconv.Itoa(rand.IntN(10)), 3000+rand.IntN(3000))
			}
			_, err = conn.Exec(ctx, "INSERT INTO "+q+" (workspace_id, title, body) VALUES ($1, $2, $3)",
				shard*100+rand.IntN(10), "t"+strconv.Itoa(rand.IntN(1e6)), body)
		case op < 8:
			_, err = conn.Exec(ctx, "UPDATE "+q+" SET title = $1 WHERE id = "+pick, "u"+strconv.Itoa(rand.IntN(1e6)))
		default:
			_, err = conn.Exec(ctx, "DELETE FROM "+q+" WHERE id = "+pick)
		}
		if err != nil {
			return fmt.Errorf("shard %d change %d: %w", shard, n, err)
		}
		done.Add(1)
		time.Sleep(5 * time.Millisecond) // spread the changes over the rebalances
	}
}
