package loader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/dedupe"
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
	byTable := map[string][]change{}
	var order []string
	var dead []deadLetter
	var wms []chstore.Watermark
	commit := make([]*kgo.Record, 0, len(recs))
	// Counted per batch, added once: a labelled counter costs a hash of its
	// labels on every call.
	counts := map[[2]string]int{}
	seenWM := map[partShard]uint64{} // the newest watermark so far, by partition and shard
	defer func() {
		for k, n := range counts {
			l.m.records.WithLabelValues(k[0], k[1]).Add(float64(n))
		}
	}()

	for i, r := range recs {
		t, ok := l.cfg.Tables.ByTopic(r.Topic)
		if !ok {
			dead = append(dead, deadLetter{r, "unknown_topic", fmt.Errorf("no table configured for topic %q", r.Topic)})
			commit = append(commit, r)
			continue
		}
		if _, stopped := l.stopped[t.Name]; stopped {
			continue
		}
		ev, err := decoded[i].ev, decoded[i].err
		if err != nil {
			counts[[2]string{r.Topic, "invalid"}]++
			dead = append(dead, deadLetter{r, "decode", err})
			commit = append(commit, r)
			continue
		}
		switch ev.Kind {
		case envelope.KindWatermark:
			counts[[2]string{r.Topic, "watermark"}]++
			wms = append(wms, chstore.Watermark{
				Topic: r.Topic, Partition: r.Partition, Partitions: ev.Partitions,
				Shard: uint16(ev.Shard), CommitLSN: uint64(ev.CommitLSN), CommitTS: ev.CommitTime,
			})
			ps := partShard{r.Topic, r.Partition, uint16(ev.Shard)}
			seenWM[ps] = max(seenWM[ps], uint64(ev.CommitLSN))
			commit = append(commit, r)
		case envelope.KindChange:
			counts[[2]string{r.Topic, "change"}]++
			if ev.Table != t.Name {
				dead = append(dead, deadLetter{r, "wrong_table", fmt.Errorf("record of table %q in topic %q", ev.Table, r.Topic)})
				commit = append(commit, r)
				continue
			}
			if _, seen := byTable[t.Name]; !seen {
				order = append(order, t.Name)
			}
			byTable[t.Name] = append(byTable[t.Name], change{r, ev, seenWM[partShard{r.Topic, r.Partition, uint16(ev.Shard)}]})
		}
	}

	var detects []func() error // duplicate checks, run once the watermarks are out
	var writes []func() error  // each table's rows, after its ownership and marks
	for _, name := range order {
		t, _ := l.cfg.Tables.ByName(name)
		bad, write, detect, err := l.applyTable(ctx, name, t.Key(), byTable[name])
		var stop *stopError
		switch {
		case errors.As(err, &stop):
			l.stopTable(cl, name, t.Topic, stop.err)
			continue
		case err != nil:
			return batchTail{}, err
		}
		dead = append(dead, bad...)
		writes = append(writes, write)
		detects = append(detects, detect)
		for _, c := range byTable[name] {
			commit = append(commit, c.rec)
		}
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

	// A stopped table's partitions must not move at all: CommitRecords
	// commits the highest offset per partition, so one watermark or dead
	// letter after the stopping change would commit past it, and its
	// watermark would claim changes that were never written.
	if len(l.stopped) > 0 {
		stoppedTopic := func(topic string) bool {
			t, ok := l.cfg.Tables.ByTopic(topic)
			if !ok {
				return false
			}
			_, stopped := l.stopped[t.Name]
			return stopped
		}
		commit = slices.DeleteFunc(commit, func(r *kgo.Record) bool { return stoppedTopic(r.Topic) })
		dead = slices.DeleteFunc(dead, func(d deadLetter) bool { return stoppedTopic(d.rec.Topic) })
		wms = slices.DeleteFunc(wms, func(w chstore.Watermark) bool { return stoppedTopic(w.Topic) })
	}

	if err := l.sendDead(ctx, cl, dead); err != nil {
		return batchTail{}, err
	}
	l.m.since(stageDLQ, t0)
	// Watermarks follow the batch's rows: every change before them in
	// their partitions is in. They, and the duplicate checks (which read
	// what the inserts wrote), are the batch's tail: written beside the
	// next batch, before this one's commit (a crash writes and checks
	// again). Neither waits for the other: readers waiting on a watermark
	// (read-your-writes) do not wait for the checks.
	tl := batchTail{commit: commit, detects: detects, inserted: inserted}
	if len(wms) > 0 {
		tl.watermarks = func() error {
			t := time.Now()
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
	return tl, nil
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
			if ev.Op == envelope.OpTruncate || ev.Op == envelope.OpSnapshotEnd || len(ev.Unchanged) > 0 {
				continue
			}
			out[i].err = block.Set(i, sourceRow(ev, key))
			out[i].done = true
		}
	})
	return block, out
}

