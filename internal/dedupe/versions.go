// Package dedupe holds the loader's pure deduplication logic: which changes
// are redeliveries or stale versions that need not be written again.
//
// Dropping here is an optimisation, never the source of correctness:
// ClickHouse tables are ReplacingMergeTree by source version and every read
// is exact regardless of duplicates. So the memory used is bounded (a
// fixed-capacity table of recent keys) and forgetting a key only costs a
// redundant insert.
package dedupe

import "strings"

// Key identifies one source row: table, global id, shard.
type Key struct {
	Table string
	ID    string
	Shard int
}

// Versions remembers the highest version written per key, for a bounded
// number of keys: two generations of at most Capacity/2 keys each. Writes
// go to the current generation; when it is full it becomes the old one and
// the previous old one is forgotten. So a key stays remembered for at least
// Capacity/2 writes of other keys after its own, and memory never exceeds
// Capacity keys — at the cost of two map lookups, with no per-key list
// bookkeeping (a linked-list LRU cost the loader a tenth of its CPU). Not
// safe for concurrent use: the loader's batch goroutine owns it.
type Versions struct {
	half     int
	cur, old map[Key]uint64
}

// NewVersions returns a table that remembers up to capacity keys (>= 2).
func NewVersions(capacity int) *Versions {
	half := max(1, capacity/2)
	return &Versions{half: half, cur: make(map[Key]uint64), old: map[Key]uint64{}}
}

func (v *Versions) get(k Key) (uint64, bool) {
	if x, ok := v.cur[k]; ok {
		return x, true
	}
	x, ok := v.old[k]
	return x, ok
}

// Stale reports whether version is not newer than what was already written
// for k: a redelivery (equal) or an out-of-date version (lower).
func (v *Versions) Stale(k Key, version uint64) bool {
	x, ok := v.get(k)
	return ok && version <= x
}

// Written records that version of k is in the store. It never lowers a
// remembered version.
func (v *Versions) Written(k Key, version uint64) {
	// As few lookups as possible: with a million keys each one is a cache
	// miss, and this runs for every change written.
	if x, ok := v.cur[k]; ok {
		if version > x {
			v.cur[k] = version
		}
		return
	}
	if x, ok := v.old[k]; ok && x > version {
		version = x
	}
	if len(v.cur) >= v.half {
		v.old, v.cur = v.cur, make(map[Key]uint64, v.half)
	}
	// The id may be a slice of a whole decoded record (the envelope
	// decoder shares one string per record): keep only the id.
	k.ID = strings.Clone(k.ID)
	v.cur[k] = version
}

// Forget drops everything remembered (e.g. after a rebalance, when another
// loader may have written newer versions of keys we remember).
func (v *Versions) Forget() {
	clear(v.cur)
	clear(v.old)
}

// Len is the number of entries held (a key written in both generations
// counts twice); it never exceeds the capacity.
func (v *Versions) Len() int { return len(v.cur) + len(v.old) }
