package loader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/rowkey"
)

// change is one decoded change record of a batch.
type change struct {
	rec *kgo.Record
	ev  *envelope.Event
	// watermark is the newest watermark of the change's shard before it in
	// its partition in this batch (0: none): proof that the shard's copy had
	// ended before the change (baseless, images.go).
	watermark uint64
}

// partShard is a partition of a topic and a shard writing to it.
type partShard struct {
	topic     string
	partition int32
	shard     uint16
}

// deadLetter is a record that cannot be applied, with the reason.
type deadLetter struct {
	rec    *kgo.Record
	reason string // short, bounded label for metrics
	err    error
}

// apply writes one batch's rows and dead letters and returns its tail
// (tail.go): its watermarks and duplicate checks, and the records whose
// offsets may be committed once they are done. Records of stopped tables
// are left out.
func (l *Loader) apply(ctx context.Context, cl *kgo.Client, recs []*kgo.Record, decoded []decodeResult) (batchTail, error) {
	l.m.batchRows.Observe(float64(len(recs)))
	sb := l.sortBatch(recs, decoded)
	defer l.countRecords(sb.counts)
	writes, detects, err := l.applyTables(ctx, cl, sb)
	if err != nil {
		return batchTail{}, err
	}
	// Nothing orders one table's rows against another's (each table's
	// ownership and marks precede its own rows; the watermarks below follow
	// all of them): the tables are written concurrently, so a batch of
	// three tables waits for about one insert instead of three in a row.
	t0 := time.Now()
	if err := all(writes); err != nil {
		return batchTail{}, err
	}
	t0 = l.m.since(stageInsert, t0)
	inserted := t0
	l.dropStopped(sb)
	if err := l.sendDead(ctx, cl, sb.dead); err != nil {
		return batchTail{}, err
	}
	l.m.since(stageDLQ, t0)
	// Watermarks follow the batch's rows: every change before them in
	// their partitions is in. They, and the duplicate checks (which read
	// what the inserts wrote), are the batch's tail: written beside the
	// next batch, before this one's commit (a crash writes and checks
	// again). Neither waits for the other: readers waiting on a watermark
	// (read-your-writes) do not wait for the checks.
	return batchTail{commit: sb.commit, detects: detects, inserted: inserted, watermarks: l.watermarkWrite(ctx, sb.wms)}, nil
}

// sortedBatch is a batch's records sorted by what becomes of them.
type sortedBatch struct {
	byTable map[string][]change // changes by table, in partition order
	order   []string            // the tables, in the order first seen
	dead    []deadLetter
	wms     []chstore.Watermark
	commit  []*kgo.Record // the records whose offsets may be committed
	// Counted per batch, added once: a labelled counter costs a hash of its
	// labels on every call.
	counts    map[string]*[len(recordKinds)]int // by topic, then kind (recordKinds)
	last      *[len(recordKinds)]int            // counts of lastTopic
	lastTopic string
}

// recordKinds are the kind label's values of tributary_loader_records_total,
// indexed by the count constants.
var recordKinds = [...]string{countChange: "change", countWatermark: "watermark", countInvalid: "invalid"}

const (
	countChange = iota
	countWatermark
	countInvalid
)

// count counts one record of topic as recordKinds[kind]. Records come in
// runs of one topic: the last topic's counts are at hand without a hash.
func (sb *sortedBatch) count(topic string, kind int) {
	if sb.last == nil || sb.lastTopic != topic {
		c, ok := sb.counts[topic]
		if !ok {
			c = new([len(recordKinds)]int)
			sb.counts[topic] = c
		}
		sb.last, sb.lastTopic = c, topic
	}
	sb.last[kind]++
}

