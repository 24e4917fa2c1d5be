package chstore

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// Anomaly kinds.
const (
	// KindDuplicate: a global id live on more than one shard (a half-done
	// move, colliding generators).
	KindDuplicate = "duplicate"
	// KindSerialCollision: a per-shard serial id used on several shards.
	// Expected for legacy tables; reported, never merged.
	KindSerialCollision = "serial_collision"
	// KindArcMove: a row of a planned arc move, live on the owner of its
	// shard-key value and on the owner under the staged ring map. Expected
	// while the move is staged; it becomes a duplicate at cutover if the
	// old owner still holds the row.
	KindArcMove = "arc_move"
)

// Anomaly is the state of one id of one table that is, or was, live on
// more than one shard.
type Anomaly struct {
	Table  string
	ID     string
	Kind   string
	Shards []uint16
	// Keys are the shard-key values of the copies, in Shards order (read
	// by LiveCopies when asked for a shard key; not stored).
	Keys []string
	// FirstSeen is the source commit time at which the id became live on
	// several shards; LastSeen the newest commit time that kept it so.
	FirstSeen, LastSeen time.Time
	Resolved            bool
	// Alerted is set once the anomaly outlived the grace period (counted
	// once in tributary_duplicate_detections_total).
	Alerted bool
	// Ver is the version of the stored state this was read from (0 if new).
	Ver uint64
}

const anomaliesTable = "_anomalies"

