// Package query holds the API's read side: exact queries over the
// ClickHouse tables the loader writes. Every query reads a replicated table
// with FINAL and drops delete tombstones, so answers do not depend on when
// ClickHouse merges. Filters are a plain WHERE: PREWHERE runs before the
// replacing merge, so on a column a newer version may have changed it
// would bring superseded versions back. The one exception is the by-id
// read (Row), whose PREWHERE is on the id column alone: every version of a
// row has the same id, so the merge still sees all of them (planRow).
// User input only ever travels as bound parameters.
package query

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/tributary/tributary/internal/chstore"

	"github.com/tributary/tributary/internal/envelope"
)

// ErrUnknownTable is returned for a table with no ClickHouse table yet.
var ErrUnknownTable = errors.New("unknown table")

// Queries runs read queries against one ClickHouse database.
type Queries struct {
	conn driver.Conn
	db   string
	// moveIndexes: per move log, the last reading of whether its index
	// is built (moveindex.go).
	moveIndexes sync.Map
	// moveLogReads counts LatestMove's queries (MoveLogReads).
	moveLogReads atomic.Int64
	// keyTypeCache: per table and key, its key columns' ClickHouse types
	// (keyrow.go).
	keyTypeCache sync.Map
	// replicas, when set (WithCluster), checks every node of the cluster
	// for Replicas (replicas.go).
	replicas *replicaCheck
}

// New returns Queries over db.
func New(conn driver.Conn, db string) *Queries { return &Queries{conn: conn, db: db} }

// Copy is one live copy of a row: the row on one shard.
type Copy struct {
	Shard     int            `json:"shard"`
	Version   string         `json:"version"` // the change's LSN
	CommitLSN string         `json:"commit_lsn"`
	CommitTS  time.Time      `json:"commit_ts"`
	Row       map[string]any `json:"row"`
	colOrder  []string
}

// pointLookup are the settings of a by-id read, which touches one granule
// per part (the id is the sorting key's prefix): use_uncompressed_cache
// keeps decompressed blocks of hot granules in ClickHouse's cache
// (uncompressed_cache_size) instead of decompressing them again; one
// thread and small blocks, because a read of a few rows gains nothing from
// a second stream or 64k-row buffers (41 MB of buffers per lookup measured
// with the defaults, 5 MB with these). They change speed only, never the
// answer, and exist in 18.16 and current ClickHouse. Measured with bench
// api --variants byid-shapes, deleted after 09177d7 (docs/benchmarks-log.md, API).
var pointLookup = clickhouse.Settings{"use_uncompressed_cache": 1, "max_threads": 1, "max_block_size": 128,
	"optimize_move_to_prewhere": 0}

// planRow is the by-id read: FINAL, PREWHERE on the id column only, then a
// plain WHERE for the tombstones. PREWHERE is exact here because every
// version of (id, _shard) carries the same id: the replacing merge after it
// sees all versions of the rows it keeps. It is ~3x faster than a plain
// WHERE at 10M rows: the merge handles the matching rows, not every row of
// the granule of every part. Never PREWHERE another column (see the
// package doc). extra, if not empty, is more result columns (", expr AS
// name"), whose parameters come before the id's.
func planRow(db, table, idColumn, extra string) string {
	return fmt.Sprintf("SELECT *%s FROM %s.%s FINAL PREWHERE %s = ? WHERE _deleted = 0 ORDER BY _shard",
		extra, quote(db), quote(table), quote(idColumn))
}

// Row returns every live copy of the row with id in table, one per shard,
// ordered by shard. idColumn must be a column of the table, and the first
// column of its sorting key (the loader's tables are ORDER BY (id, _shard)).
func (q *Queries) Row(ctx context.Context, table, idColumn string, id any) ([]Copy, error) {
	sql := planRow(q.db, table, idColumn, "")
	return q.pointCopies(ctx, table, sql, id)
}

// pointCopies runs sql, a point lookup of table with args, and returns
// the live copies it found (an unknown table is ErrUnknownTable).
func (q *Queries) pointCopies(ctx context.Context, table, sql string, args ...any) ([]Copy, error) {
	rows, err := q.conn.Query(clickhouse.Context(ctx, clickhouse.WithSettings(pointLookup)), sql, args...)
	if err != nil {
		if chstore.IsUnknownTable(err) {
			return nil, fmt.Errorf("%w: %s", ErrUnknownTable, table)
		}
		return nil, fmt.Errorf("read %s: %w", table, err)
	}
	defer rows.Close()
	out, _, err := scanCopies(rows, nil)
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", table, err)
	}
	return out, nil
}