// sortBatch sorts a batch's records into changes by table, watermarks and
// dead letters; records of stopped tables are left out.
func (l *Loader) sortBatch(recs []*kgo.Record, decoded []decodeResult) *sortedBatch {
	sb := &sortedBatch{byTable: map[string][]change{}, commit: make([]*kgo.Record, 0, len(recs)), counts: map[string]*[len(recordKinds)]int{}}
	seenWM := map[partShard]uint64{} // the newest watermark so far, by partition and shard
	reject := func(d deadLetter) {
		sb.dead = append(sb.dead, d)
		sb.commit = append(sb.commit, d.rec)
	}
	for i, r := range recs {
		t, ok := l.cfg.Tables.ByTopic(r.Topic)
		if !ok {
			reject(deadLetter{r, "unknown_topic", fmt.Errorf("no table configured for topic %q", r.Topic)})
			continue
		}
		if _, stopped := l.stopped[t.Name]; stopped {
			continue
		}
		ev, err := decoded[i].ev, decoded[i].err
		if err != nil {
			sb.count(r.Topic, countInvalid)
			reject(deadLetter{r, "decode", err})
			continue
		}
		ps := partShard{r.Topic, r.Partition, uint16(ev.Shard)}
		switch ev.Kind {
		case envelope.KindWatermark:
			sb.count(r.Topic, countWatermark)
			sb.wms = append(sb.wms, chstore.Watermark{
				Topic: r.Topic, Partition: r.Partition, Partitions: ev.Partitions,
				Shard: uint16(ev.Shard), CommitLSN: uint64(ev.CommitLSN), CommitTS: ev.CommitTime,
			})
			seenWM[ps] = max(seenWM[ps], uint64(ev.CommitLSN))
			sb.commit = append(sb.commit, r)
		case envelope.KindChange:
			sb.count(r.Topic, countChange)
			if ev.Table != t.Name {
				reject(deadLetter{r, "wrong_table", fmt.Errorf("record of table %q in topic %q", ev.Table, r.Topic)})
				continue
			}
			if _, seen := sb.byTable[t.Name]; !seen {
				sb.order = append(sb.order, t.Name)
			}
			sb.byTable[t.Name] = append(sb.byTable[t.Name], change{r, ev, seenWM[ps]})
		}
	}
	return sb
}

// countRecords adds a batch's counts of records by topic and kind.
func (l *Loader) countRecords(counts map[string]*[len(recordKinds)]int) {
	for topic, c := range counts {
		for kind, n := range c {
			if n > 0 {
				l.m.records.WithLabelValues(topic, recordKinds[kind]).Add(float64(n))
			}
		}
	}
}

// applyTables converts each table's changes (applyTable) and returns
// their writes and duplicate checks. A table that stops is left out; the
// records of the others may be committed once they are written.
func (l *Loader) applyTables(ctx context.Context, cl *kgo.Client, sb *sortedBatch) (writes, detects []func() error, err error) {
	for _, name := range sb.order {
		t, _ := l.cfg.Tables.ByName(name)
		res, err := l.applyTable(ctx, name, t.Key(), sb.byTable[name])
		var stop *stopError
		switch {
		case errors.As(err, &stop):
			l.stopTable(cl, name, t.Topic, stop.err)
			continue
		case err != nil:
			return nil, nil, err
		}
		sb.dead = append(sb.dead, res.dead...)
		writes = append(writes, res.write)
		detects = append(detects, res.detect)
		for _, c := range sb.byTable[name] {
			sb.commit = append(sb.commit, c.rec)
		}
	}
	return writes, detects, nil
}

// dropStopped leaves out of a batch's commits, dead letters and
// watermarks those of tables that stopped. A stopped table's partitions
// must not move at all: CommitRecords commits the highest offset per
// partition, so one watermark or dead letter after the stopping change
// would commit past it, and its watermark would claim changes that were
// never written.
func (l *Loader) dropStopped(sb *sortedBatch) {
	if len(l.stopped) == 0 {
		return
	}
	stoppedTopic := func(topic string) bool {
		t, ok := l.cfg.Tables.ByTopic(topic)
		if !ok {
			return false
		}
		_, stopped := l.stopped[t.Name]
		return stopped
	}
	sb.commit = slices.DeleteFunc(sb.commit, func(r *kgo.Record) bool { return stoppedTopic(r.Topic) })
	sb.dead = slices.DeleteFunc(sb.dead, func(d deadLetter) bool { return stoppedTopic(d.rec.Topic) })
	sb.wms = slices.DeleteFunc(sb.wms, func(w chstore.Watermark) bool { return stoppedTopic(w.Topic) })
}

