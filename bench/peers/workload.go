package peers

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary/tributary/bench/internal/benchwork"
	"github.com/tributary/tributary/internal/envelope"
)

// The workloads are those of `bench reader` (both come from
// bench/internal/benchwork), so that both systems read the very same committed
// changes as the reader benchmark.

// workCase is one workload: a table and the transactions that change it.
type workCase struct {
	name    string
	desc    string
	changes int64
	batches int // transactions
	setup   func(ctx context.Context, conn *pgx.Conn, table string) error
	batch   func(table, k string) string // one transaction's statement; k is its index (SQL)
}

func newCase(name string, c config) (*workCase, error) {
	w, err := benchwork.Case(name, c.work)
	if err != nil {
		return nil, err
	}
	return &workCase{name: w.Name, desc: w.Desc, changes: w.Changes, batches: w.Batches, setup: w.Setup, batch: w.Batch}, nil
}

// runWorkload commits the case's transactions (server-side, synchronous_commit
// off: nobody reads while it runs) and returns the target LSN, the WAL
// insert position just before the last COMMIT, which only that commit's end
// passes. It returns once the WAL is flushed past the target, so that no
// system is charged for the WAL writer's delay.
func runWorkload(ctx context.Context, dsn string, c *workCase, table string) (target envelope.LSN, err error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	start := time.Now()
	if _, err := conn.Exec(ctx, "SET synchronous_commit = off"); err != nil {
		return 0, err
	}
	from, err := benchwork.QueryLSN(ctx, conn, "SELECT pg_current_wal_insert_lsn()::text")
	if err != nil {
		return 0, err
	}
	if c.batches > 1 {
		do := fmt.Sprintf("DO $bench$ BEGIN FOR k IN 0..%d LOOP %s; COMMIT; END LOOP; END $bench$", c.batches-2, c.batch(table, "k"))
		if _, err := conn.Exec(ctx, do); err != nil {
			return 0, err
		}
	}
	if target, err = lastTransaction(ctx, conn, c.batch(table, strconv.Itoa(c.batches-1))); err != nil {
		return 0, err
	}
	for {
		flushed, err := benchwork.QueryLSN(ctx, conn, "SELECT pg_current_wal_flush_lsn()::text")
		if err != nil {
			return 0, err
		}
		if flushed > target {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Printf("  workload: %d changes in %d transactions, %.1f MB of WAL, %s\n",
		c.changes, c.batches, float64(target-from)/1e6, time.Since(start).Round(time.Millisecond))
	return target, nil
}

func lastTransaction(ctx context.Context, conn *pgx.Conn, stmt string) (envelope.LSN, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit: no-op
	if _, err := tx.Exec(ctx, stmt); err != nil {
		return 0, err
	}
	target, err := benchwork.QueryLSN(ctx, tx, "SELECT pg_current_wal_insert_lsn()::text")
	if err != nil {
		return 0, err
	}
	return target, tx.Commit(ctx)
}
