// Package ring is Tributary's versioned ring map: consistent hashing with
// virtual nodes, mapping a shard key to the shard that owns it (docs/design/moves.md,
// "hash plus directory").
//
// Positions and key hashes are unsigned 64-bit integers: the first 8 bytes,
// big-endian, of the SHA-256 of the key's canonical bytes (Hash). SHA-256 is
// slower than xxhash or FNV, but it is in Python's standard library
// (hashlib), in PostgreSQL core (sha256(), 11+) and in every language, with
// no seed or variant to get wrong, so any router, script or SQL check
// computes the same owner. Ring lookups are not a hot path that would notice.
//
// Canonical key bytes: a string key is its UTF-8 bytes; an integer key is
// its decimal text (strconv.FormatInt, PostgreSQL's bigint::text), so 42 and
// "42" are the same key.
//
// A key belongs to the first point at or after its hash, walking clockwise
// and wrapping from the largest position to the smallest. A Map is
// immutable and safe for concurrent use; a new topology is a new Map with a
// higher Version.
package ring

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
)

// Errors returned by New, NewWithPoints, Parse and Load wrap ErrInvalid.
var ErrInvalid = errors.New("invalid ring map")

// Size limits, so that a bad map file cannot make a router allocate
// without bound.
const (
	MaxVNodes = 1 << 16 // virtual nodes per shard in a generated ring
	MaxPoints = 1 << 20 // points in a ring
)

// Hash is the ring position of key: SHA-256(key)[0:8] as a big-endian uint64.
// Python: int.from_bytes(hashlib.sha256(key).digest()[:8], "big").
func Hash(key []byte) uint64 {
	sum := sha256.Sum256(key)
	return binary.BigEndian.Uint64(sum[:8])
}

// Int64Key is the canonical bytes of an integer shard key: its decimal text.
func Int64Key(v int64) []byte { return strconv.AppendInt(nil, v, 10) }

// VNodePosition is the position of virtual node i of shard id in a generated
// ring: Hash of the text "shard-<id>-vnode-<i>".
func VNodePosition(id, i int) uint64 {
	return Hash([]byte("shard-" + strconv.Itoa(id) + "-vnode-" + strconv.Itoa(i)))
}

// Shard is one physical shard of the ring.
type Shard struct {
	ID   int    `json:"id"`
	Name string `json:"name,omitempty"`
}

// Point is one position on the ring owned by a shard.
type Point struct {
	Position uint64 `json:"position"`
	Shard    int    `json:"shard"`
}

// Map is a validated ring map.
//
// Invariants: points is non-empty, sorted by Position with no two equal
// positions, and every point's shard is in shards; every shard has a point.
type Map struct {
	version int64
	vnodes  int // > 0 for a generated ring, 0 for explicit points
	shards  []Shard
	points  []Point
	next    *Map // staged map of a planned arc move, or nil
}

// Next is the staged map of a planned arc move (see File), or nil.
func (m *Map) Next() *Map { return m.next }

// New generates a ring: every shard gets vnodes points at VNodePosition.
func New(version int64, shards []Shard, vnodes int) (*Map, error) {
	if vnodes < 1 || vnodes > MaxVNodes {
		return nil, fmt.Errorf("vnodes %d outside [1, %d]: %w", vnodes, MaxVNodes, ErrInvalid)
	}
	if len(shards)*vnodes > MaxPoints {
		return nil, fmt.Errorf("%d shards x %d vnodes exceed %d points: %w", len(shards), vnodes, MaxPoints, ErrInvalid)
	}
	points := make([]Point, 0, len(shards)*vnodes)
	for _, s := range shards {
		for i := range vnodes {
			points = append(points, Point{Position: VNodePosition(s.ID, i), Shard: s.ID})
		}
	}
	m, err := build(version, shards, points)
	if err != nil {
		return nil, err
	}
	m.vnodes = vnodes
	return m, nil
}

// NewWithPoints builds a ring from explicit points, as a ring map file may
// list them (for hand-placed or migrated rings).
func NewWithPoints(version int64, shards []Shard, points []Point) (*Map, error) {
	return build(version, shards, slices.Clone(points))
}

func build(version int64, shards []Shard, points []Point) (*Map, error) {
	if version < 1 {
		return nil, fmt.Errorf("version %d, want >= 1: %w", version, ErrInvalid)
	}
	if len(shards) == 0 {
		return nil, fmt.Errorf("no shards: %w", ErrInvalid)
	}
	if len(points) > MaxPoints {
		return nil, fmt.Errorf("%d points exceed %d: %w", len(points), MaxPoints, ErrInvalid)
	}
	known := make(map[int]int, len(shards)) // shard id -> number of points
	for _, s := range shards {
		if s.ID < 0 {
			return nil, fmt.Errorf("shard id %d is negative: %w", s.ID, ErrInvalid)
		}
		if _, dup := known[s.ID]; dup {
			return nil, fmt.Errorf("shard id %d listed twice: %w", s.ID, ErrInvalid)
		}
		known[s.ID] = 0
	}
	for _, p := range points {
		n, ok := known[p.Shard]
		if !ok {
			return nil, fmt.Errorf("point at %d names unknown shard %d: %w", p.Position, p.Shard, ErrInvalid)
		}
		known[p.Shard] = n + 1
	}
	for _, s := range shards {
		if known[s.ID] == 0 {
			return nil, fmt.Errorf("shard %d has no points: %w", s.ID, ErrInvalid)
		}
	}
	slices.SortFunc(points, func(a, b Point) int {
		switch {
		case a.Position < b.Position:
			return -1
		case a.Position > b.Position:
			return 1
		}
		return 0
	})
	for i := 1; i < len(points); i++ {
		if points[i].Position == points[i-1].Position {
			return nil, fmt.Errorf("shards %d and %d both at position %d: %w",
				points[i-1].Shard, points[i].Shard, points[i].Position, ErrInvalid)
		}
	}
	return &Map{version: version, shards: slices.Clone(shards), points: points}, nil
}

// Version is the ring map's version; routers compare versions to tell
// whether they are behind.
func (m *Map) Version() int64 { return m.version }

// VNodes is the virtual nodes per shard of a generated ring, 0 for a ring
// of explicit points.
func (m *Map) VNodes() int { return m.vnodes }

// Shards returns a copy of the shards.
func (m *Map) Shards() []Shard { return slices.Clone(m.shards) }

// Points returns a copy of the points, sorted by position.
func (m *Map) Points() []Point { return slices.Clone(m.points) }

// OwnerOfHash returns the shard owning ring position h: the shard of the
// first point at or after h, wrapping around to the first point.
func (m *Map) OwnerOfHash(h uint64) int {
	i := sort.Search(len(m.points), func(i int) bool { return m.points[i].Position >= h })
	if i == len(m.points) {
		i = 0
	}
	return m.points[i].Shard
}

// Owner returns the shard owning a key given as canonical bytes.
func (m *Map) Owner(key []byte) int { return m.OwnerOfHash(Hash(key)) }

// OwnerString returns the shard owning a string key.
func (m *Map) OwnerString(key string) int { return m.Owner([]byte(key)) }

// OwnerInt64 returns the shard owning an integer key.
func (m *Map) OwnerInt64(key int64) int { return m.Owner(Int64Key(key)) }
