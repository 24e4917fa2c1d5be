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
type File struct {
	Version int64   `json:"version"`
	VNodes  int     `json:"vnodes,omitempty"`
	Shards  []Shard `json:"shards"`
	Points  []Point `json:"points,omitempty"`
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

// Map validates f and builds the ring.
func (f File) Map() (*Map, error) {
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
	return f
}

// MarshalJSON writes m in the file format Parse reads.
func (m *Map) MarshalJSON() ([]byte, error) { return json.Marshal(m.File()) }