// sourceRow is the row a change writes: its new image, or for a delete the
// old one (at least the key) marked deleted. A key column the old image
// lacks is taken from the event's key text.
func sourceRow(ev *envelope.Event, key []string) *chstore.Row {
	row := &chstore.Row{
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

// applyTable writes the changes of one table, in partition order. Records
// that cannot be converted are returned as dead letters.
func (l *Loader) applyTable(ctx context.Context, name string, key []string, cs []change) (dead []deadLetter, write, detect func() error, err error) {
	// Time not spent reading, inserting or detecting is conversion.
	begin, waited := time.Now(), time.Duration(0)
	defer func() {
		l.m.stageSeconds.WithLabelValues(stageConvert).Add((time.Since(begin) - waited).Seconds())
	}()
	timed := func(stage string, f func() error) error {
		t := time.Now()
		err := f()
		d := time.Since(t)
		waited += d
		l.m.stageSeconds.WithLabelValues(stage).Add(d.Seconds())
		return err
	}
	// Bring the ClickHouse table up to every column set seen in the batch
	// (tables only grow), then convert every row against the final layout.
	var t *chstore.Table
	var lastCols []envelope.Column
	for _, c := range cs {
		if len(c.ev.Columns) == 0 || slices.Equal(c.ev.Columns, lastCols) {
			continue
		}
		before := t
		var schemaErr error
		// A schema the table cannot follow stops the table; anything else
		// (ClickHouse down, a timeout) is retried like every other write.
		err := l.retry(ctx, "ensure table "+name, func() error {
			var err error
			t, err = l.store.EnsureTable(ctx, name, key, c.ev.Columns)
			if errors.Is(err, chstore.ErrIncompatibleSchema) || errors.Is(err, chstore.ErrUnmappedType) {
				schemaErr = err
				return nil
			}
			return err
		})
		if schemaErr != nil {
			return nil, nil, nil, &stopError{schemaErr}
		}
		if err != nil {
			return nil, nil, nil, fmt.Errorf("ensure table %s: %w", name, err)
		}
		if before == nil || len(before.Columns) != len(t.Columns) {
			l.m.schemaChanges.WithLabelValues(name).Inc()
		}
		lastCols = c.ev.Columns
	}
	// The move log's index by document, before this batch's rows are
	// inserted (byid_index.go).
	if err := l.ensureMoveIndex(ctx, name, t); err != nil {
		return nil, nil, nil, err
	}
	var noColumns []deadLetter
	if t == nil {
		// No record of the batch carries columns: a TRUNCATE or snapshot end
		// alone. They apply to the table as it is in ClickHouse; where there
		// is none yet there is nothing to remove.
		var schemaErr error
		err := l.retry(ctx, "look up table "+name, func() error {
			var err error
			t, err = l.store.Lookup(ctx, name, key)
			if errors.Is(err, chstore.ErrIncompatibleSchema) {
				schemaErr = err
				return nil
			}
			return err
		})
		if schemaErr != nil {
			return nil, nil, nil, &stopError{schemaErr}
		}
		if err != nil {
			return nil, nil, nil, fmt.Errorf("look up table %s: %w", name, err)
		}
		var rest []change
		for _, c := range cs {
			switch {
			case c.ev.Op == envelope.OpTruncate || c.ev.Op == envelope.OpSnapshotEnd:
				if t != nil {
					rest = append(rest, c)
				}
			default:
				noColumns = append(noColumns, deadLetter{c.rec, "no_columns", fmt.Errorf("change of %s without column list", name)})
			}
		}
		if t == nil || len(rest) == 0 {
			noop := func() error { return nil }
			return noColumns, noop, noop, nil
		}
		cs = rest
	}

	dead = noColumns
	// Unchanged TOAST values come from the newest earlier image of the same
	// row: in this batch, in the image cache, or from ClickHouse. Batches
	// without such changes (nearly all in bulk loads) skip the bookkeeping.
	needBase := false
	for _, c := range cs {
		if len(c.ev.Unchanged) > 0 {
			needBase = true
			break
		}
	}
	var stored map[chstore.RowKey]chstore.Stored
	var pinned map[chstore.RowKey]dedupe.Image // cached bases, as of the batch's start
	if needBase {
		var lookup []chstore.RowKey
		var cols []string
		lookup, cols, pinned = l.baseLookups(name, cs)
		if len(lookup) > 0 {
			err := timed(stageRead, func() error {
				return l.retry(ctx, "read "+name, func() error {
					var err error
					stored, err = l.store.Current(ctx, t, lookup, cols)
					return err
				})
			})
			if err != nil {
				return nil, nil, nil, err
			}
		}
	}

	// The columns images of this table keep (nil: none, the cache is off for
	// it). Read after baseLookups, which learns them.
	cacheCols := l.toastCols[name]
	now := time.Now()
	// With needBase: the newest image of each row in this batch (an index
	// into block) and its version. The batch-local versions are what makes a
	// stale record unable to become a base, whatever Versions forgets.
	latest := map[chstore.RowKey]int{}
	batchVersion := map[chstore.RowKey]uint64{}
	// rows are the block's rows to insert, in order.
	rows := make([]int, 0, len(cs))
	block, pre := l.convertAll(t, key, cs, now)
	// Ids whose liveness a written change can alter (insert, snapshot read,
	// delete): the duplicate check asks about these. An update keeps the
	// row live where it was.
	var lifecycleIDs []string
	lifecycleSeen := map[string]bool{}
	// flush inserts the rows converted so far; a truncate needs them in
	// ClickHouse before it decides which rows it removes.
	cfgTable, _ := l.cfg.Tables.ByName(name)
	var owners []placed // shard-key values to place before the rows
	write = func() error {
		if len(rows) == 0 {
			return nil
		}
		if len(owners) > 0 || l.marksPending(name) {
			err := l.retry(ctx, "ownership "+name, func() error { return l.writePlaced(ctx, name, owners) })
			if err != nil {
				return err
			}
			owners = owners[:0]
		}
		start := time.Now()
		err := l.retry(ctx, "insert "+name, func() error { return l.store.InsertBlock(ctx, block, rows) })
		if err != nil {
			return err
		}
		l.m.insertSeconds.WithLabelValues(name).Observe(time.Since(start).Seconds())
		l.m.rowsInserted.WithLabelValues(name).Add(float64(len(rows)))
		rows = rows[:0]
		return nil
	}
	// flush writes now (before a truncate); the batch's last rows are
	// written by the caller, beside the other tables'.
	flush := func() error { return timed(stageInsert, write) }
	var newest time.Time
	for i, c := range cs {
		ev := c.ev
		if ev.CommitTime.After(newest) {
			newest = ev.CommitTime
		}
		if ev.Op == envelope.OpTruncate || ev.Op == envelope.OpSnapshotEnd {
			if err := flush(); err != nil {
				return nil, nil, nil, err
			}
			if err := l.markAll(ctx, name, ev); err != nil {
				return nil, nil, nil, err
			}
			var gone []string
			err := timed(stageRead, func() error {
				var err error
				gone, err = l.tombstoneOlder(ctx, t, c)
				return err
			})
			if err != nil {
				return nil, nil, nil, err
			}
			n := len(gone)
			// An id whose copy here was live on another shard too is
			// back to one shard (or none): its open anomaly is checked
			// again, like after a delete.
			reopen, err := l.openAnomalyIDs(ctx, name, uint16(ev.Shard), gone)
			if err != nil {
				return nil, nil, nil, err
			}
			for _, id := range reopen {
				if !lifecycleSeen[id] {
					lifecycleSeen[id] = true
					lifecycleIDs = append(lifecycleIDs, id)
				}
			}
			what := "truncate applied"
			if ev.Op == envelope.OpSnapshotEnd {
				what = "snapshot end applied: rows the new copy did not contain are deleted"
			}
			l.log.Info(what, slog.String("table", name), slog.Int("shard", ev.Shard), slog.Int("epoch", int(ev.Epoch)),
				slog.Int("partition", int(c.rec.Partition)), slog.Int("rows", n))
			forgetCut(latest, batchVersion, c)
			continue
		}
		k := chstore.RowKey{ID: ev.ID, Shard: uint16(ev.Shard)}
		dk := dedupe.Key{Table: name, ID: ev.ID, Shard: ev.Shard}
		ver := ev.RowVersion()
		stale := l.versions.Stale(dk, ver)
		if needBase && !stale {
			v, ok := batchVersion[k]
			stale = ok && ver <= v
		}
		if cacheCols != nil && !stale {
			im, ok := l.images.Get(dk)
			stale = ok && ver <= im.Version
		}
		if stale {
			// A redelivery or an older version (earlier in this batch or
			// already written): it can change nothing, and it must not
			// become the base of a later unchanged-TOAST fill.
			l.m.dropped.WithLabelValues(name).Inc()
			continue
		}
		var err error
		if pre[i].done {
			err = pre[i].err
		} else {
			row := sourceRow(ev, key)
			if len(ev.Unchanged) > 0 {
				// The candidates: this batch's image, the stored row as of
				// the batch's start, the cached image as of the batch's
				// start (when it has the columns). pickBase states the
				// invariant that makes one of them the update's base.
				var cands []base
				if j, ok := latest[k]; ok {
					cands = append(cands, base{version: batchVersion[k], value: func(col string) any { return block.Value(j, col) }})
				}
				if st, ok := stored[k]; ok {
					cands = append(cands, base{version: st.Version, deleted: st.Deleted, value: func(col string) any { return st.Values[col] }})
				}
				if im, ok := pinned[k]; ok && im.Covers(ev.Unchanged) {
					cands = append(cands, base{version: im.Version, deleted: im.Deleted, value: func(col string) any { return im.Values[col] }})
				}
				b, verdict := pickBase(ver, cands)
				if verdict == baseNone {
					verdict, err = l.baseless(ctx, t, c)
					if err != nil {
						return nil, nil, nil, err
					}
				}
				switch verdict {
				case baseSuperseded:
					l.m.dropped.WithLabelValues(name).Inc()
					continue
				case baseNone, baseTombstone:
					what := "no earlier version is stored"
					if verdict == baseTombstone {
						what = "the newest earlier version is deleted (a TRUNCATE or re-snapshot removed the row)"
					}
					dead = append(dead, deadLetter{c.rec, "toast_without_base",
						fmt.Errorf("row %s/%d: unchanged TOAST columns %s but %s",
							ev.ID, ev.Shard, strings.Join(ev.Unchanged, ","), what)})
					continue
				}
				row.Filled = map[string]any{}
				for _, col := range ev.Unchanged {
					row.Filled[col] = b.value(col)
				}
			}
			err = block.Set(i, row)
		}
		if err != nil {
			dead = append(dead, deadLetter{c.rec, "convert", err})
			continue
		}
		if needBase {
			latest[k] = i
			batchVersion[k] = ver
		}
		if cacheCols != nil {
			l.images.Put(dk, imageOf(block, i, ver, cacheCols))
		}
		rows = append(rows, i)
		// Remembered before the insert: an insert is retried until it
		// succeeds or the loader stops, and a stopped loader forgets.
		l.versions.Written(dk, ver)
		owners = append(owners, l.placeRow(cfgTable, ev)...)
		if ev.Op != envelope.OpUpdate && !lifecycleSeen[ev.ID] {
			lifecycleSeen[ev.ID] = true
			lifecycleIDs = append(lifecycleIDs, ev.ID)
		}
	}
	// Uniqueness is monitored: check every id this batch made appear or
	// disappear. Only ids that converted are asked about: they parse as the
	// id type.
	// The ids are cloned: the check runs after the batch (tail.go), and
	// they are slices of its decoded records.
	ids := make([]string, len(lifecycleIDs))
	for i, id := range lifecycleIDs {
		ids[i] = strings.Clone(id)
	}
	detect = func() error {
		return l.retry(ctx, "anomalies "+name, func() error { return l.detect(ctx, t, cfgTable, ids, newest) })
	}
	return dead, write, detect, nil
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
// rows, in order with the rows before and after it.
func (l *Loader) tombstoneOlder(ctx context.Context, t *chstore.Table, c change) ([]string, error) {
	ev := c.ev
	if ev.Partitions <= 0 {
		return nil, fmt.Errorf("%s of %s from shard %d without a partition count", ev.Op, t.Name, ev.Shard)
	}
	if err := checkScope(t, ev); err != nil {
		return nil, &stopError{err} // partition.go: the same on every retry
	}
	cut := ev.RowVersion()
	var ids []string
	err := l.retry(ctx, "truncate "+t.Name, func() error {
		var err error
		ids, err = l.liveCut(ctx, t, ev, cut) // partition.go
		return err
	})
	if err != nil {
		return nil, err
	}
	var mine []string
	for _, id := range ids {
		if kafkaPartitioner.Partition(&kgo.Record{Key: []byte(id)}, int(ev.Partitions)) == int(c.rec.Partition) {
			mine = append(mine, id)
		}
	}
	block := t.NewBlock(len(mine), time.Now())
	rows := make([]int, len(mine))
	for i, id := range mine {
		vals, err := keyValues(t, id)
		if err != nil {
			return nil, err
		}
		err = block.Set(i, &chstore.Row{Shard: uint16(ev.Shard), Version: cut, Deleted: true,
			CommitLSN: uint64(ev.CommitLSN), CommitTS: ev.CommitTime, Values: vals})
		if err != nil {
			return nil, err
		}
		rows[i] = i
	}
	if err := l.retry(ctx, "truncate "+t.Name, func() error { return l.store.InsertBlock(ctx, block, rows) }); err != nil {
		return nil, err
	}
	// Tombstones may be newer than what either remembers.
	l.versions.Forget()
	l.images.ForgetTable(t.Name)
	return mine, nil
}

// openAnomalyIDs returns those of ids (just tombstoned on shard) that have
// an open anomaly involving shard. One read of the table's open anomalies,
// only when something was tombstoned: truncates and snapshot ends are rare.
func (l *Loader) openAnomalyIDs(ctx context.Context, table string, shard uint16, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var open map[string]chstore.Anomaly
	err := l.retry(ctx, "anomalies "+table, func() error {
		var err error
		open, err = l.store.Anomalies(ctx, table, nil, true)
		return err
	})
	if err != nil || len(open) == 0 {
		return nil, err
	}
	var out []string
	for _, id := range ids {
		if a, ok := open[id]; ok && slices.Contains(a.Shards, shard) {
			out = append(out, id)
		}
	}
	return out, nil
}
