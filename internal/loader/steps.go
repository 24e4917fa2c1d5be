package loader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/dedupe"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/tables"
)

// The apply path of one table's changes in a batch is a line of steps:
//
//	ensure   the ClickHouse table follows every column list of the batch
//	fill     the stored and cached bases of unchanged-TOAST updates are read
//	convert  each change becomes a row of one block (its unchanged TOAST
//	         columns filled from its base), or a dead letter
//	insert   the block's rows, after their ownership and revenue marks
//	detect   the duplicate check of the ids the batch made appear or vanish
//
// Insert and detect are returned as functions: the batch runs every
// table's insert concurrently, and the detection in the batch's tail
// (tail.go). The steps reach ClickHouse through the loader's store
// interface (store.go), so they have unit tests on a fake.

// tableResult is what applying one table's changes leaves to do: its dead
// letters to send, its last rows to write, its duplicate check to run.
type tableResult struct {
	dead   []deadLetter
	write  func() error
	detect func() error
}

// noop is a write or detect with nothing to do.
func noop() error { return nil }

// applyTable writes the changes of one table, in partition order. Records
// that cannot be converted are returned as dead letters; a schema the
// table cannot follow is a *stopError.
func (l *Loader) applyTable(ctx context.Context, name string, key []string, cs []change) (tableResult, error) {
	clock := &stageClock{l: l, begin: time.Now()}
	defer clock.convertDone()
	t, err := l.ensureSchema(ctx, name, key, cs)
	if err != nil {
		return tableResult{}, err
	}
	// The move log's index by document, before this batch's rows are
	// inserted (byid_index.go).
	if err := l.ensureMoveIndex(ctx, name, t); err != nil {
		return tableResult{}, err
	}
	var dead []deadLetter
	if t == nil {
		if t, cs, dead, err = l.cutsOnly(ctx, name, key, cs); err != nil {
			return tableResult{}, err
		}
		if t == nil || len(cs) == 0 {
			return tableResult{dead: dead, write: noop, detect: noop}, nil
		}
	}
	bases, err := l.readBases(ctx, clock, name, t, cs)
	if err != nil {
		return tableResult{}, err
	}
	b := l.newTableBatch(name, key, t, cs, bases, clock)
	b.dead = dead
	if err := b.convert(ctx); err != nil {
		return tableResult{}, err
	}
	return tableResult{dead: b.dead, write: func() error { return b.insert(ctx) }, detect: b.detector(ctx)}, nil
}

// stageClock splits a table's apply time between its stages: time not
// spent reading, inserting or detecting is conversion.
type stageClock struct {
	l      *Loader
	begin  time.Time
	waited time.Duration
}

// timed runs f as stage.
func (c *stageClock) timed(stage string, f func() error) error {
	t := time.Now()
	err := f()
	d := time.Since(t)
	c.waited += d
	c.l.m.stageSeconds.WithLabelValues(stage).Add(d.Seconds())
	return err
}

// convertDone counts what was not timed as conversion.
func (c *stageClock) convertDone() {
	c.l.m.stageSeconds.WithLabelValues(stageConvert).Add((time.Since(c.begin) - c.waited).Seconds())
}

// ensureSchema brings the ClickHouse table up to every column set seen in
// the batch (tables only grow) and returns its final layout, which every
// row is converted against; nil when no change of the batch carries
// columns. A schema the table cannot follow stops the table; anything
// else (ClickHouse down, a timeout) is retried like every other write.
func (l *Loader) ensureSchema(ctx context.Context, name string, key []string, cs []change) (*chstore.Table, error) {
	var t *chstore.Table
	var lastCols []envelope.Column
	for _, c := range cs {
		if len(c.ev.Columns) == 0 || slices.Equal(c.ev.Columns, lastCols) {
			continue
		}
		before := t
		var err error
		t, err = l.schemaStep(ctx, "ensure table", name, func() (*chstore.Table, error) {
			return l.store.EnsureTable(ctx, name, key, c.ev.Columns)
		}, chstore.ErrIncompatibleSchema, chstore.ErrUnmappedType)
		if err != nil {
			return nil, err
		}
		if before == nil || len(before.Columns) != len(t.Columns) {
			l.m.schemaChanges.WithLabelValues(name).Inc()
		}
		lastCols = c.ev.Columns
	}
	return t, nil
}

