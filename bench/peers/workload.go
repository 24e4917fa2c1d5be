package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The workloads are those of `go run ./cmd/bench reader` (cmd/bench/reader.go,
// docs/benchmarks.md "Reader"), rebuilt here so that both systems read the
// very same committed changes: the SQL is the same, row for row.

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
	switch name {
	case "a":
		return &workCase{name: "a", desc: fmt.Sprintf("%d inserts, one transaction", c.rows), changes: int64(c.rows),
			batches: 1, setup: createRows,
			batch: func(t, k string) string { return insertRows(t, k, c.rows, c.titleBytes) }}, nil
	case "b":
		return &workCase{name: "b", desc: fmt.Sprintf("%d inserts, %d per transaction", c.rows, c.txnRows), changes: int64(c.rows),
			batches: c.rows / c.txnRows, setup: createRows,
			batch: func(t, k string) string { return insertRows(t, k, c.txnRows, c.titleBytes) }}, nil
	case "c":
		return &workCase{name: "c", desc: fmt.Sprintf("%d updates of %d B rows, %d per transaction", c.updates, c.rowBytes, c.updateTxnRows),
			changes: int64(c.updates), batches: c.updates / c.updateTxnRows,
			setup: func(ctx context.Context, conn *pgx.Conn, t string) error {
				_, err := conn.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (id bigint PRIMARY KEY, version bigint NOT NULL, body text NOT NULL);
					INSERT INTO %s SELECT g, 0, left(repeat(md5(g::text), %d), %d) FROM generate_series(1, %d) g`,
					t, t, c.rowBytes/32+1, c.rowBytes, c.updateRows))
				return err
			},
			batch: func(t, k string) string {
				lo := fmt.Sprintf("((%s) * %d) %% %d + 1", k, c.updateTxnRows, c.updateRows)
				return fmt.Sprintf("UPDATE %s SET version = version + 1, body = left(repeat(md5((id + version + 1)::text), %d), %d) WHERE id BETWEEN %s AND %s + %d",
					t, c.rowBytes/32+1, c.rowBytes, lo, lo, c.updateTxnRows-1)
			}}, nil
	}
	return nil, fmt.Errorf("unknown case %q (a, b, c)", name)
}

func createRows(ctx context.Context, conn *pgx.Conn, t string) error {
	_, err := conn.Exec(ctx, "CREATE TABLE "+t+` (id bigint PRIMARY KEY, workspace_id bigint NOT NULL,
		title text NOT NULL, amount numeric(12,2) NOT NULL, created_at timestamptz NOT NULL)`)
	return err
}

// insertRows inserts ids k*n+1 .. (k+1)*n, about 100 bytes of text per row.
func insertRows(t, k string, n, titleBytes int) string {
	return fmt.Sprintf(`INSERT INTO %s SELECT g, g %% 1000, left(repeat(md5(g::text), %d), %d), (g %% 10000000) / 100.0,
		timestamptz '2026-11-30 12:00:00+00' + g * interval '1 ms' FROM generate_series((%s) * %d + 1, ((%s) + 1) * %d) g`,
		t, titleBytes/32+1, titleBytes, k, n, k, n)
}

// runWorkload commits the case's transactions (server-side, synchronous_commit
// off: nobody reads while it runs) and returns the target LSN, the WAL
// insert position just before the last COMMIT, which only that commit's end
// passes. It returns once the WAL is flushed past the target, so that no
// system is charged for the WAL writer's delay.
func runWorkload(ctx context.Context, dsn string, c *workCase, table string) (target lsn, err error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	start := time.Now()
	if _, err := conn.Exec(ctx, "SET synchronous_commit = off"); err != nil {
		return 0, err
	}
	from, err := queryLSN(ctx, conn, "SELECT pg_current_wal_insert_lsn()::text")
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
		flushed, err := queryLSN(ctx, conn, "SELECT pg_current_wal_flush_lsn()::text")
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

func lastTransaction(ctx context.Context, conn *pgx.Conn, stmt string) (lsn, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit: no-op
	if _, err := tx.Exec(ctx, stmt); err != nil {
		return 0, err
	}
	target, err := queryLSN(ctx, tx, "SELECT pg_current_wal_insert_lsn()::text")
	if err != nil {
		return 0, err
	}
	return target, tx.Commit(ctx)
}

// lsn is a PostgreSQL WAL position.
type lsn uint64

func parseLSN(s string) (lsn, error) {
	hi, lo, ok := strings.Cut(s, "/")
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bad LSN %q", s)
	}
	return lsn(h<<32 | l), nil
}

type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func queryLSN(ctx context.Context, q queryRower, sql string, args ...any) (lsn, error) {
	var s string
	if err := q.QueryRow(ctx, sql, args...).Scan(&s); err != nil {
		return 0, fmt.Errorf("%s: %w", sql, err)
	}
	return parseLSN(s)
}