// RowsOf is Row for many integer ids at once (decimal texts; an id that
// is not one is an error): the live copies by id, each ordered by shard;
// an id with none is absent. One query, the same read as Row's — FINAL,
// the ids in PREWHERE, tombstones filtered — for tools that compare many
// rows at a time (internal/verify). The ids are checked integers, so they
// are listed as literals.
func (q *Queries) RowsOf(ctx context.Context, table, idColumn string, ids []string) (map[string][]Copy, error) {
	if len(ids) == 0 {
		return map[string][]Copy{}, nil
	}
	for _, id := range ids {
		if _, err := strconv.ParseInt(id, 10, 64); err != nil {
			if _, uerr := strconv.ParseUint(id, 10, 64); uerr != nil {
				return nil, fmt.Errorf("read %s: id %q is not an integer", table, id)
			}
		}
	}
	const idText = "_rows_of_id"
	sql := fmt.Sprintf("SELECT toString(%[1]s) AS %[4]s, * FROM %[2]s.%[3]s FINAL PREWHERE %[1]s IN (%[5]s) WHERE _deleted = 0 ORDER BY %[1]s, _shard",
		quote(idColumn), quote(q.db), quote(table), idText, strings.Join(ids, ","))
	rows, err := q.conn.Query(ctx, sql)
	if err != nil {
		if chstore.IsUnknownTable(err) {
			return nil, fmt.Errorf("%w: %s", ErrUnknownTable, table)
		}
		return nil, fmt.Errorf("read %s: %w", table, err)
	}
	defer rows.Close()
	copies, extras, err := scanCopies(rows, []string{idText})
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", table, err)
	}
	out := make(map[string][]Copy, len(ids))
	for i, c := range copies {
		id := extras[i][0].(string)
		out[id] = append(out[id], c)
	}
	return out, nil
}

// Arrived reports whether shard holds any version of id in table, a
// tombstone included: a document deleted after it arrived did arrive.
func (q *Queries) Arrived(ctx context.Context, table, idColumn string, id any, shard int) (bool, error) {
	sql := fmt.Sprintf("SELECT count() FROM %s.%s PREWHERE %s = ? WHERE _shard = ?", quote(q.db), quote(table), quote(idColumn))
	var n uint64
	if err := q.conn.QueryRow(clickhouse.Context(ctx, clickhouse.WithSettings(pointLookup)), sql, id, shard).Scan(&n); err != nil {
		return false, fmt.Errorf("read %s: %w", table, err)
	}
	return n > 0, nil
}

// scanCopies reads every row of rows as a Copy. Result columns whose name
// is in extra are not part of the row: their values are returned per row,
// in the order of extra.
func scanCopies(rows driver.Rows, extra []string) ([]Copy, [][]any, error) {
	cols := rows.Columns()
	types := rows.ColumnTypes()
	plan := planRender(cols, types)
	var out []Copy
	var extras [][]any
	for rows.Next() {
		dest := make([]any, len(types))
		for i, ct := range types {
			dest[i] = reflect.New(ct.ScanType()).Interface()
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, nil, err
		}
		c := Copy{Row: map[string]any{}}
		var ex []any
		if len(extra) > 0 {
			ex = make([]any, len(extra))
		}
		for i, name := range cols {
			if plan.hidden[i] {
				continue
			}
			v := reflect.ValueOf(dest[i]).Elem().Interface()
			if k := slices.Index(extra, name); k >= 0 {
				ex[k] = v
				continue
			}
			switch name {
			case "_shard":
				c.Shard = int(v.(uint16))
			case "_version":
				c.Version = envelope.LSN(v.(uint64)).String()
			case "_commit_lsn":
				c.CommitLSN = envelope.LSN(v.(uint64)).String()
			case "_commit_ts":
				c.CommitTS = v.(time.Time).UTC()
			case "_deleted", "_loaded_at":
			default:
				c.Row[name] = plan.value(i, dest)
				c.colOrder = append(c.colOrder, name)
			}
		}
		out = append(out, c)
		extras = append(extras, ex)
	}
	return out, extras, rows.Err()
}

// ShardFreshness is how current one shard's data in ClickHouse is.
type ShardFreshness struct {
	Shard int `json:"shard"`
	// CommitLSN and CommitTS: every change of the shard committed at or
	// before this position is visible.
	CommitLSN string    `json:"commit_lsn"`
	CommitTS  time.Time `json:"commit_ts"`
	// Complete is false until every partition of every table topic has
	// reported this shard; until then the position is a lower bound of
	// nothing and must not be trusted.
	Complete  bool    `json:"complete"`
	Staleness float64 `json:"staleness_seconds"`
	lsn       envelope.LSN
}

// LSN is the watermark as a number.
func (f ShardFreshness) LSN() envelope.LSN { return f.lsn }

// Freshness computes per-shard watermarks: the minimum, over every
// partition of every given topic, of the newest watermark the loader wrote
// there (chstore.ShardWatermarks).
func (q *Queries) Freshness(ctx context.Context, topics []string) ([]ShardFreshness, error) {
	ws, err := chstore.ShardWatermarks(ctx, q.conn, q.db, topics)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := make([]ShardFreshness, len(ws))
	for i, w := range ws {
		out[i] = FreshnessAt(w.Shard, w.LSN, w.CommitTS, w.Complete).At(now)
	}
	return out, nil
}

// Ping checks ClickHouse answers.
func (q *Queries) Ping(ctx context.Context) error { return q.conn.Ping(ctx) }

func quote(id string) string { return chstore.Quote(id) }

// Open connects to ClickHouse for reading database db, with o's address,
// user and TLS (its pool size and laziness are Open's).
//
// A server that does not answer yet is not fatal: the Queries are
// returned with an error wrapping chstore.ErrNotReachable, and requests
// (and /readyz) fail until it answers.
func Open(ctx context.Context, db string, o chstore.DialOptions) (*Queries, error) {
	// ReadOnly: the API creates and writes nothing, whatever the user may.
	o.MaxOpenConns, o.Lazy, o.ReadOnly = 32, true, true
	conn, err := chstore.Dial(ctx, o)
	if conn == nil {
		return nil, err
	}
	return New(conn, db), err
}

// Close releases the connections.
func (q *Queries) Close() error { return q.conn.Close() }
