package loader

import (
	"context"
	"time"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/preagg"
)

// store is what the loader needs of ClickHouse: a *chstore.Store in
// production, a fake in the unit tests of the apply steps. It is the
// union of the small interfaces below, one per part of the loader, so a
// reader sees which part reads or writes what.
type store interface {
	tableStore
	cutStore
	detectStore
	watermarkStore
	placementStore
	stopWriter // stopped.go
	preagg.Store
	MarkAlerted(ctx context.Context, as []chstore.Anomaly) error
	EnsureMoveIndex(ctx context.Context, m chstore.MoveIndex) (bool, error)
	DetectCapabilities(ctx context.Context) (chstore.Capabilities, error)
}

// tableStore is what the apply steps need (steps.go): the table's layout
// (ensured, or looked up for a batch without column lists), the stored
// bases of unchanged-TOAST updates, and inserts.
type tableStore interface {
	EnsureTable(ctx context.Context, name string, key []string, cols []envelope.Column) (*chstore.Table, error)
	Lookup(ctx context.Context, name string, key []string) (*chstore.Table, error)
	Current(ctx context.Context, t *chstore.Table, keys []chstore.RowKey, cols []string) (map[chstore.RowKey]chstore.Stored, error)
	InsertBlock(ctx context.Context, b *chstore.Block, rows []int) error
}

// cutStore is what a TRUNCATE or snapshot end reads: the live rows it
// removes (partition.go).
type cutStore interface {
	EachLiveRow(ctx context.Context, t *chstore.Table, shard uint16, before uint64, cols []string, n int, fn func(ids []string, values [][]*string) error) error
}

// detectStore is what the duplicate-id detection reads and writes
// (anomalies.go).
type detectStore interface {
	MultiShardIDs(ctx context.Context, t *chstore.Table, ids []string) ([]string, error)
	LiveCopies(ctx context.Context, t *chstore.Table, shardKey string, ids []string) (map[string]chstore.Anomaly, error)
	Anomalies(ctx context.Context, table string, ids []string, open bool) (map[string]chstore.Anomaly, error)
	WriteAnomalies(ctx context.Context, readAt time.Time, as []chstore.Anomaly) error
}

// watermarkStore holds the per-partition, per-shard watermarks.
type watermarkStore interface {
	WriteWatermarks(ctx context.Context, ws []chstore.Watermark) error
	SyncReplicas(ctx context.Context, tables []string, report func(chstore.ReplicaEvent)) error
	WatermarkLSN(ctx context.Context, topic string, partition int32, shard uint16) (uint64, error)
	WatermarkTimes(ctx context.Context) (map[uint16]time.Time, error)
}

// placementStore holds the ownership of shard-key values under the ring
// map, and counts the rows it finds misplaced (placement.go).
type placementStore interface {
	OwnershipVersions(ctx context.Context, table string) (map[string]int64, error)
	WriteOwnership(ctx context.Context, os []chstore.Ownership) error
	WriteNextOwnership(ctx context.Context, os []chstore.Ownership) error
	MisplacedCounts(ctx context.Context, t *chstore.Table, shardKey string) (map[uint16]uint64, error)
	MovingCounts(ctx context.Context, t *chstore.Table, shardKey string) (map[uint16]uint64, error)
}

var _ store = (*chstore.Store)(nil)
