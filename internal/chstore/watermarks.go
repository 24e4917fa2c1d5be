package chstore

import (
	"context"
	"fmt"
	"time"
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
