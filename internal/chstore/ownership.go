package chstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/tributary/tributary/internal/rowkey"
)

// Ownership is which shard owns one shard-key value of one table under a
// ring map version: the ring map, materialised for the values that occur.
type Ownership struct {
	Table       string
	Key         string // shard-key value, as PostgreSQL text
	Owner       uint16
	RingVersion int64
}

// The tables that hold placement.
const (
	ownershipTable = "_ownership"
	// nextTable holds the staged ring map's owner of every key whose owner
	// changes under it: where a planned arc move copies rows before cutover.
	nextTable = "_ownership_next"
)

// The newest ring version wins per (table, key): a loader still running an
// older ring map (the 2 a.m. stale pod) cannot turn ownership back.
func (s *Store) ensureOwnership(ctx context.Context) error {
	q := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (
		source_table String, key String, owner UInt16, ring_version Int64
	) ENGINE = %s ORDER BY (source_table, key)`, quote(s.db), ownershipTable,
		s.ClusterReplicated(ownershipTable, "ReplacingMergeTree(ring_version)"))
	if err := s.ExecDDL(ctx, q); err != nil {
		return fmt.Errorf("create ownership table: %w", err)
	}
	q = fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (
		source_table String, key String, next_owner UInt16, next_version Int64
	) ENGINE = %s ORDER BY (source_table, key)`, quote(s.db), nextTable,
		s.ClusterReplicated(nextTable, "ReplacingMergeTree(next_version)"))
	if err := s.ExecDDL(ctx, q); err != nil {
		return fmt.Errorf("create staged ownership table: %w", err)
	}
	return nil
}

// WriteOwnership stores owners.
func (s *Store) WriteOwnership(ctx context.Context, os []Ownership) error {
	return s.writeOwners(ctx, ownershipTable, "owner, ring_version", os)
}

// WriteNextOwnership stores owners under a staged ring map (RingVersion is
// the staged map's version).
func (s *Store) WriteNextOwnership(ctx context.Context, os []Ownership) error {
	return s.writeOwners(ctx, nextTable, "next_owner, next_version", os)
}