// schemaStep runs f (what: "ensure table", "look up table") until it
// succeeds; an error that is one of stops ends it as a *stopError at once.
func (l *Loader) schemaStep(ctx context.Context, what, name string, f func() (*chstore.Table, error), stops ...error) (*chstore.Table, error) {
	var t *chstore.Table
	var schemaErr error
	err := l.retry(ctx, what+" "+name, func() error {
		var err error
		t, err = f()
		for _, stop := range stops {
			if errors.Is(err, stop) {
				schemaErr = err
				return nil
			}
		}
		return err
	})
	if schemaErr != nil {
		return nil, &stopError{schemaErr}
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, name, err)
	}
	return t, nil
}

// cutsOnly handles a batch of which no record carries columns: a TRUNCATE
// or snapshot end alone. They apply to the table as it is in ClickHouse
// (nil where there is none yet: nothing to remove), and are the changes
// left to apply; any other change is a dead letter.
func (l *Loader) cutsOnly(ctx context.Context, name string, key []string, cs []change) (*chstore.Table, []change, []deadLetter, error) {
	t, err := l.schemaStep(ctx, "look up table", name, func() (*chstore.Table, error) {
		return l.store.Lookup(ctx, name, key)
	}, chstore.ErrIncompatibleSchema)
	if err != nil {
		return nil, nil, nil, err
	}
	var rest []change
	var dead []deadLetter
	for _, c := range cs {
		switch {
		case isCut(c.ev):
			if t != nil {
				rest = append(rest, c)
			}
		default:
			dead = append(dead, deadLetter{c.rec, "no_columns", fmt.Errorf("change of %s without column list", name)})
		}
	}
	return t, rest, dead, nil
}

// isCut says whether ev is a TRUNCATE or a snapshot end: a change that
// removes the older rows of its shard and partition.
func isCut(ev *envelope.Event) bool {
	return ev.Op == envelope.OpTruncate || ev.Op == envelope.OpSnapshotEnd
}

// storedBases are the bases of a batch's unchanged-TOAST updates known
// before its first row is converted.
type storedBases struct {
	need   bool // some change of the batch leaves columns unchanged
	stored map[chstore.RowKey]chstore.Stored
	pinned map[chstore.RowKey]dedupe.Image // cached bases, as of the batch's start
}

// readBases reads the stored bases of the batch's unchanged-TOAST updates
// that neither the batch nor the image cache provides (baseLookups).
// Unchanged TOAST values come from the newest earlier image of the same
// row: in this batch, in the image cache, or from ClickHouse. Batches
// without such changes (nearly all in bulk loads) skip the bookkeeping.
func (l *Loader) readBases(ctx context.Context, clock *stageClock, name string, t *chstore.Table, cs []change) (storedBases, error) {
	var b storedBases
	b.need = slices.ContainsFunc(cs, func(c change) bool { return len(c.ev.Unchanged) > 0 })
	if !b.need {
		return b, nil
	}
	var lookup []chstore.RowKey
	var cols []string
	lookup, cols, b.pinned = l.baseLookups(name, cs)
	if len(lookup) == 0 {
		return b, nil
	}
	err := clock.timed(stageRead, func() error {
		return l.retry(ctx, "read "+name, func() error {
			var err error
			b.stored, err = l.store.Current(ctx, t, lookup, cols)
			return err
		})
	})
	return b, err
}

// tableBatch is one table's changes of a batch being converted into one
// block, and what converting them learned.
type tableBatch struct {
	l     *Loader
	name  string
	key   []string
	t     *chstore.Table
	cfg   *tables.Table
	cs    []change
	clock *stageClock
	bases storedBases
	// cacheCols are the columns images of this table keep (nil: none, the
	// cache is off for it), as learned by baseLookups.
	cacheCols []string
	block     *chstore.Block
	pre       []converted // convertAll's rows
	// With bases.need: the newest image of each row in this batch (an
	// index into block) and its version. The batch-local versions are
	// what makes a stale record unable to become a base, whatever
	// Versions forgets.
	latest       map[chstore.RowKey]int
	batchVersion map[chstore.RowKey]uint64
	rows         []int    // the block's rows to insert, in order
	owners       []placed // shard-key values to place before the rows
	// lifecycle are the ids whose liveness a written change can alter
	// (insert, snapshot read, delete): the duplicate check asks about
	// these. An update keeps the row live where it was.
	lifecycle idSet
	newest    time.Time // the newest commit time of the changes
	dead      []deadLetter
}

