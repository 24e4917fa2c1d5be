package loader

import (
	"context"
	"log/slog"
	"slices"
	"strings"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/dedupe"
	"github.com/tributary/tributary/internal/envelope"
)

// DefaultImageCacheBytes is the image cache's budget when Config leaves it
// at 0: a few tens of thousands of rows with multi-kilobyte bodies.
const DefaultImageCacheBytes = 128 << 20

// Where the base of an unchanged-TOAST update came from, for
// tributary_loader_toast_bases_total{source}.
const (
	baseBatch      = "batch"      // an earlier change of the row in the same batch
	baseCache      = "cache"      // the image cache
	baseClickHouse = "clickhouse" // read back from ClickHouse (Store.Current)
)

// baseLookups returns the rows of a table's batch whose unchanged-TOAST
// bases must be read from ClickHouse, and the columns to read, and the
// cached images the others rely on; it counts where the bases come from and
// learns which columns of the table arrive unchanged (the only ones images
// keep). The images are returned, not looked up again later: writing the
// batch puts images in the cache, which may evict the ones counted on.
//
// With the image cache on, a row needs no read when, at the start of the
// batch, either its first change in the batch is a full image that is not
// stale (what follows it in the batch is based on it), or the cache holds
// an image covering the columns left out. Both rest on the order the loader
// sees a row's changes in: one partition, in offset order, owned
// continuously (the cache is emptied on every rebalance), where a
// redelivered older version is followed again by every version after it
// (the reader replays the slot in commit order) — so the newest version
// seen before an update is its base, or a version newer than the update
// that hides the update's row anyway. A batch that holds a TRUNCATE or
// snapshot end of the table (tombstones written behind the cache's back)
// reads every row, as does the loader with the cache off.
func (l *Loader) baseLookups(table string, cs []change) ([]chstore.RowKey, []string, map[chstore.RowKey]dedupe.Image) {
	caching := l.imageBudget > 0
	for _, c := range cs {
		if isCut(c.ev) {
			caching = false
			break
		}
	}
	var lookup []chstore.RowKey
	var cols []string                   // the columns read: those left unchanged by rows read
	state := map[chstore.RowKey]uint8{} // per row: 0 unseen, fullFirst, read, cached
	const (
		unseen = iota
		fullFirst
		read
		cached
	)
	var fromBatch, fromCache int
	var pinned map[chstore.RowKey]dedupe.Image
	for _, c := range cs {
		ev := c.ev
		if isCut(ev) {
			continue
		}
		k := chstore.RowKey{ID: ev.ID, Shard: uint16(ev.Shard)}
		dk := dedupe.Key{Table: table, ID: ev.ID, Shard: ev.Shard}
		if caching && state[k] == unseen && len(ev.Unchanged) == 0 && ev.Op != envelope.OpDelete && !l.staleNow(dk, ev.RowVersion()) {
			state[k] = fullFirst
		}
		if len(ev.Unchanged) == 0 {
			continue
		}
		if l.imageBudget > 0 {
			l.learnToast(table, ev.Unchanged)
		}
		switch state[k] {
		case fullFirst:
			fromBatch++
			continue
		case cached:
			if pinned[k].Covers(ev.Unchanged) {
				fromCache++
				continue
			}
		case unseen:
			if im, ok := l.images.Get(dk); caching && ok && im.Covers(ev.Unchanged) {
				if pinned == nil {
					pinned = map[chstore.RowKey]dedupe.Image{}
				}
				state[k], pinned[k] = cached, im
				fromCache++
				continue
			}
		}
		if state[k] != read {
			state[k] = read
			lookup = append(lookup, k)
		}
		for _, col := range ev.Unchanged {
			if !slices.Contains(cols, col) {
				cols = append(cols, col)
			}
		}
	}
	l.m.toastBases.WithLabelValues(baseBatch).Add(float64(fromBatch))
	l.m.toastBases.WithLabelValues(baseCache).Add(float64(fromCache))
	l.m.toastBases.WithLabelValues(baseClickHouse).Add(float64(len(lookup)))
	return lookup, cols, pinned
}

// staleNow reports whether version of k is known to be written already
// (or superseded), by the version map or the image cache.
func (l *Loader) staleNow(k dedupe.Key, version uint64) bool {
	if l.versions.Stale(k, version) {
		return true
	}
	im, ok := l.images.Get(k)
	return ok && version <= im.Version
}

// learnToast adds cols to the columns of table that images keep.
func (l *Loader) learnToast(table string, cols []string) {
	known := l.toastCols[table]
	for _, c := range cols {
		if !slices.Contains(known, c) {
			// A new slice: the batch in progress holds the old one.
			known = append(slices.Clip(known), c)
		}
	}
	l.toastCols[table] = known
}

// imageOf is row i of block as an image of cols: the values a later
// unchanged-TOAST update of the row keeps. Strings are cloned: a block's
// strings are slices of whole decoded records.
func imageOf(b *chstore.Block, i int, version uint64, cols []string) dedupe.Image {
	if b.Deleted(i) {
		return dedupe.Image{Version: version, Deleted: true}
	}
	vals := make(map[string]any, len(cols))
	for _, c := range cols {
		v := b.Value(i, c)
		if s, ok := v.(string); ok {
			v = strings.Clone(s)
		}
		vals[c] = v
	}
	return dedupe.Image{Version: version, Values: vals}
}

