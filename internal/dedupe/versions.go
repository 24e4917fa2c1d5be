// Package dedupe holds the loader's in-memory state about rows it wrote,
// no I/O: Versions, which changes are redeliveries or stale versions that
// need not be written again, and Images (images.go), the newest version's
// large columns, the base an update that leaves them out as unchanged
// TOAST is filled from without reading ClickHouse.
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
//
// Ids that are canonical decimal integers (every integer id layout) are
// held as numbers, in maps without pointers: no string per key to allocate,
// hash or have the garbage collector scan (a million such strings made the
// map a tenth of the loader's CPU and a large part of its GC work). Other
// ids (uuids) are held as strings. An id has one form only, so both maps
// together are exact.
type Versions struct {
	half     int
	cur, old generation
	tables   map[string]uint32 // table name -> number (from 1), for numeric keys
	// The last table looked up: a batch is mostly one table.
	lastTable string
	lastIndex uint32
}

// generation is one generation of remembered keys.
type generation struct {
	num numTable
	str map[Key]uint64
}

func (g *generation) len() int { return g.num.n + len(g.str) }

// numKey is a Key whose id is a canonical decimal integer.
type numKey struct {
	id    int64
	table uint32 // from 1: 0 is a free slot of a numTable
	shard int32
}

// numTable maps numKeys to versions: open addressing with linear probing,
// at most half full. A lookup is one cache miss where a Go map of a
// million keys took about three (directory, table, group) — and each
// change does one: the version map was half of the applier's own CPU.
type numTable struct {
	slots []numSlot
	n     int
}

type numSlot struct {
	numKey
	version uint64
}

func (k numKey) hash() uint64 {
	// murmur3's finalizer over the three fields.
	h := uint64(k.id) ^ uint64(k.table)<<32 ^ uint64(uint32(k.shard))*0x9e3779b97f4a7c15
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// slot returns k's slot, or nil.
func (t *numTable) slot(k numKey) *numSlot {
	if t.n == 0 {
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := k.hash() & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.numKey == k {
			return s
		}
		if s.table == 0 {
			return nil
		}
	}
}

func (t *numTable) get(k numKey) (uint64, bool) {
	if s := t.slot(k); s != nil {
		return s.version, true
	}
	return 0, false
}

// add stores k, which t does not hold.
func (t *numTable) add(k numKey, version uint64) {
	if 2*(t.n+1) > len(t.slots) {
		old := t.slots
		t.slots, t.n = make([]numSlot, max(1024, 2*len(old))), 0
		for _, s := range old {
			if s.table != 0 {
				t.add(s.numKey, s.version)
			}
		}
	}
	mask := uint64(len(t.slots) - 1)
	i := k.hash() & mask
	for t.slots[i].table != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = numSlot{k, version}
	t.n++
}

// NewVersions returns a table that remembers up to capacity keys (>= 2).
func NewVersions(capacity int) *Versions {
	half := max(1, capacity/2)
	return &Versions{half: half, cur: newGeneration(), old: newGeneration(), tables: map[string]uint32{}}
}

func newGeneration() generation {
	return generation{str: map[Key]uint64{}}
}

// numeric returns k's pointer-free form, if its id is a canonical decimal
// integer (no sign but a leading '-', no leading zeros, fits int64) and its
// shard fits an int32: then no other id text has the same number.
func (v *Versions) numeric(k Key) (numKey, bool) {
	id, ok := canonicalInt(k.ID)
	if !ok || int(int32(k.Shard)) != k.Shard {
		return numKey{}, false
	}
	if k.Table != v.lastTable || v.lastTable == "" {
		t, ok := v.tables[k.Table]
		if !ok {
			t = uint32(len(v.tables)) + 1 // 0 marks a free slot
			v.tables[strings.Clone(k.Table)] = t
		}
		v.lastTable, v.lastIndex = k.Table, t
	}
	return numKey{id: id, table: v.lastIndex, shard: int32(k.Shard)}, true
}

// canonicalInt parses s if it is an int64 exactly as strconv.FormatInt
// prints it.
func canonicalInt(s string) (int64, bool) {
	neg := len(s) > 0 && s[0] == '-'
	digits := s
	if neg {
		digits = s[1:]
	}
	if len(digits) == 0 || len(digits) > 19 || (digits[0] == '0' && (len(digits) > 1 || neg)) {
		return 0, false
	}
	var u uint64
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		u = u*10 + uint64(c-'0') // 19 digits cannot overflow a uint64
	}
	switch {
	case !neg && u <= 1<<63-1:
		return int64(u), true
	case neg && u <= 1<<63:
		return int64(-u), true // -(1<<63) wraps to itself, as wanted
	}
	return 0, false
}

func (v *Versions) get(k Key) (uint64, bool) {
	if nk, ok := v.numeric(k); ok {
		if x, ok := v.cur.num.get(nk); ok {
			return x, true
		}
		return v.old.num.get(nk)
	}
	if x, ok := v.cur.str[k]; ok {
		return x, true
	}
	x, ok := v.old.str[k]
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
	if nk, ok := v.numeric(k); ok {
		if s := v.cur.num.slot(nk); s != nil {
			s.version = max(s.version, version)
			return
		}
		if x, ok := v.old.num.get(nk); ok && x > version {
			version = x
		}
		v.rotate()
		v.cur.num.add(nk, version)
		return
	}
	if x, ok := v.cur.str[k]; ok {
		if version > x {
			v.cur.str[k] = version
		}
		return
	}
	if x, ok := v.old.str[k]; ok && x > version {
		version = x
	}
	v.rotate()
	// The id may be a slice of a whole decoded record (the envelope
	// decoder shares one string per record): keep only the id.
	k.ID = strings.Clone(k.ID)
	v.cur.str[k] = version
}

// rotate makes room for one new key in the current generation.
func (v *Versions) rotate() {
	if v.cur.len() >= v.half {
		v.old, v.cur = v.cur, newGeneration()
	}
}

// Forget drops everything remembered (e.g. after a rebalance, when another
// loader may have written newer versions of keys we remember).
func (v *Versions) Forget() {
	v.cur, v.old = newGeneration(), newGeneration()
}

// Len is the number of entries held (a key written in both generations
// counts twice); it never exceeds the capacity.
func (v *Versions) Len() int { return v.cur.len() + v.old.len() }
