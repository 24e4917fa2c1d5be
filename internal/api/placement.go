package api

// Ring-map ownership in a by-id answer: a document live on two shards
// because a planned arc move copied it to its next owner, or left behind on
// its old owner after cutover, or written by a stale router, is one
// document: GET /v1/documents/{id} shows the copy on the owner of its shard
// key under the ring map in force and names the others, with why they
// exist. Copies no ownership explains (two owned copies: a real duplicate)
// stay visible.

import (
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/tributary/tributary/internal/query"
	"github.com/tributary/tributary/internal/tables"
)

// placementStatus is the `placement` block of a by-id answer whose copies
// the ring map narrowed.
type placementStatus struct {
	RingVersion int64        `json:"ring_version"`
	Hidden      []hiddenCopy `json:"hidden_copies"`
}

// hiddenCopy is a live copy not shown, on a shard that does not own it.
type hiddenCopy struct {
	Shard int `json:"shard"`
	Owner int `json:"owner"`
	// Reason: "moving" (the staged ring map's copy of a planned arc move)
	// or "misplaced" (a leftover after cutover, or a stale router's write).
	Reason string `json:"reason"`
}

// OwnerRule keeps the copies on the owner of their shard-key value; it
// applies when some but not all copies are owned.
func OwnerRule(shardKey string, owners map[string]query.KeyOwner) query.CopyRule {
	return func(copies []query.Copy) ([]query.Copy, bool) {
		var owned []query.Copy
		for _, c := range copies {
			o, ok := owners[keyText(c.Row[shardKey])]
			if !ok || o.Owner == c.Shard {
				owned = append(owned, c)
			}
		}
		if len(owned) == 0 || len(owned) == len(copies) {
			return nil, false
		}
		return owned, true
	}
}

// ownedCopies narrows copies of a placed table by ownership.
func (s *Server) ownedCopies(ctx context.Context, t *tables.Table, copies []query.Copy) ([]query.Copy, *placementStatus, error) {
	if t.ShardKey == "" || len(copies) < 2 {
		return copies, nil, nil
	}
	var keys []string
	for _, c := range copies {
		if k := keyText(c.Row[t.ShardKey]); k != "" && !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	owners, err := s.q.Owners(ctx, t.Name, keys)
	if err != nil {
		return nil, nil, err
	}
	current, rule := query.PickCurrent(copies, OwnerRule(t.ShardKey, owners))
	if rule < 0 {
		return copies, nil, nil
	}
	st := &placementStatus{Hidden: []hiddenCopy{}}
	for _, c := range copies {
		if containsShard(current, c.Shard) {
			continue
		}
		o := owners[keyText(c.Row[t.ShardKey])]
		reason := "misplaced"
		if o.Staged == c.Shard {
			reason = "moving"
		}
		st.RingVersion = max(st.RingVersion, o.RingVersion)
		st.Hidden = append(st.Hidden, hiddenCopy{Shard: c.Shard, Owner: o.Owner, Reason: reason})
	}
	return current, st, nil
}

// keyText is a shard-key value as the loaders store it: PostgreSQL's text
// form (decimal integers, canonical UUIDs).
func keyText(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case uuid.UUID:
		return x.String()
	}
	return fmt.Sprint(v)
}
