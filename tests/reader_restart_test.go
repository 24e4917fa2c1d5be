package tests

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary/tributary/internal/envelope"
)

// TestReaderRestartMidTransaction: source transactions stay open across
// reader restarts while other transactions commit, so that the slot is
// confirmed past the open ones' first changes. One is open across a
// SIGKILL, one across a SIGTERM (graceful stop), one is rolled back. After
// they commit (or not), ClickHouse must equal the shard: the committed
// ones' changes all arrive, the rolled-back one's never do.
func TestReaderRestartMidTransaction(t *testing.T) {
	const shard = 0
	p := setupPipeline(t, []int{shard}, nil, true)
	tbl := p.table()
	q := pgx.Identifier{tbl}.Sanitize()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p.exec(ctx, shard, fmt.Sprintf("INSERT INTO %s (workspace_id, title, body) SELECT g %% 10, 'before' || g, 'b' FROM generate_series(1, 200) g", q))

	loaderCtx, stopLoader := context.WithCancel(context.Background())
	t.Cleanup(stopLoader) // before the pipeline's cleanup waits for the loader
	p.startLoader(loaderCtx, "l1")
	slot := fmt.Sprintf("e2e_%s_%d", p.suffix, shard)
	rd, logFile := readerProcess(t, p, shard, fmt.Sprintf(
		`{"topic_prefix":"e2e_%s.","tables":[{"name":%q,"id_column":"id","id_layout":"seed000"}]}`, p.suffix, tbl))
	defer stopReaderProcess(t, rd, logFile)
	waitLog(ctx, t, logFile, `msg=streaming`)

	// open begins a transaction that writes rows, an update and a delete
	// of committed rows, and returns it with the WAL position after its
	// changes (the slot is then confirmed past all of them).
	// Each one touches its own committed rows (nth), so none waits for
	// another's row locks.
	open := func(name string, nth int) (pgx.Tx, envelope.LSN) {
		conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[shard])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(context.Background()) })
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, sql := range []string{
			fmt.Sprintf("INSERT INTO %s (workspace_id, title, body) SELECT g %% 10, '%s' || g, 'o' FROM generate_series(1, 300) g", q, name),
			fmt.Sprintf("UPDATE %s SET title = '%s-upd' WHERE id IN (SELECT id FROM %s WHERE title LIKE 'before%%' ORDER BY id LIMIT 20 OFFSET %d)", q, name, q, nth*20),
			fmt.Sprintf("DELETE FROM %s WHERE id IN (SELECT id FROM %s WHERE title LIKE 'before%%' ORDER BY id DESC LIMIT 5 OFFSET %d)", q, q, nth*5),
		} {
			if _, err := tx.Exec(ctx, sql); err != nil {
				t.Fatal(err)
			}
		}
		var first string
		if err := tx.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&first); err != nil {
			t.Fatal(err)
		}
		lsn, err := envelope.ParseLSN(first)
		if err != nil {
			t.Fatal(err)
		}
		return tx, lsn
	}
	// confirmPast commits other transactions until the slot is confirmed
	// beyond lsn.
	confirmPast := func(lsn envelope.LSN) {
		for i := 0; ; i++ {
			p.exec(ctx, shard, fmt.Sprintf("INSERT INTO %s (workspace_id, title, body) VALUES (1, 'other%d', 'x')", q, i))
			var confirmed string
			p.queryRow(ctx, shard, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", []any{slot}, &confirmed)
			c, err := envelope.ParseLSN(confirmed)
			if err != nil {
				t.Fatal(err)
			}
			if c > lsn {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("the slot stays at %s, not past %s", c, lsn)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	restartedTo := func(n int) {
		for rd.startCount() < n {
			if ctx.Err() != nil {
				t.Fatalf("the reader was not restarted (%d starts)", rd.startCount())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	signal := func(sig syscall.Signal) {
		rd.mu.Lock()
		defer rd.mu.Unlock()
		rd.cmd.Process.Signal(sig) //nolint:errcheck // checked by the restart count
	}

	killed, at1 := open("killed", 0)
	aborted, at3 := open("aborted", 1)
	confirmPast(max(at1, at3))
	signal(syscall.SIGKILL)
	restartedTo(2)
	t.Logf("SIGKILL with two transactions open (changes before %s, %s), the slot confirmed past them", at1, at3)

	stopped, at2 := open("stopped", 2)
	confirmPast(at2)
	if err := killed.Commit(ctx); err != nil { // committed while the reader restarts, or after
		t.Fatal(err)
	}
	signal(syscall.SIGTERM)
	restartedTo(3)
	t.Logf("SIGTERM with a transaction open (changes before %s), the slot confirmed past it", at2)
	if err := aborted.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	confirmPast(at2)
	if err := stopped.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	p.exec(ctx, shard, fmt.Sprintf("INSERT INTO %s (workspace_id, title, body) VALUES (2, 'last', 'x')", q))

	deadline := time.Now().Add(time.Minute)
	var diff string
	for time.Now().Before(deadline) {
		if diff = p.compare(ctx, tbl); diff == "" {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if diff != "" {
		t.Fatalf("ClickHouse differs from the shard:\n%s", diff)
	}
	var n int
	p.queryRow(ctx, shard, fmt.Sprintf("SELECT count(*) FROM %s WHERE title LIKE 'killed%%' OR title LIKE 'stopped%%'", q), nil, &n)
	if n != 640 {
		t.Errorf("%d rows of the two committed open transactions at the source, want 640", n)
	}
}

// queryRow runs one query on a shard and scans its single row.
func (p *pipeline) queryRow(ctx context.Context, shard int, sql string, args []any, dest ...any) {
	p.t.Helper()
	conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[shard])
	if err != nil {
		p.t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := conn.QueryRow(ctx, sql, args...).Scan(dest...); err != nil {
		p.t.Fatalf("%s: %v", sql, err)
	}
}