// watermarkWrite is the write of a batch's watermarks (nil: none).
func (l *Loader) watermarkWrite(ctx context.Context, wms []chstore.Watermark) func() error {
	if len(wms) == 0 {
		return nil
	}
	return func() error {
		t := time.Now()
		if err := l.retry(ctx, "replicas", func() error { return l.syncReplicas(ctx, wms) }); err != nil {
			return err
		}
		t = l.m.since(stageReplicas, t)
		if err := l.retry(ctx, "watermarks", func() error { return l.store.WriteWatermarks(ctx, wms) }); err != nil {
			return err
		}
		l.m.since(stageWatermarks, t)
		for _, w := range wms {
			l.m.watermarkLSN.WithLabelValues(strconv.Itoa(int(w.Shard))).Set(float64(w.CommitLSN))
		}
		return nil
	}
}

// converted says how row i of a batch's block was converted ahead of the
// sequential pass.
type converted struct {
	done bool
	err  error
}

// convertAll converts, on every core, the rows that need nothing from
// earlier rows (all but truncates and unchanged-TOAST updates) into row i
// of one block per batch. A stale version converted here is simply not
// inserted.
func (l *Loader) convertAll(t *chstore.Table, key []string, cs []change, now time.Time) (*chstore.Block, []converted) {
	block := t.NewBlock(len(cs), now)
	out := make([]converted, len(cs))
	parallel(len(cs), len(l.decoders), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			ev := cs[i].ev
			if isCut(ev) || len(ev.Unchanged) > 0 {
				continue
			}
			row := sourceRow(ev, key)
			out[i].err = block.Set(i, &row)
			out[i].done = true
		}
	})
	return block, out
}

// sourceRow is the row a change writes: its new image, or for a delete the
// old one (at least the key) marked deleted. A key column the old image
// lacks is taken from the event's key text. A value, not a pointer: the
// row lives on the converting goroutine's stack.
func sourceRow(ev *envelope.Event, key []string) chstore.Row {
	row := chstore.Row{
		Shard: uint16(ev.Shard), Version: ev.RowVersion(), CommitLSN: uint64(ev.CommitLSN),
		CommitTS: ev.CommitTime, Values: ev.After,
	}
	if ev.Op == envelope.OpDelete {
		row.Deleted = true
		row.Values = ev.Before
		if row.Values == nil {
			row.Values = map[string]*string{}
		}
		if len(key) == 1 {
			if _, ok := row.Values[key[0]]; !ok {
				id := ev.ID
				row.Values[key[0]] = &id
			}
			return row
		}
		if _, ok := rowkey.Of(key, row.Values); !ok {
			// A malformed key text leaves the key columns unset, and
			// Block.Set refuses the row (a dead letter naming them).
			if parts, err := rowkey.Parse(ev.ID, len(key)); err == nil {
				vals := maps.Clone(row.Values)
				for i, c := range key {
					vals[c] = &parts[i]
				}
				row.Values = vals
			}
		}
	}
	return row
}

// keyValues are the values of t's key columns in the key text id, for a
// tombstone.
func keyValues(t *chstore.Table, id string) (map[string]*string, error) {
	parts, err := rowkey.Parse(id, len(t.Key))
	if err != nil {
		return nil, fmt.Errorf("key %q of %s: %w", id, t.Name, err)
	}
	vals := make(map[string]*string, len(parts))
	for i, c := range t.Key {
		vals[c] = &parts[i]
	}
	return vals, nil
}

// parallel runs f over [0, n) split into contiguous parts, one per worker
// (one part for small n).
func parallel(n, workers int, f func(lo, hi int)) {
	if n < 256 || workers < 2 {
		f(0, n)
		return
	}
	per := (n + workers - 1) / workers
	var wg sync.WaitGroup
	for lo := 0; lo < n; lo += per {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			f(lo, hi)
		}(lo, min(lo+per, n))
	}
	wg.Wait()
}

