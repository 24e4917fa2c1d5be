package query

// Duplicates: ids live on more than one shard, as the loader records them
// in the _anomalies table (internal/chstore/anomalies.go): one row per
// (source table, id), ReplacingMergeTree(ver), read with FINAL so that only
// each id's newest state counts.
//
// Order and pagination: newest episode first, by (first_seen, table, id)
// descending — the table's key (source_table, id) makes it total. As for
// Search, pages are consistent one by one: an anomaly whose first_seen
// changes between two pages (resolved, then back) may move across the
// cursor.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/tributary/tributary/internal/chstore"
)

// AnomalyState selects anomalies by their state.
type AnomalyState string

// The states.
const (
	// StateOpen: not resolved (the id is still live on several shards).
	StateOpen AnomalyState = "open"
	// StateAlerting: open and past the loader's grace period (alerted).
	StateAlerting AnomalyState = "alerting"
	// StateAll: every recorded anomaly, resolved ones included.
	StateAll AnomalyState = "all"
)

// AnomalyStates lists the states in the order the API documents them.
var AnomalyStates = []AnomalyState{StateOpen, StateAlerting, StateAll}

// MaxAnomalyLimit is the largest page DuplicatesRequest.Limit may ask for.
const MaxAnomalyLimit = 500

// AnomalyKey is an anomaly's position in the listing order.
type AnomalyKey struct {
	FirstSeen time.Time
	Table     string
	ID        string
}

// DuplicatesRequest is a validated listing request.
type DuplicatesRequest struct {
	// Tables restricts the listing to these source tables (at least one).
	Tables []string
	State  AnomalyState
	// After, when set, keeps anomalies strictly after it in the order.
	After *AnomalyKey
	// Limit is the page size, 1..MaxAnomalyLimit.
	Limit int
}

// Anomaly is one id's recorded state.
type Anomaly struct {
	Table string `json:"table"`
	ID    string `json:"id"`
	// Kind is "duplicate" (a global id live on several shards) or
	// "serial_collision" (a per-shard serial id used on several shards,
	// expected for legacy tables), or "arc_move" (a row of a planned arc
	// move, on its owner and its staged owner; never alerted).
	Kind   string   `json:"kind"`
	Shards []uint16 `json:"shards"`
	// FirstSeen is the source commit time at which the id became live on
	// several shards; LastSeen the newest commit time that kept it so.
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	Alerted   bool      `json:"alerted"`
	Resolved  bool      `json:"resolved"`
}

// DuplicatesPage is one page of anomalies.
type DuplicatesPage struct {
	Anomalies []Anomaly
	More      bool
}

// anomaliesTable is where the loader records anomalies.
const anomaliesTable = "_anomalies"

// planDuplicates builds the listing query.
func planDuplicates(db string, req DuplicatesRequest) (string, []any) {
	vals := make([]any, len(req.Tables))
	for i, t := range req.Tables {
		vals[i] = t
	}
	where := []string{"source_table IN ?"}
	args := []any{clickhouse.GroupSet{Value: vals}}
	switch req.State {
	case StateOpen:
		where = append(where, "resolved = 0")
	case StateAlerting:
		where = append(where, "resolved = 0", "alerted = 1")
	}
	if a := req.After; a != nil {
		where = append(where, "(first_seen < ? OR (first_seen = ? AND (source_table < ? OR (source_table = ? AND id < ?))))")
		args = append(args, a.FirstSeen.UTC(), a.FirstSeen.UTC(), a.Table, a.Table, a.ID)
	}
	limit := min(max(req.Limit, 1), MaxAnomalyLimit)
	sql := fmt.Sprintf(`SELECT source_table, id, kind, shards, first_seen, last_seen, resolved, alerted
		FROM %s.%s FINAL WHERE %s ORDER BY first_seen DESC, source_table DESC, id DESC LIMIT %d`,
		quote(db), anomaliesTable, strings.Join(where, " AND "), limit+1)
	return sql, args
}

// Duplicates lists recorded anomalies. Before the loader has created the
// anomalies table, the list is empty.
func (q *Queries) Duplicates(ctx context.Context, req DuplicatesRequest) (*DuplicatesPage, error) {
	page := &DuplicatesPage{Anomalies: []Anomaly{}}
	if len(req.Tables) == 0 {
		return page, nil
	}
	sql, args := planDuplicates(q.db, req)
	ctx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"optimize_move_to_prewhere": 0}))
	rows, err := q.conn.Query(ctx, sql, args...)
	if err != nil {
		if chstore.IsUnknownTable(err) {
			return page, nil
		}
		return nil, fmt.Errorf("read anomalies: %w", err)
	}
	defer rows.Close()
	limit := min(max(req.Limit, 1), MaxAnomalyLimit)
	for rows.Next() {
		if len(page.Anomalies) == limit {
			page.More = true
			break
		}
		var a Anomaly
		var resolved, alerted uint8
		if err := rows.Scan(&a.Table, &a.ID, &a.Kind, &a.Shards, &a.FirstSeen, &a.LastSeen, &resolved, &alerted); err != nil {
			return nil, fmt.Errorf("read anomalies: %w", err)
		}
		a.Resolved, a.Alerted = resolved == 1, alerted == 1
		a.FirstSeen, a.LastSeen = a.FirstSeen.UTC(), a.LastSeen.UTC()
		if a.Shards == nil {
			a.Shards = []uint16{}
		}
		slices.Sort(a.Shards)
		page.Anomalies = append(page.Anomalies, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read anomalies: %w", err)
	}
	return page, nil
}

// Key is a's position in the listing order.
func (a Anomaly) Key() AnomalyKey {
	return AnomalyKey{FirstSeen: a.FirstSeen, Table: a.Table, ID: a.ID}
}