func (s *Store) ensureAnomalies(ctx context.Context) error {
	q := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (
		source_table String, id String, kind String, shards Array(UInt16),
		first_seen DateTime('UTC'), last_seen DateTime('UTC'),
		resolved UInt8, alerted UInt8, ver UInt64
	) ENGINE = %s ORDER BY (source_table, id)`, quote(s.db), anomaliesTable,
		s.ClusterReplicated(anomaliesTable, "ReplacingMergeTree(ver)"))
	if err := s.ExecDDL(ctx, q); err != nil {
		return fmt.Errorf("create anomalies table: %w", err)
	}
	return nil
}

// MultiShardIDs returns those of ids that have rows (any version, live or
// deleted) on more than one shard. Tombstones are never removed, so this is
// a superset of the ids live on several shards and of the ids with an open
// anomaly, and it is cheap: no FINAL, and only the sorting key is read. The
// ids travel as an external table, so a whole batch is one query.
func (s *Store) MultiShardIDs(ctx context.Context, t *Table, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	ids2, err := idTable(t, ids)
	if err != nil {
		return nil, err
	}
	q := fmt.Sprintf(`SELECT %[1]s FROM %[2]s.%[3]s WHERE %[4]s IN _ids GROUP BY %[5]s HAVING min(_shard) != max(_shard)`,
		t.keyText(), quote(s.db), quote(t.Name), t.keyTuple(), t.keyList())
	rows, err := s.conn.Query(clickhouse.Context(ctx, clickhouse.WithExternalTable(ids2)), q)
	if err != nil {
		return nil, fmt.Errorf("multi-shard ids %s: %w", t.Name, err)
	}
	defer rows.Close()
	var out []string
	k := t.newKeyScan()
	for rows.Next() {
		if err := rows.Scan(k.dest()...); err != nil {
			return nil, fmt.Errorf("multi-shard ids %s: %w", t.Name, err)
		}
		out = append(out, k.text())
	}
	return out, rows.Err()
}

// LiveCopies returns, for each of ids that is live on more than one shard,
// the shards and the newest commit time among the copies; with a shardKey
// column, also each copy's shard-key value.
func (s *Store) LiveCopies(ctx context.Context, t *Table, shardKey string, ids []string) (map[string]Anomaly, error) {
	return inChunks(ids, func(part []string) (map[string]Anomaly, error) { return s.liveCopies(ctx, t, shardKey, part) })
}

func (s *Store) liveCopies(ctx context.Context, t *Table, shardKey string, ids []string) (map[string]Anomaly, error) {
	out := map[string]Anomaly{}
	if len(ids) == 0 {
		return out, nil
	}
	ids2, err := idTable(t, ids)
	if err != nil {
		return nil, err
	}
	key := "''"
	if shardKey != "" {
		key = fmt.Sprintf("ifNull(toString(%s), '')", quote(shardKey))
	}
	// The key columns by name in the subquery: GROUP BY and the key text
	// read them from its result.
	q := fmt.Sprintf(`SELECT %[1]s, groupArray(_shard), groupArray(k), max(_commit_ts)
		FROM (SELECT %[2]s, _shard, %[5]s AS k, _commit_ts FROM %[3]s.%[4]s FINAL WHERE %[6]s IN _ids AND _deleted = 0)
		GROUP BY %[2]s HAVING count() > 1`, t.keyText(), t.keyList(), quote(s.db), quote(t.Name), key, t.keyTuple())
	rows, err := s.conn.Query(clickhouse.Context(ctx, clickhouse.WithExternalTable(ids2)), q)
	if err != nil {
		return nil, fmt.Errorf("live copies %s: %w", t.Name, err)
	}
	defer rows.Close()
	k := t.newKeyScan()
	for rows.Next() {
		var a Anomaly
		if err := rows.Scan(append(k.dest(), &a.Shards, &a.Keys, &a.LastSeen)...); err != nil {
			return nil, fmt.Errorf("live copies %s: %w", t.Name, err)
		}
		a.ID = k.text()
		sort.Sort(byShard(a))
		a.Table = t.Name
		out[a.ID] = a
	}
	return out, rows.Err()
}

// byShard sorts an anomaly's copies by shard, keys alongside.
type byShard Anomaly

func (a byShard) Len() int           { return len(a.Shards) }
func (a byShard) Less(i, j int) bool { return a.Shards[i] < a.Shards[j] }
func (a byShard) Swap(i, j int) {
	a.Shards[i], a.Shards[j] = a.Shards[j], a.Shards[i]
	a.Keys[i], a.Keys[j] = a.Keys[j], a.Keys[i]
}

// Anomalies reads the current anomaly state of table for ids (all ids when
// nil), unresolved only when open is true.
func (s *Store) Anomalies(ctx context.Context, table string, ids []string, open bool) (map[string]Anomaly, error) {
	if ids == nil {
		return s.anomalies(ctx, table, nil, open)
	}
	return inChunks(ids, func(part []string) (map[string]Anomaly, error) { return s.anomalies(ctx, table, part, open) })
}

func (s *Store) anomalies(ctx context.Context, table string, ids []string, open bool) (map[string]Anomaly, error) {
	where := []string{"source_table = ?"}
	args := []any{table}
	if ids != nil {
		if len(ids) == 0 {
			return map[string]Anomaly{}, nil
		}
		where = append(where, "id IN ?")
		vals := make([]any, len(ids))
		for i, id := range ids {
			vals[i] = id
		}
		args = append(args, clickhouse.GroupSet{Value: vals})
	}
	q := fmt.Sprintf(`SELECT id, kind, shards, first_seen, last_seen, resolved, alerted, ver FROM %s.%s FINAL WHERE %s`,
		quote(s.db), anomaliesTable, strings.Join(where, " AND "))
	if open {
		q += " AND resolved = 0"
	}
	rows, err := s.conn.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read anomalies: %w", err)
	}
	defer rows.Close()
	out := map[string]Anomaly{}
	for rows.Next() {
		a := Anomaly{Table: table}
		var resolved, alerted uint8
		if err := rows.Scan(&a.ID, &a.Kind, &a.Shards, &a.FirstSeen, &a.LastSeen, &resolved, &alerted, &a.Ver); err != nil {
			return nil, fmt.Errorf("read anomalies: %w", err)
		}
		a.Resolved, a.Alerted = resolved == 1, alerted == 1
		out[a.ID] = a
	}
	return out, rows.Err()
}

// WriteAnomalies stores new states, written by the loader that owns the
// ids' partition and derived from what it read of ClickHouse at readAt
// (taken before its first read). The version is that time — newer than the
// stored state it was read at — not the time of the write: a state read
// earlier never replaces one read later, whatever order they are written
// in. That matters across a rebalance, when the partition's old owner may
// still be detecting a batch it polled before while the new owner has
// already resolved the id from newer rows. (Versions are loader wall
// clocks: between hosts, their skew is the window left.)
func (s *Store) WriteAnomalies(ctx context.Context, readAt time.Time, as []Anomaly) error {
	at := uint64(readAt.UnixNano())
	return s.writeAnomalies(ctx, as, func(_ int, a Anomaly) uint64 { return max(at, a.Ver+1) })
}

// MarkAlerted stores the alerted flag (or the kind) of open anomalies,
// written by any loader's periodic evaluation. Each is written at exactly
// the version it was read at plus one, so that a state written since by the
// partition's owner (a resolution, say; its version is newer) is never
// overwritten by this stale copy.
func (s *Store) MarkAlerted(ctx context.Context, as []Anomaly) error {
	return s.writeAnomalies(ctx, as, func(_ int, a Anomaly) uint64 { return a.Ver + 1 })
}

func (s *Store) writeAnomalies(ctx context.Context, as []Anomaly, version func(int, Anomaly) uint64) error {
	if len(as) == 0 {
		return nil
	}
	b, err := s.conn.PrepareBatch(ctx, fmt.Sprintf(
		"INSERT INTO %s.%s (source_table, id, kind, shards, first_seen, last_seen, resolved, alerted, ver)", quote(s.db), anomaliesTable))
	if err != nil {
		return fmt.Errorf("prepare anomalies: %w", err)
	}
	defer b.Abort() //nolint:errcheck // no-op after Send
	for i, a := range as {
		var res, al uint8
		if a.Resolved {
			res = 1
		}
		if a.Alerted {
			al = 1
		}
		if a.Shards == nil {
			a.Shards = []uint16{}
		}
		if err := b.Append(a.Table, a.ID, a.Kind, a.Shards, a.FirstSeen.UTC(), a.LastSeen.UTC(), res, al, version(i, a)); err != nil {
			return fmt.Errorf("append anomaly: %w", err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("insert anomalies: %w", err)
	}
	return nil
}

// WatermarkTimes returns, per shard, the oldest newest-watermark commit time
// over all (topic, partition) pairs that reported it: the source time up to
// which the shard is known complete.
func (s *Store) WatermarkTimes(ctx context.Context) (map[uint16]time.Time, error) {
	q := fmt.Sprintf(`SELECT shard, min(ts) FROM (SELECT shard, topic, partition, argMax(commit_ts, commit_lsn) AS ts
		FROM %s.%s GROUP BY shard, topic, partition) GROUP BY shard`, quote(s.db), watermarksTable)
	rows, err := s.conn.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("watermark times: %w", err)
	}
	defer rows.Close()
	out := map[uint16]time.Time{}
	for rows.Next() {
		var sh uint16
		var ts time.Time
		if err := rows.Scan(&sh, &ts); err != nil {
			return nil, err
		}
		out[sh] = ts
	}
	return out, rows.Err()
}

// maxInList bounds the values bound into one IN list. clickhouse-go binds
// parameters client-side, into the SQL text, and ClickHouse refuses a query
// longer than max_query_size (256 KiB by default): a batch of 50,000 ids
// must be asked about in parts.
const maxInList = 2000

// inChunks runs f over items in parts of at most maxInList and merges the
// answers.
func inChunks[T any, K comparable, V any](items []T, f func([]T) (map[K]V, error)) (map[K]V, error) {
	out := map[K]V{}
	for start := 0; start < len(items); start += maxInList {
		part, err := f(items[start:min(start+maxInList, len(items))])
		if err != nil {
			return nil, err
		}
		for k, v := range part {
			out[k] = v
		}
	}
	return out, nil
}
