package revenueblocks

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/envelope"
)

// Pos is one shard's watermark a round recomputed up to.
type Pos struct {
	Shard    int
	LSN      envelope.LSN
	CommitTS time.Time
}

// State is the pre-aggregates' freshness: per shard, the watermark the
// last round recomputed up to, and the layout it computed under.
type State struct {
	Shards      []Pos
	RingVersion int64
	Computed    time.Time
	// Kind and Bits are the block layout of the stored blocks ("" and 0:
	// unknown, written before the layout was recorded).
	Kind IDKind
	Bits int
}

// ReadState reads the state of table's pre-aggregates in database db; nil
// when none was computed (or the tables do not exist).
func ReadState(ctx context.Context, conn driver.Conn, db, table string) (*State, error) {
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT shard, argMax(lsn, computed), argMax(commit_ts, computed),
		argMax(ring_version, computed), max(computed), argMax(id_kind, computed), argMax(block_bits, computed)
		FROM %s.%s WHERE source_table = ? GROUP BY shard ORDER BY shard`,
		chstore.Quote(db), StateTable), table)
	if err != nil {
		if chstore.IsUnknownTable(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read pre-aggregate state: %w", err)
	}
	defer rows.Close()
	var st *State
	for rows.Next() {
		var shard uint16
		var lsn, computed uint64
		var ts time.Time
		var ring int64
		var kind string
		var bits uint8
		if err := rows.Scan(&shard, &lsn, &ts, &ring, &computed, &kind, &bits); err != nil {
			return nil, fmt.Errorf("read pre-aggregate state: %w", err)
		}
		if st == nil {
			st = &State{}
		}
		st.Shards = append(st.Shards, Pos{Shard: int(shard), LSN: envelope.LSN(lsn), CommitTS: ts.UTC()})
		st.RingVersion = ring
		if len(st.Shards) == 1 {
			st.Kind, st.Bits = IDKind(kind), int(bits)
		} else if st.Kind != IDKind(kind) || st.Bits != int(bits) {
			st.Kind, st.Bits = "", 0 // shards written under different layouts: mid-change
		}
		if c := time.Unix(0, int64(computed)).UTC(); c.After(st.Computed) {
			st.Computed = c
		}
	}
	return st, rows.Err()
}
