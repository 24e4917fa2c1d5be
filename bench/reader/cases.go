package reader

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary/tributary/bench/internal/benchwork"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/tables"
)

// Workloads of `bench reader`: the cases a-e and how their changes are written.

// workCase is one workload.
type workCase struct {
	name, desc string
	changes    int64
	snapshot   bool
	// setup creates the table (and its rows, for c and d) before any slot.
	setup func(ctx context.Context, conn *pgx.Conn, table string) error
	// batches transactions of batch(k) (k an SQL integer expression) make
	// the workload, run after the slots exist.
	batches int
	batch   func(table, k string) string
}

func (b *bench) newCase(name string) *workCase {
	c := b.cfg
	switch name {
	case "a", "b", "c":
		w, err := benchwork.Case(name, c.work)
		if err != nil {
			panic(err) // names are checked by validate
		}
		return &workCase{name: w.Name, desc: w.Desc, changes: w.Changes, setup: w.Setup, batches: w.Batches, batch: w.Batch}
	case "e":
		return b.bigTxnCase()
	default: // "d", checked by validate
		return &workCase{name: "d", desc: fmt.Sprintf("snapshot of %d rows", c.snapshotRows), changes: int64(c.snapshotRows), snapshot: true,
			setup: func(ctx context.Context, conn *pgx.Conn, t string) error {
				if err := benchwork.CreateRows(ctx, conn, t); err != nil {
					return err
				}
				if _, err := conn.Exec(ctx, benchwork.InsertRows(t, "0", c.snapshotRows, c.work.TitleBytes)); err != nil {
					return err
				}
				// Hint bits and the visibility map, so that no reader pays for them.
				_, err := conn.Exec(ctx, "VACUUM (ANALYZE) "+t)
				return err
			}}
	}
}

// bigTxnCase is case e: one transaction of --big-txn-mb MiB of row data,
// --row-bytes of text per row. The walsender (protocol 1) spills it to
// disk and sends it after its commit; the reader's memory must not grow
// with it (the producer's buffer is bounded in records and bytes).
func (b *bench) bigTxnCase() *workCase {
	c := b.cfg
	rows := int(int64(c.bigMB) << 20 / int64(c.work.RowBytes))
	return &workCase{name: "e", changes: int64(rows), batches: 1,
		desc: fmt.Sprintf("%d inserts of %d B rows (%d MiB of row text), one transaction", rows, c.work.RowBytes, c.bigMB),
		setup: func(ctx context.Context, conn *pgx.Conn, t string) error {
			_, err := conn.Exec(ctx, "CREATE TABLE "+t+" (id bigint PRIMARY KEY, body text NOT NULL)")
			return err
		},
		batch: func(t, k string) string {
			return fmt.Sprintf("INSERT INTO %s SELECT g, left(repeat(md5(g::text), %d), %d) FROM generate_series((%s) * %d + 1, ((%s) + 1) * %d) g",
				t, c.work.RowBytes/32+1, c.work.RowBytes, k, rows, k, rows)
		}}
}

// names are the per-case (and per-repetition) object names.
type names struct{ table, pub, prefix string }

func (b *bench) names(c *workCase) names {
	base := b.run + "_" + c.name
	return names{table: base, pub: base, prefix: base}
}

func (b *bench) tablesConfig(n names, rep int) (*tables.Config, error) {
	return tables.Parse([]byte(fmt.Sprintf(`{"topic_prefix":%q,"tables":[{"name":%q,"id_column":"id","id_layout":"serial"}]}`,
		n.prefix+"_"+strconv.Itoa(rep)+".", n.table)))
}

// workload runs the case's transactions with synchronous_commit off (the
// consumers start after it, so commit latency does not matter) and returns
// the WAL insert position before it and the target: the insert position
// just before the last COMMIT, which only that commit's end passes.
func (b *bench) workload(ctx context.Context, c *workCase, table string) (from, target envelope.LSN, err error) {
	conn, err := pgx.Connect(ctx, b.cfg.dsn)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	start := time.Now()
	if _, err := conn.Exec(ctx, "SET synchronous_commit = off"); err != nil {
		return 0, 0, err
	}
	if from, err = benchwork.QueryLSN(ctx, conn, "SELECT pg_current_wal_insert_lsn()::text"); err != nil {
		return 0, 0, err
	}
	if c.batches > 1 {
		do := fmt.Sprintf("DO $bench$ BEGIN FOR k IN 0..%d LOOP %s; COMMIT; END LOOP; END $bench$", c.batches-2, c.batch(table, "k"))
		if _, err := conn.Exec(ctx, do); err != nil {
			return 0, 0, err
		}
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit: no-op
	if _, err := tx.Exec(ctx, c.batch(table, strconv.Itoa(c.batches-1))); err != nil {
		return 0, 0, err
	}
	if target, err = benchwork.QueryLSN(ctx, tx, "SELECT pg_current_wal_insert_lsn()::text"); err != nil {
		return 0, 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, 0, err
	}
	// The walsender only sends flushed WAL: do not charge the WAL writer's
	// delay to whichever client runs first.
	for {
		flushed, err := benchwork.QueryLSN(ctx, conn, "SELECT pg_current_wal_flush_lsn()::text")
		if err != nil {
			return 0, 0, err
		}
		if flushed > target {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Printf("  workload: %d changes in %d transactions, %.1f MB of WAL, %s (target %s)\n",
		c.changes, c.batches, float64(target-from)/1e6, time.Since(start).Round(time.Millisecond), target)
	return from, target, nil
}
