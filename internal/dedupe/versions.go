// Package dedupe holds the loader's pure deduplication logic: which changes
// are redeliveries or stale versions that need not be written again.
//
// Dropping here is an optimisation, never the source of correctness:
// ClickHouse tables are ReplacingMergeTree by source version and every read
// is exact regardless of duplicates. So the memory used is bounded (a
// fixed-capacity table of recent keys) and forgetting a key only costs a
// redundant insert.
package dedupe

import (
	"container/list"
)

// Key identifies one source row: table, global id, shard.
type Key struct {
	Table string
	ID    string
	Shard int
}

// Versions remembers the highest version written per key, for up to
// Capacity keys (least recently used are forgotten). Not safe for concurrent
// use: the loader's batch goroutine owns it.
type Versions struct {
	capacity int
	order    *list.List // front = most recent; values are Key
	entries  map[Key]*entry
}

type entry struct {
	version uint64
	elem    *list.Element
}

// NewVersions returns a table that remembers up to capacity keys (>= 1).
func NewVersions(capacity int) *Versions {
	if capacity < 1 {
		capacity = 1
	}
	return &Versions{capacity: capacity, order: list.New(), entries: make(map[Key]*entry, capacity)}
}

// Stale reports whether version is not newer than what was already written
// for k: a redelivery (equal) or an out-of-date version (lower).
func (v *Versions) Stale(k Key, version uint64) bool {
	e, ok := v.entries[k]
	if !ok {
		return false
	}
	v.order.MoveToFront(e.elem)
	return version <= e.version
}

// Written records that version of k is in the store. It never lowers a
// remembered version.
func (v *Versions) Written(k Key, version uint64) {
	if e, ok := v.entries[k]; ok {
		if version > e.version {
			e.version = version
		}
		v.order.MoveToFront(e.elem)
		return
	}
	if v.order.Len() >= v.capacity {
		oldest := v.order.Back()
		v.order.Remove(oldest)
		delete(v.entries, oldest.Value.(Key))
	}
	v.entries[k] = &entry{version: version, elem: v.order.PushFront(k)}
}

// Forget drops everything remembered (e.g. after a rebalance, when another
// loader may have written newer versions of keys we remember).
func (v *Versions) Forget() {
	v.order.Init()
	clear(v.entries)
}

// Len is the number of keys remembered.
func (v *Versions) Len() int { return v.order.Len() }
