package query

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/envelope"
)

// FreshnessAt builds the freshness of one shard whose watermark is at lsn
// (committed at ts). Freshness computes it from the watermarks table; this
// is for callers that need one by hand (fakes in tests).
func FreshnessAt(shard int, lsn envelope.LSN, ts time.Time, complete bool) ShardFreshness {
	return ShardFreshness{Shard: shard, CommitLSN: lsn.String(), CommitTS: ts.UTC(), Complete: complete,
		Staleness: max(0, time.Since(ts).Seconds()), lsn: lsn}
}

// At is f with its staleness as of now (a reading served later than it
// was taken).
func (f ShardFreshness) At(now time.Time) ShardFreshness {
	f.Staleness = max(0, now.Sub(f.CommitTS).Seconds())
	return f
}

// StoppedTable is a table a loader has stopped (chstore.StoppedTable):
// its data stays as of its watermarks until the loader can follow it.
type StoppedTable struct {
	Table  string    `json:"table"`
	Topic  string    `json:"topic"`
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
	// Loaders are the loaders that hold it stopped.
	Loaders []string `json:"loaders"`
}

// StoppedTables lists the tables some loader holds stopped now: records
// stopped and renewed within chstore.StopLease of now (a record not
// renewed is a loader that was killed). With several loaders, the reason
// is the newest record's and Since the earliest. None before any loader
// made the records table.
func (q *Queries) StoppedTables(ctx context.Context, now time.Time) ([]StoppedTable, error) {
	sql := fmt.Sprintf(`SELECT table, loader, argMax(topic, updated_at), argMax(stopped, updated_at),
		argMax(reason, updated_at), argMax(since, updated_at), max(updated_at)
		FROM %s.%s GROUP BY table, loader ORDER BY table, loader`, quote(q.db), chstore.StoppedTablesTable)
	rows, err := q.conn.Query(ctx, sql)
	if err != nil {
		if chstore.IsUnknownTable(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read stopped tables: %w", err)
	}
	defer rows.Close()
	var out []StoppedTable
	newest := map[string]time.Time{}
	for rows.Next() {
		var table, loader, topic, reason string
		var stopped uint8
		var since, updated time.Time
		if err := rows.Scan(&table, &loader, &topic, &stopped, &reason, &since, &updated); err != nil {
			return nil, fmt.Errorf("scan stopped tables: %w", err)
		}
		if stopped == 0 || now.Sub(updated) > chstore.StopLease {
			continue
		}
		i := slices.IndexFunc(out, func(s StoppedTable) bool { return s.Table == table })
		if i < 0 {
			out = append(out, StoppedTable{Table: table, Topic: topic, Reason: reason, Since: since.UTC()})
			i = len(out) - 1
		} else if since.Before(out[i].Since) {
			out[i].Since = since.UTC()
		}
		if updated.After(newest[table]) {
			newest[table], out[i].Reason = updated, reason
		}
		out[i].Loaders = append(out[i].Loaders, loader)
	}
	return out, rows.Err()
}
