package query

import (
	"context"
	"fmt"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// KeyOwner is where a shard-key value belongs under the ring map in force
// (as the loaders placed it), and under a staged map that moves it.
type KeyOwner struct {
	Owner       int
	RingVersion int64
	// Staged is the owner under a staged ring map (a planned arc move),
	// or -1.
	Staged int
}

// Owners returns the owners of the given shard-key values (as text) of
// table; values never placed are absent.
func (q *Queries) Owners(ctx context.Context, table string, keys []string) (map[string]KeyOwner, error) {
	out := map[string]KeyOwner{}
	if len(keys) == 0 {
		return out, nil
	}
	vals := make([]any, len(keys))
	for i, k := range keys {
		vals[i] = k
	}
	rows, err := q.conn.Query(ctx, fmt.Sprintf(`SELECT key, argMax(owner, ring_version), max(ring_version)
		FROM %s._ownership WHERE source_table = ? AND key IN ? GROUP BY key`, quote(q.db)), table, clickhouse.GroupSet{Value: vals})
	if err != nil {
		if isUnknownTable(err) {
			return out, nil
		}
		return nil, fmt.Errorf("owners: %w", err)
	}
	for rows.Next() {
		var k string
		var o uint16
		var v int64
		if err := rows.Scan(&k, &o, &v); err != nil {
			rows.Close()
			return nil, fmt.Errorf("owners: %w", err)
		}
		out[k] = KeyOwner{Owner: int(o), RingVersion: v, Staged: -1}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("owners: %w", err)
	}
	rows, err = q.conn.Query(ctx, fmt.Sprintf(`SELECT key, argMax(next_owner, next_version), max(next_version)
		FROM %s._ownership_next WHERE source_table = ? AND key IN ? GROUP BY key`, quote(q.db)), table, clickhouse.GroupSet{Value: vals})
	if err != nil {
		if isUnknownTable(err) {
			return out, nil
		}
		return nil, fmt.Errorf("staged owners: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var o uint16
		var v int64
		if err := rows.Scan(&k, &o, &v); err != nil {
			return nil, fmt.Errorf("staged owners: %w", err)
		}
		if cur, ok := out[k]; ok && v > cur.RingVersion {
			cur.Staged = int(o)
			out[k] = cur
		}
	}
	return out, rows.Err()
}
