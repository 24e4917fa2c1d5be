package chstore

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tributary/tributary/internal/envelope"
)

// Watermark says: in Kafka partition Partition of Topic, every change of
// Shard committed at or before CommitLSN is in ClickHouse.
type Watermark struct {
	Topic      string
	Partition  int32
	Partitions int32 // partitions the topic had when the reader wrote it
	Shard      uint16
	CommitLSN  uint64
	CommitTS   time.Time
}

const watermarksTable = "_watermarks"

func (s *Store) ensureWatermarks(ctx context.Context) error {
	// ReplacingMergeTree(commit_lsn): the newest position per
	// (shard, topic, partition) wins, so a replayed older watermark never
	// moves freshness backwards.
	q := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (
		shard UInt16, topic String, partition UInt32, partitions UInt32,
		commit_lsn UInt64, commit_ts DateTime('UTC'), updated_at DateTime('UTC')
	) ENGINE = %s ORDER BY (shard, topic, partition)`,
		quote(s.db), watermarksTable, s.ClusterReplicated(watermarksTable, "ReplacingMergeTree(commit_lsn)"))
	if err := s.ExecDDL(ctx, q); err != nil {
		return fmt.Errorf("create watermarks table: %w", err)
	}
	return s.ensureStoppedTables(ctx)
}

// WriteWatermarks stores watermarks. Call it only after every change that
// preceded them in their partitions has been inserted.
func (s *Store) WriteWatermarks(ctx context.Context, ws []Watermark) error {
	if len(ws) == 0 {
		return nil
	}
	b, err := s.conn.PrepareBatch(ctx, fmt.Sprintf(
		"INSERT INTO %s.%s (shard, topic, partition, partitions, commit_lsn, commit_ts, updated_at)",
		quote(s.db), watermarksTable))
	if err != nil {
		return fmt.Errorf("prepare watermarks: %w", err)
	}
	defer b.Abort() //nolint:errcheck // no-op after Send
	now := time.Now().UTC()
	for _, w := range ws {
		if err := b.Append(w.Shard, w.Topic, uint32(w.Partition), uint32(w.Partitions), w.CommitLSN, w.CommitTS.UTC(), now); err != nil {
			return fmt.Errorf("append watermark: %w", err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("insert watermarks: %w", err)
	}
	return nil
}

// StoppedTable says: loader Loader has stopped Table (whose topic is
// Topic) since Since, for Reason; Stopped false clears it (the loader
// ended). A loader rewrites its record every few seconds while the table
// stays stopped (UpdatedAt), so a record that is not renewed — its
// loader was killed — expires (readers apply a lease: StopLease).
type StoppedTable struct {
	Table, Topic, Loader string
	Stopped              bool
	Reason               string
	Since, UpdatedAt     time.Time
}

// StopLease is how long a stopped table's record holds without renewal.
// Loaders renew it every StopRenew.
const (
	StopLease = 30 * time.Second
	StopRenew = 5 * time.Second
)

// StoppedTablesTable is the table of StoppedTable records.
const StoppedTablesTable = "_stopped_tables"

func (s *Store) ensureStoppedTables(ctx context.Context) error {
	// One row per (table, loader) survives merges: the newest.
	q := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (
		table String, topic String, loader String, stopped UInt8, reason String,
		since DateTime('UTC'), updated_at DateTime('UTC')
	) ENGINE = %s ORDER BY (table, loader)`,
		quote(s.db), StoppedTablesTable, s.ClusterReplicated(StoppedTablesTable, "ReplacingMergeTree(updated_at)"))
	if err := s.ExecDDL(ctx, q); err != nil {
		return fmt.Errorf("create stopped tables table: %w", err)
	}
	return EnsurePaused(ctx, s.conn, s.db)
}

// WriteStopped stores stopped-table records.
func (s *Store) WriteStopped(ctx context.Context, ts []StoppedTable) error {
	if len(ts) == 0 {
		return nil
	}
	b, err := s.conn.PrepareBatch(ctx, fmt.Sprintf(
		"INSERT INTO %s.%s (table, topic, loader, stopped, reason, since, updated_at)", quote(s.db), StoppedTablesTable))
	if err != nil {
		return fmt.Errorf("prepare stopped tables: %w", err)
	}
	defer b.Abort() //nolint:errcheck // no-op after Send
	for _, t := range ts {
		var stopped uint8
		if t.Stopped {
			stopped = 1
		}
		if err := b.Append(t.Table, t.Topic, t.Loader, stopped, t.Reason, t.Since.UTC(), t.UpdatedAt.UTC()); err != nil {
			return fmt.Errorf("append stopped table: %w", err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("insert stopped tables: %w", err)
	}
	return nil
}

// ShardWatermark is one shard's position over a set of topics: every
// change of Shard committed at or before LSN is in ClickHouse. Complete is
// false until every partition of every topic has reported the shard; until
// then the position is a lower bound of nothing and must not be trusted.
type ShardWatermark struct {
	Shard    int
	LSN      envelope.LSN
	CommitTS time.Time
	Complete bool
}

// ShardWatermarks computes per-shard watermarks in database db: the
// minimum, over every partition of every given topic, of the newest
// watermark a loader wrote there. The API's freshness and the revenue
// aggregator's rounds both read them.
func ShardWatermarks(ctx context.Context, conn driver.Conn, db string, topics []string) ([]ShardWatermark, error) {
	sql := fmt.Sprintf(`SELECT shard, topic, partition, max(partitions), max(commit_lsn), argMax(commit_ts, commit_lsn)
		FROM %s.%s GROUP BY shard, topic, partition`, quote(db), watermarksTable)
	rows, err := conn.Query(ctx, sql)
	if err != nil {
		return nil, fmt.Errorf("read watermarks: %w", err)
	}
	defer rows.Close()
	type acc struct {
		min      envelope.LSN
		minTS    time.Time
		seen     map[string]map[uint32]bool
		expected map[string]uint32
	}
	byShard := map[int]*acc{}
	want := map[string]bool{}
	for _, t := range topics {
		want[t] = true
	}
	for rows.Next() {
		var shard uint16
		var topic string
		var part, parts uint32
		var lsn uint64
		var ts time.Time
		if err := rows.Scan(&shard, &topic, &part, &parts, &lsn, &ts); err != nil {
			return nil, fmt.Errorf("scan watermarks: %w", err)
		}
		if !want[topic] {
			continue
		}
		a := byShard[int(shard)]
		if a == nil {
			a = &acc{min: envelope.LSN(lsn), minTS: ts, seen: map[string]map[uint32]bool{}, expected: map[string]uint32{}}
			byShard[int(shard)] = a
		}
		if envelope.LSN(lsn) < a.min {
			a.min, a.minTS = envelope.LSN(lsn), ts
		}
		if a.seen[topic] == nil {
			a.seen[topic] = map[uint32]bool{}
		}
		a.seen[topic][part] = true
		a.expected[topic] = max(a.expected[topic], parts)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := make([]ShardWatermark, 0, len(byShard))
	for shard, a := range byShard {
		complete := true
		for t := range want {
			if a.expected[t] == 0 || uint32(len(a.seen[t])) < a.expected[t] {
				complete = false
			}
		}
		out = append(out, ShardWatermark{Shard: shard, LSN: a.min, CommitTS: a.minTS.UTC(), Complete: complete})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Shard < out[j].Shard })
	return out, nil
}
