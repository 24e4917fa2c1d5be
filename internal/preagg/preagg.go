// Package preagg keeps exact revenue pre-aggregates per id block
// (schema/clickhouse.md, "Revenue at scale"): the live revenue query is a
// FINAL scan of the whole table, seconds at 10M rows; the API reads these
// instead when they can answer (internal/query/preagg.go).
//
// The loader marks, before it inserts a batch into the revenue table, the
// blocks the batch changes (Marks: shard, the lowest commit LSN, block; a
// TRUNCATE or snapshot end marks every block). The Aggregator, one per
// deployment, runs rounds: it reads the revenue topic's watermarks W (every
// change at or below W is applied), takes the blocks marked in (W_prev, W]
// for their shard, recomputes each from the table with FINAL — absolute
// sums, never deltas — and records W as the pre-aggregates' freshness.
// Because marks precede their rows and the watermark follows them, every
// change at or below W is in a recomputed block; because a block is
// recomputed whole, recomputing twice, late, or after a crash changes
// nothing. The first round, a change of the ring map (ownership decides
// which rows count), or an all-blocks mark recomputes every block.
package preagg

import (
	"context"
	"fmt"
	"strconv"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/query"
)

// AllBlocks is the block of a mark that dirties every block.
const AllBlocks int64 = -1

// DefaultBlockBits makes a block 2^49 ids: with seed-000 Snowflake ids,
// 18.6 hours of creation time.
const DefaultBlockBits = 49

// EnsureMarks creates the marks and state tables.
func EnsureMarks(ctx context.Context, conn driver.Conn, db string) error {
	for _, ddl := range []string{
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (source_table String, shard UInt16, commit_lsn UInt64, block Int64)
			ENGINE = MergeTree ORDER BY (source_table, shard, commit_lsn)`, chstore.Quote(db), query.PreaggMarksTable),
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (source_table String, shard UInt16, lsn UInt64,
			commit_ts DateTime('UTC'), ring_version Int64, computed UInt64)
			ENGINE = ReplacingMergeTree(computed) ORDER BY (source_table, shard)`, chstore.Quote(db), query.PreaggStateTable),
	} {
		if err := conn.Exec(ctx, ddl); err != nil {
			return fmt.Errorf("create pre-aggregate tables: %w", err)
		}
	}
	return nil
}

// Marks collects the blocks one batch changes, to be written before the
// batch's rows. Not safe for concurrent use.
type Marks struct {
	table string
	bits  int
	m     map[markKey]uint64 // lowest commit LSN
	ready bool               // the tables exist
}

type markKey struct {
	shard uint16
	block int64
}

// NewMarks collects marks of table with blocks of 2^bits ids.
func NewMarks(table string, bits int) *Marks {
	return &Marks{table: table, bits: bits, m: map[markKey]uint64{}}
}

// Table is the revenue table the marks are for.
func (m *Marks) Table() string { return m.table }

// Add marks the block of id (decimal text) on shard, changed in a
// transaction committed at commitLSN. An id that is not an integer marks
// every block. Snapshot rows (commit LSN 0) need no mark: the first round,
// or the snapshot end's all-blocks mark, covers them.
func (m *Marks) Add(shard int, id string, commitLSN uint64) {
	if commitLSN == 0 {
		return
	}
	block := AllBlocks
	if n, err := strconv.ParseInt(id, 10, 64); err == nil {
		block = n >> m.bits
	}
	m.add(markKey{uint16(shard), block}, commitLSN)
}

// All marks every block of shard, as of commitLSN (a TRUNCATE, a snapshot
// end).
func (m *Marks) All(shard int, commitLSN uint64) {
	m.add(markKey{uint16(shard), AllBlocks}, max(commitLSN, 1))
}

func (m *Marks) add(k markKey, lsn uint64) {
	if cur, ok := m.m[k]; !ok || lsn < cur {
		m.m[k] = lsn
	}
}

// Len is the number of marks collected.
func (m *Marks) Len() int { return len(m.m) }

// Write stores the marks collected and forgets them.
func (m *Marks) Write(ctx context.Context, conn driver.Conn, db string) error {
	if len(m.m) == 0 {
		return nil
	}
	if !m.ready {
		if err := EnsureMarks(ctx, conn, db); err != nil {
			return err
		}
		m.ready = true
	}
	b, err := conn.PrepareBatch(ctx, fmt.Sprintf("INSERT INTO %s.%s (source_table, shard, commit_lsn, block)",
		chstore.Quote(db), query.PreaggMarksTable))
	if err != nil {
		return fmt.Errorf("prepare marks: %w", err)
	}
	defer b.Abort() //nolint:errcheck // no-op after Send
	for k, lsn := range m.m {
		if err := b.Append(m.table, k.shard, lsn, k.block); err != nil {
			return fmt.Errorf("append mark: %w", err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("insert marks: %w", err)
	}
	clear(m.m)
	return nil
}
