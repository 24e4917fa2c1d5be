package loader

import (
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
		if c.ev.Op == envelope.OpTruncate || c.ev.Op == envelope.OpSnapshotEnd {
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
		if ev.Op == envelope.OpTruncate || ev.Op == envelope.OpSnapshotEnd {
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
	baseMissing                       // no candidate, or the newest is a tombstone: the source sent no earlier version
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
// for "no base" because the newer version is a tombstone. Only a row
// without any earlier version, or whose predecessor is a tombstone (a
// TRUNCATE or re-snapshot removed it), has no base: a real gap in the
// source's stream, for the dead-letter topic.
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
	if !found || best.deleted {
		return base{}, baseMissing
	}
	return best, baseFound
}
