package api

// What a row's id says about it, per the table's configured id layout
// (internal/ids, schema/ids.md).

import (
	"errors"
	"strconv"

	"github.com/tributary/tributary/internal/ids"
)

// idInfo is the decoded id of a by-id answer.
type idInfo struct {
	Layout string `json:"layout"`
	Kind   string `json:"kind,omitempty"`
	// Global is false for per-shard serials: the id alone does not
	// identify a row, (shard, id) does.
	Global bool `json:"global"`
	// CreatedAt is the creation time the id carries (Snowflake, UUIDv7),
	// millisecond precision.
	CreatedAt string `json:"created_at,omitempty"`
	// Shard is the id's node field (the shard or worker that generated a
	// Snowflake id) or the hash partition of a hash-sharded id. It is where
	// the id was made, which need not be where the row lives now.
	Shard *int `json:"shard,omitempty"`
	// Datacenter and Worker split Shard for layouts that define it.
	Datacenter *int   `json:"datacenter,omitempty"`
	Worker     *int   `json:"worker,omitempty"`
	Sequence   *int64 `json:"sequence,omitempty"`
	Note       string `json:"note,omitempty"`
	// Error says why the id does not decode with the layout (the lookup
	// is answered all the same).
	Error string `json:"error,omitempty"`
}

// decodeID decodes the canonical text of an id (as parseID returns it)
// with layout; layoutErr is why the configured layout name did not resolve.
func decodeID(layoutName string, layout ids.Layout, layoutErr error, canonical string) *idInfo {
	info := &idInfo{Layout: layoutName}
	if layoutErr != nil {
		info.Error = "the configured id layout is not known: " + layoutErr.Error()
		return info
	}
	d, err := layout.Decode(canonical)
	if err != nil {
		var de *ids.DecodeError
		if errors.As(err, &de) {
			info.Error = de.Err.Error()
		} else {
			info.Error = err.Error()
		}
		info.Note = "the id does not fit the table's configured layout"
		return info
	}
	info.Kind, info.Global = string(d.Kind), d.Global
	if !d.Time.IsZero() {
		info.CreatedAt = d.Time.UTC().Format("2006-01-02T15:04:05.000Z07:00")
	}
	if d.HasShard {
		info.Shard = &d.Shard
	}
	if sf, ok := layout.(ids.Snowflake); ok {
		seq := d.Sequence
		info.Sequence = &seq
		if sf.Config().DatacenterBits > 0 {
			info.Datacenter, info.Worker = &d.Datacenter, &d.Worker
		}
	}
	switch d.Kind {
	case ids.KindSerial:
		info.Note = "a per-shard sequence value, not global: the same id may name different rows on different shards; a row is (shard, id)"
	case ids.KindSnowflake:
		info.Note = "shard is the id's node field: the shard or worker that generated it, not necessarily where the row lives now"
	case ids.KindHashBigint, ids.KindHashUUID:
		info.Note = "shard is the id's hash partition: the shard a hash-sharded router places it on"
	}
	return info
}

// canonicalID is the text PostgreSQL would print for a parsed id.
func canonicalID(id any) string {
	switch v := id.(type) {
	case int64:
		return strconv.FormatInt(v, 10)
	case string:
		return v
	}
	return ""
}
