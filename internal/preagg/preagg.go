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
// which rows count) or of the block layout (id kind, block bits), or an
// all-blocks mark recomputes every block.
//
// The API combines the pre-aggregates with an exact live delta
// (internal/query/preagg.go): the blocks marked after the state's
// watermarks are read from the table, the others from their rows here, so
// an answer is as fresh as the table whatever the aggregator's lag.
//
// Ids map to blocks by their kind (revenueblocks.IDKind): integers by their
// value, uuids by their first 64 bits (for UUIDv7, creation time). Any
// other id column type is refused once, at start: no pre-aggregates, and
// the API answers from the live query.
//
// One aggregator per table, elected among the loaders: the owner of
// partition 0 of the revenue table's topic runs it (internal/loader,
// preagg.go; why in schema/clickhouse.md).
//
// Metrics (the loader's registry):
//
//	tributary_preagg_rounds_total{outcome}   rounds by outcome
//	tributary_preagg_blocks_recomputed_total blocks recomputed from the table
//	tributary_preagg_lag_seconds             the state's lag behind the table
//	tributary_preagg_leader                  1 while this loader runs the aggregator
package preagg

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/revenueblocks"
)

// AllBlocks is the block of a mark that dirties every block.
const AllBlocks int64 = -1

// DefaultBlockBits makes a block 2^49 ids: with seed-000 Snowflake ids,
// 18.6 hours of creation time.
const DefaultBlockBits = 49

// DefaultInterval is how often the elected aggregator runs a round.
const DefaultInterval = 5 * time.Second

// Store is where the pre-aggregates live: a *chstore.Store, whose tables
// are on one server or, in cluster mode, on every node of the cluster
// (ExecDDL), each held whole by every node (ClusterReplicated).
type Store interface {
	Conn() driver.Conn
	Database() string
	ExecDDL(ctx context.Context, q string) error
	ClusterReplicated(table, engine string) string
}

// ensureMarks creates the marks and state tables (Marks.Write and
// Aggregator.Round do, once).
func ensureMarks(ctx context.Context, st Store) error {
	db := st.Database()
	for _, ddl := range []string{
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (source_table String, shard UInt16, commit_lsn UInt64, block Int64)
			ENGINE = %s ORDER BY (source_table, shard, commit_lsn)`, chstore.Quote(db), revenueblocks.MarksTable,
			st.ClusterReplicated(revenueblocks.MarksTable, "MergeTree")),
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (source_table String, shard UInt16, lsn UInt64,
			commit_ts DateTime('UTC'), ring_version Int64, computed UInt64, id_kind String, block_bits UInt8)
			ENGINE = %s ORDER BY (source_table, shard)`, chstore.Quote(db), revenueblocks.StateTable,
			st.ClusterReplicated(revenueblocks.StateTable, "ReplacingMergeTree(computed)")),
	} {
		if err := st.ExecDDL(ctx, ddl); err != nil {
			return fmt.Errorf("create pre-aggregate tables: %w", err)
		}
	}
	return addStateLayout(ctx, st)
}

// addStateLayout adds the block layout columns to a state table created
// before they existed (18.16 has no ADD COLUMN IF NOT EXISTS). Its rows
// read as kind "" and 0 bits: a layout no reader trusts, so the next round
// recomputes every block.
func addStateLayout(ctx context.Context, st Store) error {
	conn, db := st.Conn(), st.Database()
	for _, col := range []string{"id_kind String", "block_bits UInt8"} {
		name, _, _ := strings.Cut(col, " ")
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM system.columns WHERE database = ? AND table = ? AND name = ?",
			db, revenueblocks.StateTable, name).Scan(&n); err != nil {
			return fmt.Errorf("pre-aggregate state columns: %w", err)
		}
		if n > 0 {
			continue
		}
		err := st.ExecDDL(ctx, fmt.Sprintf("ALTER TABLE %s.%s ADD COLUMN %s", chstore.Quote(db), revenueblocks.StateTable, col))
		if err != nil && !strings.Contains(err.Error(), "already exists") { // another loader added it meanwhile
			return fmt.Errorf("add pre-aggregate state column %s: %w", name, err)
		}
	}
	return nil
}

// BlockOf is the block of an id in its text form: a decimal integer by its
// value, a uuid by its first 64 bits, shifted right by bits (the same
// function as revenueblocks.BlockExpr in ClickHouse). ok is false for an id
// of neither kind.
func BlockOf(id string, bits int) (block int64, ok bool) {
	if n, err := strconv.ParseInt(id, 10, 64); err == nil {
		return n >> bits, true
	}
	if n, err := strconv.ParseUint(id, 10, 64); err == nil {
		return int64(n >> bits), true
	}
	if u, err := uuid.Parse(id); err == nil && len(id) == 36 {
		return int64(binary.BigEndian.Uint64(u[:8]) >> bits), true
	}
	return 0, false
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

// Add marks the block of id (text) on shard, changed in a transaction
// committed at commitLSN. An id that is neither an integer nor a uuid
// marks every block. Snapshot rows (commit LSN 0) need no mark: the first round,
// or the snapshot end's all-blocks mark, covers them.
func (m *Marks) Add(shard int, id string, commitLSN uint64) {
	if commitLSN == 0 {
		return
	}
	block, ok := BlockOf(id, m.bits)
	if !ok {
		block = AllBlocks
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
func (m *Marks) Write(ctx context.Context, st Store) error {
	if len(m.m) == 0 {
		return nil
	}
	conn, db := st.Conn(), st.Database()
	if !m.ready {
		if err := ensureMarks(ctx, st); err != nil {
			return err
		}
		m.ready = true
	}
	b, err := conn.PrepareBatch(ctx, fmt.Sprintf("INSERT INTO %s.%s (source_table, shard, commit_lsn, block)",
		chstore.Quote(db), revenueblocks.MarksTable))
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
