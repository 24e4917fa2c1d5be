package query

// Misplaced rows: live rows on a shard that does not own their shard-key
// value under the newest ring version stored (the stale-router failure of docs/design/moves.md),
// read with the loader's own rule (chstore.MisplacedWhere). A planned arc
// move's copies (on the staged owner) are not listed.

import (
	"context"
	"fmt"
	"time"

	"github.com/tributary/tributary/internal/chstore"
)

// PlacedTable is a replicated table placed by the ring map.
type PlacedTable struct {
	Name, IDColumn, ShardKey string
	// IDColumns is the whole key when it has several columns (nil: the
	// key is IDColumn).
	IDColumns []string
}

// Key is the columns that identify the table's rows.
func (t PlacedTable) Key() []string {
	if len(t.IDColumns) > 0 {
		return t.IDColumns
	}
	return []string{t.IDColumn}
}

// MisplacedRequest is a validated listing request.
type MisplacedRequest struct {
	// Tables are listed in this order (at least one).
	Tables []PlacedTable
	// After, when set, resumes after this row (its table must be one of
	// Tables).
	After *MisplacedKey
	Limit int
}

// MisplacedKey is a row's position in the listing: tables in request
// order, then id text, then shard.
type MisplacedKey struct {
	Table string
	ID    string
	Shard uint16
}

// MisplacedRow is one misplaced row.
type MisplacedRow struct {
	Table string `json:"table"`
	ID    string `json:"id"`
	// Shard holds the row; Owner owns its key under RingVersion.
	Shard       uint16    `json:"shard"`
	Owner       uint16    `json:"owner"`
	ShardKey    string    `json:"shard_key"`
	Key         string    `json:"key"`
	RingVersion int64     `json:"ring_version"`
	CommitTime  time.Time `json:"commit_time"`
}

// MisplacedPage is one page of misplaced rows.
type MisplacedPage struct {
	Rows []MisplacedRow
	More bool
}

// Position is r's position in the listing order.
func (r MisplacedRow) Position() MisplacedKey {
	return MisplacedKey{Table: r.Table, ID: r.ID, Shard: r.Shard}
}

// Misplaced lists misplaced rows, a page at a time. Tables the loader has
// not created yet list nothing.
func (q *Queries) Misplaced(ctx context.Context, req MisplacedRequest) (*MisplacedPage, error) {
	page := &MisplacedPage{Rows: []MisplacedRow{}}
	limit := min(max(req.Limit, 1), MaxAnomalyLimit)
	started := req.After == nil
	for _, t := range req.Tables {
		var after *chstore.MisplacedKey
		if !started {
			if t.Name != req.After.Table {
				continue
			}
			started = true
			after = &chstore.MisplacedKey{ID: req.After.ID, Shard: req.After.Shard}
		}
		want := limit + 1 - len(page.Rows)
		rows, err := chstore.ListMisplaced(ctx, q.conn, q.db, t.Name, t.Key(), t.ShardKey, after, want)
		if err != nil {
			if chstore.IsUnknownTable(err) {
				continue
			}
			return nil, fmt.Errorf("misplaced rows: %w", err)
		}
		version, err := chstore.RingVersion(ctx, q.conn, q.db, t.Name)
		if err != nil {
			return nil, err
		}
		for _, m := range rows {
			page.Rows = append(page.Rows, MisplacedRow{Table: t.Name, ID: m.ID, Shard: m.Shard, Owner: m.Owner,
				ShardKey: t.ShardKey, Key: m.Key, RingVersion: version, CommitTime: m.CommitTS.UTC()})
		}
		if len(page.Rows) > limit {
			page.Rows, page.More = page.Rows[:limit], true
			break
		}
	}
	return page, nil
}