// decodeResult is one record's envelope or why it has none.
type decodeResult struct {
	ev  *envelope.Event
	err error
}

// decodeAll decodes a batch's envelopes on every core: each worker takes a
// contiguous run of records (mostly one partition, so one relation and its
// cached column list) with its own Decoder.
func (l *Loader) decodeAll(recs []*kgo.Record) []decodeResult {
	out := make([]decodeResult, len(recs))
	var next atomic.Int32
	parallel(len(recs), len(l.decoders), func(lo, hi int) {
		d := l.decoders[next.Add(1)-1]
		for i := lo; i < hi; i++ {
			out[i].ev, out[i].err = d.Decode(recs[i].Value)
		}
	})
	return out
}

// stopError marks a table-level failure: that table stops, the rest go on.
type stopError struct{ err error }

func (e *stopError) Error() string { return e.err.Error() }

func (l *Loader) stopTable(cl *kgo.Client, table, topic string, err error) {
	l.stopped[table] = err
	l.stops.note(table, topic, err, time.Now()) // stopped.go
	l.m.tableStopped.WithLabelValues(table).Set(1)
	cl.PauseFetchTopics(topic)
	l.log.Error("table stopped: fix the schema and restart the loader",
		slog.String("table", table), slog.String("topic", topic), slog.Any("err", err))
}

