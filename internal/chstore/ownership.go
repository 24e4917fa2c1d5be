package chstore

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// Ownership is which shard owns one shard-key value of one table under a
// ring map version: the ring map, materialised for the values that occur.
type Ownership struct {
	Table       string
	Key         string // shard-key value, as PostgreSQL text
	Owner       uint16
	RingVersion int64
}

const ownershipTable = "_ownership"

// The newest ring version wins per (table, key): a loader still running an
// older ring map (the 2 a.m. stale pod) cannot turn ownership back.
func (s *Store) ensureOwnership(ctx context.Context) error {
	q := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (
		source_table String, key String, owner UInt16, ring_version Int64
	) ENGINE = ReplacingMergeTree(ring_version) ORDER BY (source_table, key)`, quote(s.db), ownershipTable)
	if err := s.conn.Exec(ctx, q); err != nil {
		return fmt.Errorf("create ownership table: %w", err)
	}
	return nil
}

// WriteOwnership stores owners.
func (s *Store) WriteOwnership(ctx context.Context, os []Ownership) error {
	if len(os) == 0 {
		return nil
	}
	b, err := s.conn.PrepareBatch(ctx, fmt.Sprintf(
		"INSERT INTO %s.%s (source_table, key, owner, ring_version)", quote(s.db), ownershipTable))
	if err != nil {
		return fmt.Errorf("prepare ownership: %w", err)
	}
	defer b.Abort() //nolint:errcheck // no-op after Send
	for _, o := range os {
		if err := b.Append(o.Table, o.Key, o.Owner, o.RingVersion); err != nil {
			return fmt.Errorf("append ownership: %w", err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("insert ownership: %w", err)
	}
	return nil
}

// OwnershipVersions returns the ring version each known key of table was
// last placed under.
func (s *Store) OwnershipVersions(ctx context.Context, table string) (map[string]int64, error) {
	rows, err := s.conn.Query(ctx, fmt.Sprintf(
		"SELECT key, max(ring_version) FROM %s.%s WHERE source_table = ? GROUP BY key", quote(s.db), ownershipTable), table)
	if err != nil {
		return nil, fmt.Errorf("read ownership: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var v int64
		if err := rows.Scan(&k, &v); err != nil {
			return nil, fmt.Errorf("read ownership: %w", err)
		}
		out[k] = v
	}
	return out, rows.Err()
}

// misplacedWhere selects live rows whose shard is not the owner of their
// shard-key value under the newest ring version stored; its two
// placeholders both take the table name. Rows whose value has no ownership
// yet are not counted (the loader stores ownership before the rows). NULL
// shard keys have no owner and are never misplaced.
func (s *Store) misplacedWhere(shardKey string) string {
	return fmt.Sprintf(`_deleted = 0 AND %[1]s IS NOT NULL
		AND (toString(assumeNotNull(%[1]s)), _shard) NOT IN (
			SELECT key, argMax(owner, ring_version) FROM %[2]s.%[3]s WHERE source_table = ? GROUP BY key)
		AND toString(assumeNotNull(%[1]s)) IN (SELECT key FROM %[2]s.%[3]s WHERE source_table = ?)`,
		quote(shardKey), quote(s.db), ownershipTable)
}

// MisplacedCounts counts live misplaced rows of t by the shard they are on.
func (s *Store) MisplacedCounts(ctx context.Context, t *Table, shardKey string) (map[uint16]uint64, error) {
	q := fmt.Sprintf("SELECT _shard, count() FROM %s.%s FINAL WHERE %s GROUP BY _shard",
		quote(s.db), quote(t.Name), s.misplacedWhere(shardKey))
	rows, err := s.conn.Query(ctx, q, t.Name, t.Name)
	if err != nil {
		return nil, fmt.Errorf("misplaced rows %s: %w", t.Name, err)
	}
	defer rows.Close()
	out := map[uint16]uint64{}
	for rows.Next() {
		var sh uint16
		var n uint64
		if err := rows.Scan(&sh, &n); err != nil {
			return nil, fmt.Errorf("misplaced rows %s: %w", t.Name, err)
		}
		out[sh] = n
	}
	return out, rows.Err()
}

// Misplaced is one live row on a shard that does not own it.
type Misplaced struct {
	ID       string
	Shard    uint16
	Owner    uint16
	Key      string
	CommitTS time.Time
}

// MisplacedRows lists misplaced rows of t in id-text order, after the
// cursor (an id text; empty: from the start), at most limit.
func (s *Store) MisplacedRows(ctx context.Context, t *Table, shardKey, after string, limit int) ([]Misplaced, error) {
	q := fmt.Sprintf(`SELECT toString(%[1]s) AS id_text, _shard, toString(assumeNotNull(%[2]s)), _commit_ts FROM %[3]s.%[4]s FINAL
		WHERE %[5]s AND toString(%[1]s) > ? ORDER BY id_text, _shard LIMIT %[6]d`,
		quote(t.IDColumn), quote(shardKey), quote(s.db), quote(t.Name), s.misplacedWhere(shardKey), limit)
	rows, err := s.conn.Query(ctx, q, t.Name, t.Name, after)
	if err != nil {
		return nil, fmt.Errorf("misplaced rows %s: %w", t.Name, err)
	}
	defer rows.Close()
	var out []Misplaced
	for rows.Next() {
		var m Misplaced
		if err := rows.Scan(&m.ID, &m.Shard, &m.Key, &m.CommitTS); err != nil {
			return nil, fmt.Errorf("misplaced rows %s: %w", t.Name, err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, s.fillOwners(ctx, t.Name, out)
}

// fillOwners sets the owner of each listed row's shard-key value.
func (s *Store) fillOwners(ctx context.Context, table string, ms []Misplaced) error {
	if len(ms) == 0 {
		return nil
	}
	keys := make([]any, 0, len(ms))
	for _, m := range ms {
		keys = append(keys, m.Key)
	}
	rows, err := s.conn.Query(ctx, fmt.Sprintf(
		"SELECT key, argMax(owner, ring_version) FROM %s.%s WHERE source_table = ? AND key IN ? GROUP BY key",
		quote(s.db), ownershipTable), table, clickhouse.GroupSet{Value: keys})
	if err != nil {
		return fmt.Errorf("owners: %w", err)
	}
	defer rows.Close()
	owner := map[string]uint16{}
	for rows.Next() {
		var k string
		var o uint16
		if err := rows.Scan(&k, &o); err != nil {
			return fmt.Errorf("owners: %w", err)
		}
		owner[k] = o
	}
	for i := range ms {
		ms[i].Owner = owner[ms[i].Key]
	}
	return rows.Err()
}