// newTableBatch converts, on every core, the rows of cs that need nothing
// from earlier rows (convertAll); convert does the rest in order.
func (l *Loader) newTableBatch(name string, key []string, t *chstore.Table, cs []change, bases storedBases, clock *stageClock) *tableBatch {
	cfg, _ := l.cfg.Tables.ByName(name)
	b := &tableBatch{l: l, name: name, key: key, t: t, cfg: cfg, cs: cs, clock: clock, bases: bases,
		cacheCols: l.toastCols[name], latest: map[chstore.RowKey]int{}, batchVersion: map[chstore.RowKey]uint64{},
		rows: make([]int, 0, len(cs)), lifecycle: idSet{seen: make(map[string]bool, len(cs)/4)}} // inserts and deletes: sized for a quarter, not grown from empty
	b.block, b.pre = l.convertAll(t, key, cs, time.Now())
	return b
}

// convert applies the changes in order: a cut tombstones what it
// removes, every other change becomes a row of the block (or a dead
// letter, or nothing when stale).
func (b *tableBatch) convert(ctx context.Context) error {
	for i, c := range b.cs {
		if c.ev.CommitTime.After(b.newest) {
			b.newest = c.ev.CommitTime
		}
		var err error
		if isCut(c.ev) {
			err = b.cut(ctx, c)
		} else {
			err = b.change(ctx, i)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// cut applies a TRUNCATE or snapshot end: the rows converted so far are
// written first (it decides which rows it removes from what ClickHouse
// holds), then the older rows of its shard and partition are tombstoned.
func (b *tableBatch) cut(ctx context.Context, c change) error {
	l, ev := b.l, c.ev
	if err := b.clock.timed(stageInsert, func() error { return b.insert(ctx) }); err != nil {
		return err
	}
	if err := l.markAll(ctx, b.name, ev); err != nil {
		return err
	}
	var gone int
	err := b.clock.timed(stageRead, func() error {
		var err error
		gone, err = l.tombstoneOlder(ctx, b.t, c)
		return err
	})
	if err != nil {
		return err
	}
	if gone > 0 {
		reopen, err := l.openAnomalyIDs(ctx, b.name, uint16(ev.Shard), c.rec.Partition, ev.Partitions)
		if err != nil {
			return err
		}
		for _, id := range reopen {
			b.lifecycle.add(id)
		}
	}
	what := "truncate applied"
	if ev.Op == envelope.OpSnapshotEnd {
		what = "snapshot end applied: rows the new copy did not contain are deleted"
	}
	l.log.Info(what, slog.String("table", b.name), slog.Int("shard", ev.Shard), slog.Int("epoch", int(ev.Epoch)),
		slog.Int("partition", int(c.rec.Partition)), slog.Int("rows", gone))
	forgetCut(b.latest, b.batchVersion, c)
	return nil
}

// stale says whether change c at version ver can change nothing: a
// redelivery or an older version (earlier in this batch or already
// written). It must not become the base of a later unchanged-TOAST fill.
func (b *tableBatch) stale(k chstore.RowKey, dk dedupe.Key, ver uint64) bool {
	if b.l.versions.Stale(dk, ver) {
		return true
	}
	if b.bases.need {
		if v, ok := b.batchVersion[k]; ok && ver <= v {
			return true
		}
	}
	if b.cacheCols != nil {
		if im, ok := b.l.images.Get(dk); ok && ver <= im.Version {
			return true
		}
	}
	return false
}

// change converts change i into row i of the block and records it as
// written: in the batch's bases, the image cache, the version map, the
// ownerships to place and the ids to check.
func (b *tableBatch) change(ctx context.Context, i int) error {
	l, c := b.l, b.cs[i]
	ev := c.ev
	k := chstore.RowKey{ID: ev.ID, Shard: uint16(ev.Shard)}
	dk := dedupe.Key{Table: b.name, ID: ev.ID, Shard: ev.Shard}
	ver := ev.RowVersion()
	if b.stale(k, dk, ver) {
		l.m.dropped.WithLabelValues(b.name).Inc()
		return nil
	}
	err := b.pre[i].err
	if !b.pre[i].done {
		row := sourceRow(ev, b.key)
		if len(ev.Unchanged) > 0 {
			ok, ferr := b.fill(ctx, c, k, ver, &row)
			if ferr != nil || !ok {
				return ferr
			}
		}
		err = b.block.Set(i, &row)
	}
	if err != nil {
		b.dead = append(b.dead, deadLetter{c.rec, "convert", err})
		return nil
	}
	if b.bases.need {
		b.latest[k] = i
		b.batchVersion[k] = ver
	}
	if b.cacheCols != nil {
		l.images.Put(dk, imageOf(b.block, i, ver, b.cacheCols))
	}
	b.rows = append(b.rows, i)
	// Remembered before the insert: an insert is retried until it
	// succeeds or the loader stops, and a stopped loader forgets.
	l.versions.Written(dk, ver)
	b.owners = append(b.owners, l.placeRow(b.cfg, ev)...)
	if ev.Op != envelope.OpUpdate {
		b.lifecycle.add(ev.ID)
	}
	return nil
}

// fill sets row's unchanged-TOAST columns from the base of the update c
// (row k at version ver). The candidates: this batch's image, the stored
// row as of the batch's start, the cached image as of the batch's start
// (when it has the columns); pickBase states the invariant that makes one
// of them the update's base. It reports false when the update is not
// written: superseded (dropped) or without a base (a dead letter).
func (b *tableBatch) fill(ctx context.Context, c change, k chstore.RowKey, ver uint64, row *chstore.Row) (bool, error) {
	ev := c.ev
	var cands []base
	if j, ok := b.latest[k]; ok {
		cands = append(cands, base{version: b.batchVersion[k], value: func(col string) any { return b.block.Value(j, col) }})
	}
	if st, ok := b.bases.stored[k]; ok {
		cands = append(cands, base{version: st.Version, deleted: st.Deleted, value: func(col string) any { return st.Values[col] }})
	}
	if im, ok := b.bases.pinned[k]; ok && im.Covers(ev.Unchanged) {
		cands = append(cands, base{version: im.Version, deleted: im.Deleted, value: func(col string) any { return im.Values[col] }})
	}
	found, verdict := pickBase(ver, cands)
	if verdict == baseNone {
		var err error
		if verdict, err = b.l.baseless(ctx, b.t, c); err != nil {
			return false, err
		}
	}
	switch verdict {
	case baseSuperseded:
		b.l.m.dropped.WithLabelValues(b.name).Inc()
		return false, nil
	case baseNone, baseTombstone:
		what := "no earlier version is stored"
		if verdict == baseTombstone {
			what = "the newest earlier version is deleted (a TRUNCATE or re-snapshot removed the row)"
		}
		b.dead = append(b.dead, deadLetter{c.rec, "toast_without_base",
			fmt.Errorf("row %s/%d: unchanged TOAST columns %s but %s",
				ev.ID, ev.Shard, strings.Join(ev.Unchanged, ","), what)})
		return false, nil
	}
	row.Filled = make(map[string]any, len(ev.Unchanged))
	for _, col := range ev.Unchanged {
		row.Filled[col] = found.value(col)
	}
	return true, nil
}

// insert writes the rows converted so far, after their ownership and
// revenue marks: before a cut, which needs them in ClickHouse, and the
// batch's last rows, beside the other tables'.
func (b *tableBatch) insert(ctx context.Context) error {
	if len(b.rows) == 0 {
		return nil
	}
	l := b.l
	if len(b.owners) > 0 || l.marksPending(b.name) {
		err := l.retry(ctx, "ownership "+b.name, func() error { return l.writePlaced(ctx, b.name, b.owners) })
		if err != nil {
			return err
		}
		b.owners = b.owners[:0]
	}
	start := time.Now()
	err := l.retry(ctx, "insert "+b.name, func() error { return l.store.InsertBlock(ctx, b.block, b.rows) })
	if err != nil {
		return err
	}
	l.m.insertSeconds.WithLabelValues(b.name).Observe(time.Since(start).Seconds())
	l.m.rowsInserted.WithLabelValues(b.name).Add(float64(len(b.rows)))
	b.rows = b.rows[:0]
	return nil
}

// detector is the duplicate check of the ids this batch made appear or
// disappear (uniqueness is monitored). Only ids that converted are asked
// about: they parse as the id type. The ids are cloned: the check runs
// after the batch (tail.go), and they are slices of its decoded records.
func (b *tableBatch) detector(ctx context.Context) func() error {
	ids := make([]string, len(b.lifecycle.ids))
	for i, id := range b.lifecycle.ids {
		ids[i] = strings.Clone(id)
	}
	l, name, t, cfg, newest := b.l, b.name, b.t, b.cfg, b.newest
	return func() error {
		return l.retry(ctx, "anomalies "+name, func() error { return l.detect(ctx, t, cfg, ids, newest) })
	}
}

// idSet is a list of distinct ids in the order first added.
type idSet struct {
	ids  []string
	seen map[string]bool
}

func (s *idSet) add(id string) {
	if !s.seen[id] {
		s.seen[id] = true
		s.ids = append(s.ids, id)
	}
}