// cacheMetrics publishes the image cache's size and evictions (once per
// batch: the cache is the batch goroutine's).
func (l *Loader) cacheMetrics() {
	l.m.imageBytes.Set(float64(l.images.Bytes()))
	l.m.imageEntries.Set(float64(l.images.Len()))
	if n := l.images.Evicted(); n > l.evictedSeen {
		l.m.imageEvictions.Add(float64(n - l.evictedSeen))
		l.evictedSeen = n
	}
}

// base is one candidate for the base of an unchanged-TOAST update: a known
// version of the row (this batch's image, the stored row, the cached
// image), with its values.
type base struct {
	version uint64
	deleted bool
	value   func(col string) any // nil when deleted
}

// baseVerdict is what an unchanged-TOAST update's candidates make of it.
type baseVerdict int

const (
	baseFound      baseVerdict = iota // the newest candidate is older than the update and live
	baseSuperseded                    // a candidate is as new as the update or newer: the update changes nothing
	baseTombstone                     // the newest candidate is a tombstone: a TRUNCATE or re-snapshot removed the row
	baseNone                          // no version of the row is known at all (see Loader.baseless)
)

// pickBase chooses the base of an unchanged-TOAST update at version ver
// among the known versions of its row (ties go to the earlier candidate:
// pass the batch's image first).
//
// The invariant that makes a missing base impossible after a crash, a
// replay or a rebalance: the base is the newest known version, and it is
// used only if it is older than the update. Every change of a row reaches
// its partition in commit order, so everything before the update was
// either written (ClickHouse, the cache) or is earlier in the batch: the
// newest known version below the update is its predecessor at the source.
// A known version at or above the update means the update was already
// superseded — a replay after the loader died between writing a newer
// version (typically a move's delete at the source) and committing its
// offset — and ReplacingMergeTree would hide it anyway: it is dropped like
// any stale version, never filled from a newer version, and never taken
// for "no base" because the newer version is a tombstone. A predecessor
// that is a tombstone is a real gap (an update of a truncated row), for
// the dead-letter topic; a row without any known version is decided by
// Loader.baseless.
func pickBase(ver uint64, candidates []base) (base, baseVerdict) {
	var best base
	found := false
	for _, c := range candidates {
		if c.version >= ver {
			return base{}, baseSuperseded
		}
		if !found || c.version > best.version {
			best, found = c, true
		}
	}
	switch {
	case !found:
		return base{}, baseNone
	case best.deleted:
		return base{}, baseTombstone
	}
	return best, baseFound
}

// baseless decides an unchanged-TOAST update c of a row of which no
// version is known at all: superseded (dropped) when it may have been
// streamed before its shard's initial copy ended, baseNone (the
// dead-letter topic) when a watermark proves the copy had ended.
//
// Why that is exact. A row that existed before the slot's consistent
// point C reaches Kafka only through the copy (version 0 of its epoch,
// before every streamed record of the shard in the partition); the copy
// is not consistent (internal/reader/snapshot.go), so a chunk that reads
// the row after it was deleted misses it. An update of such a row
// streamed after C has no earlier version anywhere — and the row's delete
// (or TRUNCATE, or key change) committed before that chunk read, so it is
// streamed after the update and supersedes it: dropping the update is
// what ClickHouse would show once the delete is in. A row that still
// existed when the copy ended was copied, so an update committed after
// the copy's end E with no known version is a real gap (a table added to
// the publication without a copy). The reader publishes no watermark of a
// shard below E, so a watermark of the update's shard in its partition
// with a position below the update's commit proves the update came after
// E: one earlier in this batch, or the newest stored one. The one case
// decided as superseded though it is a gap: an update committed between
// E and the shard's first watermark in that partition (a fraction of a
// second; every later update of such a table still reaches the
// dead-letter topic). A watermark from before a re-snapshot proves less
// than that (it is below the new copy's end): such an update goes to the
// dead-letter topic, the cautious side.
func (l *Loader) baseless(ctx context.Context, t *chstore.Table, c change) (baseVerdict, error) {
	commit := uint64(c.ev.CommitLSN)
	if c.watermark > 0 && c.watermark < commit {
		return baseNone, nil
	}
	var stored uint64
	err := l.retry(ctx, "watermark of "+t.Name, func() error {
		var err error
		stored, err = l.store.WatermarkLSN(ctx, c.rec.Topic, c.rec.Partition, uint16(c.ev.Shard))
		return err
	})
	if err != nil {
		return 0, err
	}
	if stored > 0 && stored < commit {
		return baseNone, nil
	}
	l.log.Debug("unchanged-TOAST update of a row the copy did not contain: superseded by its delete",
		slog.String("table", t.Name), slog.String("id", c.ev.ID), slog.Int("shard", c.ev.Shard),
		slog.Int("partition", int(c.rec.Partition)), slog.Int64("offset", c.rec.Offset))
	return baseSuperseded, nil
}