// retry runs f until it succeeds or ctx ends, backing off up to 5 s. The
// loader never skips a batch: a ClickHouse outage stops progress, and the
// uncommitted records wait in Kafka.
func (l *Loader) retry(ctx context.Context, what string, f func() error) error {
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := f()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		l.m.insertErrors.WithLabelValues(what).Inc()
		l.log.Warn("clickhouse write failed; retrying", slog.String("op", what),
			slog.Int("attempt", attempt), slog.Duration("backoff", backoff), slog.Any("err", err))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// sendDead writes dead letters to the DLQ topic, synchronously: their
// offsets are committed only once the DLQ holds them.
func (l *Loader) sendDead(ctx context.Context, cl *kgo.Client, dead []deadLetter) error {
	if len(dead) == 0 {
		return nil
	}
	out := make([]*kgo.Record, 0, len(dead))
	for _, d := range dead {
		l.m.dlq.WithLabelValues(d.rec.Topic, d.reason).Inc()
		l.log.Error("record sent to dead-letter topic", slog.String("topic", d.rec.Topic),
			slog.Int("partition", int(d.rec.Partition)), slog.Int64("offset", d.rec.Offset),
			slog.String("reason", d.reason), slog.Any("err", d.err))
		out = append(out, &kgo.Record{
			Topic: l.cfg.DLQTopic, Key: d.rec.Key, Value: d.rec.Value,
			Headers: []kgo.RecordHeader{
				{Key: "tributary.source.topic", Value: []byte(d.rec.Topic)},
				{Key: "tributary.source.partition", Value: []byte(strconv.Itoa(int(d.rec.Partition)))},
				{Key: "tributary.source.offset", Value: []byte(strconv.FormatInt(d.rec.Offset, 10))},
				{Key: "tributary.reason", Value: []byte(d.reason)},
				{Key: "tributary.error", Value: []byte(d.err.Error())},
			},
		})
	}
	return l.retry(ctx, "dlq produce", func() error { return cl.ProduceSync(ctx, out...).FirstErr() })
}

// kafkaPartitioner routes ids as the reader does (Kafka's murmur2), to find
// which rows a partition holds.
var kafkaPartitioner = kgo.StickyKeyPartitioner(nil).ForTopic("")

// forgetCut drops, from a batch's unchanged-TOAST bases, the rows a
// TRUNCATE or snapshot end c just tombstoned: those of its shard and
// partition below its version. Rows at or above it survive — a new epoch's
// copy that precedes its snapshot end in the batch — and stay the base of a
// later unchanged-TOAST update (forgetting them sent such updates to the
// dead-letter topic after a re-snapshot).
func forgetCut(latest map[chstore.RowKey]int, batchVersion map[chstore.RowKey]uint64, c change) {
	cut := c.ev.RowVersion()
	for k, v := range batchVersion {
		if k.Shard != uint16(c.ev.Shard) || v >= cut ||
			kafkaPartitioner.Partition(&kgo.Record{Key: []byte(k.ID)}, int(c.ev.Partitions)) != int(c.rec.Partition) {
			continue
		}
		delete(latest, k)
		delete(batchVersion, k)
	}
}

// tombstoneOlder applies a TRUNCATE or a snapshot end: every live row of
// its shard that this partition holds and whose version is below the
// record's row version gets a tombstone at that version. For a truncate
// that is every row older than it; for a snapshot end (version: the new
// epoch's lowest) every row the new copy did not contain — deleted at the
// source while the slot was not streaming. The reader sent one such record
// to every partition, so each partition's loader removes exactly its own
// rows, in order with the rows before and after it. The rows are read and
// tombstoned a page at a time (eachCut), so memory holds one page however
// large the table; a failure starts again from the first page (tombstones
// at one version are idempotent). It returns how many rows it removed.
func (l *Loader) tombstoneOlder(ctx context.Context, t *chstore.Table, c change) (int, error) {
	ev := c.ev
	if ev.Partitions <= 0 {
		return 0, fmt.Errorf("%s of %s from shard %d without a partition count", ev.Op, t.Name, ev.Shard)
	}
	if err := checkScope(t, ev); err != nil {
		return 0, &stopError{err} // partition.go: the same on every retry
	}
	cut := ev.RowVersion()
	var n int
	err := l.retry(ctx, "truncate "+t.Name, func() error {
		n = 0
		return l.eachCut(ctx, t, ev, cut, func(ids []string) error {
			var mine []string
			for _, id := range ids {
				if kafkaPartitioner.Partition(&kgo.Record{Key: []byte(id)}, int(ev.Partitions)) == int(c.rec.Partition) {
					mine = append(mine, id)
				}
			}
			if len(mine) == 0 {
				return nil
			}
			block := t.NewBlock(len(mine), time.Now())
			rows := make([]int, len(mine))
			for i, id := range mine {
				vals, err := keyValues(t, id)
				if err != nil {
					return err
				}
				err = block.Set(i, &chstore.Row{Shard: uint16(ev.Shard), Version: cut, Deleted: true,
					CommitLSN: uint64(ev.CommitLSN), CommitTS: ev.CommitTime, Values: vals})
				if err != nil {
					return err
				}
				rows[i] = i
			}
			n += len(mine)
			return l.store.InsertBlock(ctx, block, rows)
		})
	})
	if err != nil {
		return 0, err
	}
	// Tombstones may be newer than what either remembers.
	l.versions.Forget()
	l.images.ForgetTable(t.Name)
	return n, nil
}

// openAnomalyIDs returns the ids of this partition with an open anomaly
// involving shard: after a truncate or snapshot end of shard removed rows,
// each is checked again, like after a delete (an id whose copy here was
// live on another shard too is back to one shard, or none; one that kept
// its copy stays open). One read of the table's open anomalies, only when
// something was tombstoned: truncates and snapshot ends are rare.
func (l *Loader) openAnomalyIDs(ctx context.Context, table string, shard uint16, partition int32, partitions int32) ([]string, error) {
	var open map[string]chstore.Anomaly
	err := l.retry(ctx, "anomalies "+table, func() error {
		var err error
		open, err = l.store.Anomalies(ctx, table, nil, true)
		return err
	})
	if err != nil {
		return nil, err
	}
	var out []string
	for id, a := range open {
		if slices.Contains(a.Shards, shard) && kafkaPartitioner.Partition(&kgo.Record{Key: []byte(id)}, int(partitions)) == int(partition) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out, nil
}
