package ring

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// File is the JSON form of a ring map:
//
//	{"version": 3, "vnodes": 64, "shards": [{"id": 0, "name": "pg-0"}, ...]}
//
// generates the points (New); alternatively "points" lists them explicitly
// and "vnodes" is omitted:
//
//	{"version": 1, "shards": [{"id": 0}, {"id": 1}],
//	 "points": [{"position": 20, "shard": 0}, {"position": 50, "shard": 1}]}
//
// Positions are unsigned 64-bit integers written as JSON numbers; readers in
// languages whose JSON numbers are doubles must parse them exactly.
//
// "next", optional, is a staged map: the layout a planned arc move is
// copying rows towards (the arc-move rollout of docs/design/moves.md, step 2). It routes nothing; it
// tells Tributary that a row on the staged owner of its key is a move's
// copy, not a misplaced row. Its version must be above the map's. Cutover
// publishes it as the map itself (versions only go forward: to abandon a
// staged move, publish the current layout under a new version).
type File struct {
	Version int64   `json:"version"`
	VNodes  int     `json:"vnodes,omitempty"`
	Shards  []Shard `json:"shards"`
	Points  []Point `json:"points,omitempty"`
	Next    *File   `json:"next,omitempty"`
}

// Parse decodes and validates a ring map file. Unknown fields and trailing
// data are refused, since a misspelt field would silently change routing.
func Parse(data []byte) (*Map, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f File
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("parse ring map: %w: %w", ErrInvalid, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("parse ring map: data after the object: %w", ErrInvalid)
	}
	return f.Map()
}

// Map validates f and builds the ring, with its staged next map if any.
func (f File) Map() (*Map, error) {
	m, err := f.ring()
	if err != nil || f.Next == nil {
		return m, err
	}
	switch {
	case f.Next.Next != nil:
		return nil, fmt.Errorf("ring map: a staged map cannot have its own next: %w", ErrInvalid)
	case f.Next.Version <= f.Version:
		return nil, fmt.Errorf("ring map: staged version %d is not above version %d: %w", f.Next.Version, f.Version, ErrInvalid)
	}
	next, err := f.Next.ring()
	if err != nil {
		return nil, fmt.Errorf("staged map: %w", err)
	}
	m.next = next
	return m, nil
}

// ring builds f's own ring (not its next).
func (f File) ring() (*Map, error) {
	switch {
	case len(f.Points) > 0 && f.VNodes != 0:
		return nil, fmt.Errorf("ring map: both vnodes and points given: %w", ErrInvalid)
	case len(f.Points) > 0:
		return NewWithPoints(f.Version, f.Shards, f.Points)
	case f.VNodes == 0:
		return nil, fmt.Errorf("ring map: neither vnodes nor points given: %w", ErrInvalid)
	}
	return New(f.Version, f.Shards, f.VNodes)
}

// Load reads and validates the ring map file at path.
func Load(path string) (*Map, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load ring map: %w", err)
	}
	m, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// File returns the file form of m: generated rings by vnodes, explicit
// rings with their points.
func (m *Map) File() File {
	f := File{Version: m.version, Shards: m.Shards()}
	if m.vnodes > 0 {
		f.VNodes = m.vnodes
	} else {
		f.Points = m.Points()
	}
	if m.next != nil {
		n := m.next.File()
		f.Next = &n
	}
	return f
}

// MarshalJSON writes m in the file format Parse reads.
func (m *Map) MarshalJSON() ([]byte, error) { return json.Marshal(m.File()) }
