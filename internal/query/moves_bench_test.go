package query

// Benchmarks of the move-log reads on a synthetic log in a scratch
// ClickHouse database (dropped afterwards). They need a ClickHouse server:
//
//	set -a; . .stack/stack.env; set +a
//	flock /tmp/tributary-bench.lock go test -run '^$' -bench Moves -benchtime 20x ./internal/query/
//
// Log sizes: $TRIBUTARY_BENCH_MOVES (comma-separated, default 10000,100000;
// docs/design/moves.md's 1M figures used 1000000). Without
// $TRIBUTARY_CLICKHOUSE_ADDR they are skipped.

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/tables"
)

// benchMoveLog fills a scratch database with n moves (1% started, 1%
// copied, the rest done) of documents among 5n, and returns the queries
// and the move log.
func benchMoveLog(b *testing.B, n int) (*Queries, *MoveLog) {
	addr := os.Getenv("TRIBUTARY_CLICKHOUSE_ADDR")
	if addr == "" {
		b.Skip("TRIBUTARY_CLICKHOUSE_ADDR is not set")
	}
	ctx := context.Background()
	conn, err := chstore.Dial(ctx, chstore.DialOptions{Addr: addr, MaxOpenConns: 4})
	if err != nil {
		b.Fatal(err)
	}
	db := fmt.Sprintf("bench_moves_%d_%d", n, time.Now().UnixNano())
	meta := "_shard UInt16, _version UInt64, _deleted UInt8, _commit_lsn UInt64, _commit_ts DateTime, _loaded_at DateTime"
	for _, q := range []string{
		"CREATE DATABASE " + db,
		`CREATE TABLE ` + db + `.documents (id Int64, title String, ` + meta + `) ENGINE = ReplacingMergeTree(_version) ORDER BY (id, _shard)`,
		`CREATE TABLE ` + db + `.document_moves (move_id String, document_id Int64, from_shard Int32, to_shard Int32, state String,
			started_at DateTime('UTC'), finished_at Nullable(DateTime('UTC')), ` + meta + `) ENGINE = ReplacingMergeTree(_version) ORDER BY (move_id, _shard)`,
		fmt.Sprintf(`INSERT INTO %s.documents SELECT number, 'x', number %% 4, 1, 0, 1, now(), now() FROM numbers(%d)`, db, n*5),
		fmt.Sprintf(`INSERT INTO %s.document_moves SELECT hex(MD5(toString(number))), number*5 + 1, 0, 1,
			multiIf(number %% 100 = 0, 'started', number %% 100 = 1, 'copied', 'done'), toDateTime(now() - number), toDateTime(now() - number),
			0, 1, 0, 1, now(), now() FROM numbers(%d)`, db, n),
		"OPTIMIZE TABLE " + db + ".document_moves FINAL",
	} {
		if err := conn.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db) //nolint:errcheck
		conn.Close()
	})
	cfg, err := tables.Parse([]byte(`{"tables": [{"name": "documents", "id_column": "id", "id_layout": "seed000"},
		{"name": "document_moves", "id_column": "move_id", "id_layout": "uuidv4"}],
		"moves": {"table": "document_moves", "documents_table": "documents", "document_column": "document_id",
			"from_shard_column": "from_shard", "to_shard_column": "to_shard", "state_column": "state",
			"in_progress_states": ["started", "copied"], "done_states": ["done"],
			"started_column": "started_at", "finished_column": "finished_at"}}`))
	if err != nil {
		b.Fatal(err)
	}
	l, _ := MoveLogOf(cfg, "documents")
	return New(conn, db), l
}

func BenchmarkMoves(b *testing.B) {
	sizes := []int{10_000, 100_000}
	if env := os.Getenv("TRIBUTARY_BENCH_MOVES"); env != "" {
		sizes = nil
		for _, f := range strings.Split(env, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				b.Fatalf("$TRIBUTARY_BENCH_MOVES: %q is not a positive number", f)
			}
			sizes = append(sizes, n)
		}
	}
	for _, n := range sizes {
		q, l := benchMoveLog(b, n)
		ctx := context.Background()
		b.Run(fmt.Sprintf("LatestMove/moves=%d", n), func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if _, err := q.LatestMove(ctx, l, int64((i*7919%n)*5+1)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("Row/documents=%d", 5*n), func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if _, err := q.Row(ctx, "documents", "id", int64(i*7919%(5*n))); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("MoveAnomalyCounts/moves=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, _, err := q.MoveAnomalyCounts(ctx, l, time.Now().Add(-time.Minute)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