func (s *Store) writeOwners(ctx context.Context, table, cols string, os []Ownership) error {
	if len(os) == 0 {
		return nil
	}
	b, err := s.conn.PrepareBatch(ctx, fmt.Sprintf(
		"INSERT INTO %s.%s (source_table, key, %s)", quote(s.db), table, cols))
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

// Placement rules, as SQL over a replicated table's live rows (FINAL, not
// deleted), given its shard-key column. Shard-key values are compared as
// text (toString), the form the loader stores them in. Each rule's
// placeholders all take the source table's name; PlacementArgs fills them.
//
//   - owned: the row is on the owner of its key under the newest ring
//     version stored for the key, or its key has no stored owner (no ring
//     map, a NULL key, or not placed yet): the row counts. Each row of a
//     key under a planned arc move, or left behind on the old owner after
//     cutover, is counted once, from the owner.
//   - moving: not owned, and on the key's owner under a staged ring map
//     newer than every version in force: a planned move's copy.
//   - misplaced: neither — the stale-router failure of docs/design/moves.md.

// OwnedWhere is the owned rule; it has 2 placeholders.
func OwnedWhere(db, shardKey string) string {
	k := keyText(shardKey)
	return fmt.Sprintf(`(%[1]s IS NULL OR %[2]s NOT IN (SELECT key FROM %[3]s.%[4]s WHERE source_table = ?)
		OR (%[2]s, _shard) IN (SELECT key, argMax(owner, ring_version) FROM %[3]s.%[4]s WHERE source_table = ? GROUP BY key))`,
		quote(shardKey), k, quote(db), ownershipTable)
}

// movingWhere is the moving rule without "not owned"; it has 2 placeholders.
func movingWhere(db, shardKey string) string {
	return fmt.Sprintf(`(%[1]s, _shard) IN (SELECT key, argMax(next_owner, next_version) FROM %[2]s.%[3]s
		WHERE source_table = ? AND next_version > (SELECT max(ring_version) FROM %[2]s.%[4]s WHERE source_table = ?) GROUP BY key)`,
		keyText(shardKey), quote(db), nextTable, ownershipTable)
}

// MisplacedWhere is the misplaced rule (over live rows); it has 4
// placeholders.
func MisplacedWhere(db, shardKey string) string {
	return fmt.Sprintf("_deleted = 0 AND NOT %s AND NOT %s", OwnedWhere(db, shardKey), movingWhere(db, shardKey))
}

// MovingWhere is the moving rule (over live rows); it has 4 placeholders.
func MovingWhere(db, shardKey string) string {
	return fmt.Sprintf("_deleted = 0 AND NOT %s AND %s", OwnedWhere(db, shardKey), movingWhere(db, shardKey))
}

// PlacementArgs returns the arguments of n placeholders of a rule.
func PlacementArgs(table string, n int) []any {
	args := make([]any, n)
	for i := range args {
		args[i] = table
	}
	return args
}

func keyText(shardKey string) string {
	return fmt.Sprintf("toString(assumeNotNull(%s))", quote(shardKey))
}

// MisplacedCounts counts live misplaced rows of t by the shard they are on.
func (s *Store) MisplacedCounts(ctx context.Context, t *Table, shardKey string) (map[uint16]uint64, error) {
	return s.countBy(ctx, t, MisplacedWhere(s.db, shardKey))
}

// MovingCounts counts the live copies of a planned arc move by the shard
// they are on.
func (s *Store) MovingCounts(ctx context.Context, t *Table, shardKey string) (map[uint16]uint64, error) {
	return s.countBy(ctx, t, MovingWhere(s.db, shardKey))
}

func (s *Store) countBy(ctx context.Context, t *Table, where string) (map[uint16]uint64, error) {
	q := fmt.Sprintf("SELECT _shard, count() FROM %s.%s FINAL WHERE %s GROUP BY _shard", quote(s.db), quote(t.Name), where)
	rows, err := s.conn.Query(ctx, q, PlacementArgs(t.Name, 4)...)
	if err != nil {
		return nil, fmt.Errorf("placement of %s: %w", t.Name, err)
	}
	defer rows.Close()
	out := map[uint16]uint64{}
	for rows.Next() {
		var sh uint16
		var n uint64
		if err := rows.Scan(&sh, &n); err != nil {
			return nil, fmt.Errorf("placement of %s: %w", t.Name, err)
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

// MisplacedKey is a position in the misplaced listing: by id text, then
// shard.
type MisplacedKey struct {
	ID    string
	Shard uint16
}

// MisplacedRows lists misplaced rows of t after the position (nil: from the
// start), at most limit.
func (s *Store) MisplacedRows(ctx context.Context, t *Table, shardKey string, after *MisplacedKey, limit int) ([]Misplaced, error) {
	return ListMisplaced(ctx, s.conn, s.db, t.Name, t.Key, shardKey, after, limit)
}

// ListMisplaced lists misplaced rows of one table in (key text, shard)
// order — of a composite key: by each key column's text, then shard —
// after the position (nil: from the start), at most limit, with the owner
// of each row's key. The API lists through it too.
func ListMisplaced(ctx context.Context, conn driver.Conn, db, table string, key []string, shardKey string, after *MisplacedKey, limit int) ([]Misplaced, error) {
	where, args := MisplacedWhere(db, shardKey), PlacementArgs(table, 4)
	texts := make([]string, len(key))
	names := make([]string, len(key))
	for i, c := range key {
		texts[i] = "toString(" + quote(c) + ")"
		names[i] = fmt.Sprintf("id_text%d", i)
	}
	if after != nil {
		parts, err := rowkey.Parse(after.ID, len(key))
		if err != nil {
			return nil, fmt.Errorf("misplaced rows %s: position %q: %w", table, after.ID, err)
		}
		// (texts..., _shard) > (parts..., shard), spelt out: no tuple
		// comparison needed from the server.
		var or []string
		for i := 0; i <= len(key); i++ {
			var and []string
			for j := 0; j < i; j++ {
				and = append(and, texts[j]+" = ?")
				args = append(args, parts[j])
			}
			if i < len(key) {
				and = append(and, texts[i]+" > ?")
				args = append(args, parts[i])
			} else {
				and = append(and, "_shard > ?")
				args = append(args, after.Shard)
			}
			or = append(or, "("+strings.Join(and, " AND ")+")")
		}
		where += " AND (" + strings.Join(or, " OR ") + ")"
	}
	sel := make([]string, len(key))
	for i := range key {
		sel[i] = texts[i] + " AS " + names[i]
	}
	q := fmt.Sprintf(`SELECT %[1]s, _shard, %[2]s, _commit_ts FROM %[3]s.%[4]s FINAL
		WHERE %[5]s ORDER BY %[7]s, _shard LIMIT %[6]d`,
		strings.Join(sel, ", "), keyText(shardKey), quote(db), quote(table), where, limit, strings.Join(names, ", "))
	rows, err := conn.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("misplaced rows %s: %w", table, err)
	}
	defer rows.Close()
	var out []Misplaced
	parts := make([]string, len(key))
	for rows.Next() {
		var m Misplaced
		dst := make([]any, 0, len(key)+3)
		for i := range parts {
			dst = append(dst, &parts[i])
		}
		if err := rows.Scan(append(dst, &m.Shard, &m.Key, &m.CommitTS)...); err != nil {
			return nil, fmt.Errorf("misplaced rows %s: %w", table, err)
		}
		m.ID = rowkey.Encode(parts)
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, fillOwners(ctx, conn, db, table, out)
}

// fillOwners sets the owner of each listed row's shard-key value.
func fillOwners(ctx context.Context, conn driver.Conn, db, table string, ms []Misplaced) error {
	keys := make([]string, 0, len(ms))
	for _, m := range ms {
		keys = append(keys, m.Key)
	}
	owners, err := KeyOwners(ctx, conn, db, table, keys)
	if err != nil {
		return err
	}
	for i := range ms {
		ms[i].Owner = uint16(owners[ms[i].Key].Owner)
	}
	return nil
}

// KeyOwner is where a shard-key value belongs under the ring map in force
// (as the loaders placed it), and under a staged map that moves it.
type KeyOwner struct {
	Owner       int
	RingVersion int64
	// Staged is the owner under a staged ring map (a planned arc move),
	// or -1.
	Staged int
}

// KeyOwners returns the owners of the given shard-key values (as text) of
// table; values never placed are absent.
func KeyOwners(ctx context.Context, conn driver.Conn, db, table string, keys []string) (map[string]KeyOwner, error) {
	out := map[string]KeyOwner{}
	if len(keys) == 0 {
		return out, nil
	}
	vals := make([]any, len(keys))
	for i, k := range keys {
		vals[i] = k
	}
	read := func(tbl, cols string, each func(key string, owner uint16, version int64)) error {
		rows, err := conn.Query(ctx, fmt.Sprintf("SELECT key, %s FROM %s.%s WHERE source_table = ? AND key IN ? GROUP BY key",
			cols, quote(db), tbl), table, clickhouse.GroupSet{Value: vals})
		if err != nil {
			return fmt.Errorf("owners of %s: %w", table, err)
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			var o uint16
			var v int64
			if err := rows.Scan(&k, &o, &v); err != nil {
				return fmt.Errorf("owners of %s: %w", table, err)
			}
			each(k, o, v)
		}
		return rows.Err()
	}
	err := read(ownershipTable, "argMax(owner, ring_version), max(ring_version)", func(k string, o uint16, v int64) {
		out[k] = KeyOwner{Owner: int(o), RingVersion: v, Staged: -1}
	})
	if err != nil {
		return nil, err
	}
	err = read(nextTable, "argMax(next_owner, next_version), max(next_version)", func(k string, o uint16, v int64) {
		if cur, ok := out[k]; ok && v > cur.RingVersion {
			cur.Staged = int(o)
			out[k] = cur
		}
	})
	return out, err
}

// RingVersion is the newest ring version stored for table (0: none).
func RingVersion(ctx context.Context, conn driver.Conn, db, table string) (int64, error) {
	var v int64
	err := conn.QueryRow(ctx, fmt.Sprintf("SELECT max(ring_version) FROM %s.%s WHERE source_table = ?", quote(db), ownershipTable), table).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("ring version of %s: %w", table, err)
	}
	return v, nil
}
