package tests

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/loader"
	"github.com/tributary/tributary/internal/reader"
)

// paymentsDDL is a payments table partitioned three ways: by month (range)
// at the top, one month sub-partitioned by region (list), and a hash-
// partitioned month, plus a default partition. %[1]s is the table.
var paymentsDDL = []string{
	`CREATE TABLE %[1]s (id bigint NOT NULL, region text NOT NULL, paid_at timestamptz NOT NULL,
		amount numeric(12,2) NOT NULL, PRIMARY KEY (id, paid_at, region)) PARTITION BY RANGE (paid_at)`,
	`CREATE TABLE %[1]s_2026_01 PARTITION OF %[1]s FOR VALUES FROM ('2026-01-01') TO ('2026-02-01')`,
	`CREATE TABLE %[1]s_2026_02 PARTITION OF %[1]s FOR VALUES FROM ('2026-02-01') TO ('2026-03-01') PARTITION BY LIST (region)`,
	`CREATE TABLE %[1]s_2026_02_eu PARTITION OF %[1]s_2026_02 FOR VALUES IN ('eu')`,
	`CREATE TABLE %[1]s_2026_02_us PARTITION OF %[1]s_2026_02 FOR VALUES IN ('us', 'ca')`,
	`CREATE TABLE %[1]s_2026_02_other PARTITION OF %[1]s_2026_02 DEFAULT`,
	`CREATE TABLE %[1]s_2026_03 PARTITION OF %[1]s FOR VALUES FROM ('2026-03-01') TO ('2026-04-01') PARTITION BY HASH (id)`,
	`CREATE TABLE %[1]s_2026_03_h0 PARTITION OF %[1]s_2026_03 FOR VALUES WITH (modulus 2, remainder 0)`,
	`CREATE TABLE %[1]s_2026_03_h1 PARTITION OF %[1]s_2026_03 FOR VALUES WITH (modulus 2, remainder 1)`,
	`CREATE TABLE %[1]s_later PARTITION OF %[1]s DEFAULT`,
}

const paymentsCfg = `{"topic_prefix":"e2e_%[1]s.","tables":[{"name":%[2]q,"id_column":"id","id_layout":"serial"}]}`

// TestPartitionedTableStreamsUnderRoot: a table partitioned by range, list
// and hash, configured by its root. The initial copy reads every partition;
// streamed changes of every partition arrive (before the fix they were
// skipped as changes of unconfigured relations), including a row whose
// partition key moves it to another partition; a TRUNCATE of one partition,
// a DETACH of another and a DROP of a third (none of which PostgreSQL
// publishes through the root) delete exactly their rows, and the rows of a
// table attached as a partition are copied; ClickHouse equals the shard
// after each step.
func TestPartitionedTableStreamsUnderRoot(t *testing.T) {
	p := setupPipelineWith(t, []int{0}, nil, true, "pay_", paymentsCfg, paymentsDDL...)
	tbl := p.table()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	t.Cleanup(func() {
		stop()
		p.wg.Wait()
		for _, s := range []string{"_2026_01", "_2026_02_us", "_2026_05"} {
			p.exec(context.Background(), 0, "DROP TABLE IF EXISTS "+pgx.Identifier{tbl + s}.Sanitize())
		}
	})
	q := func(sql string, args ...any) {
		p.exec(ctx, 0, fmt.Sprintf(sql, tbl), args...) // tbl needs no quotes
	}
	insert := func(from, n int, region, month string) {
		q(`INSERT INTO %s SELECT g, $1, $2::timestamptz + mod(g, 20) * interval '1 day' + interval '0.5 second', g * 1.25
			FROM generate_series($3::int, $4::int) g`, region, month, from, from+n-1)
	}
	// Before the reader starts: copied by the snapshot.
	insert(1, 30, "eu", "2026-01-01")
	insert(100, 30, "eu", "2026-02-01")
	insert(200, 30, "us", "2026-02-01")
	insert(300, 30, "apac", "2026-02-01")
	insert(400, 40, "eu", "2026-03-01")
	insert(500, 10, "eu", "2026-07-01")
	p.startLoader(runCtx, "l1")
	// Small chunks: the copy of the root is paged and cut into key ranges
	// across its partitions, like a large table's.
	rcfg := p.readerConfig(0)
	rcfg.SnapshotChunkRows, rcfg.SnapshotWorkers = 7, 2
	r := reader.New(rcfg, p.log, prometheus.NewRegistry())
	p.goRun("reader 0", func() error { return r.Run(runCtx) })
	step := func(what string) {
		t.Helper()
		p.waitFor(ctx, 60*time.Second, what, func() bool { return p.comparePayments(ctx, tbl) == "" })
		if err := p.failed(); err != nil {
			t.Fatal(err)
		}
	}
	step("the initial copy of every partition")

	// Streamed changes in every partition, and rows that move.
	insert(600, 20, "ca", "2026-02-01")
	insert(700, 20, "eu", "2026-03-01")
	q(`UPDATE %s SET amount = amount + 1 WHERE mod(id, 3) = 0`)
	q(`DELETE FROM %s WHERE mod(id, 7) = 0`)
	q(`UPDATE %s SET paid_at = paid_at + interval '1 month' WHERE id BETWEEN 1 AND 5`) // January -> February (eu)
	q(`UPDATE %s SET region = 'eu' WHERE id BETWEEN 200 AND 204`)                      // us -> eu
	q(`UPDATE %s SET paid_at = '2026-01-15' WHERE id BETWEEN 400 AND 404`)             // hashed March -> January
	step("streamed changes, rows moved between partitions")

	// What PostgreSQL does not publish through the root.
	q(`TRUNCATE %s_2026_02_eu`)
	insert(800, 5, "eu", "2026-02-01") // after the truncate: must stay
	step("a list partition truncated")
	q(`ALTER TABLE %[1]s_2026_02 DETACH PARTITION %[1]s_2026_02_us`)
	q(`ALTER TABLE %[1]s DETACH PARTITION %[1]s_2026_01`)
	step("partitions detached")
	// A table with rows attached as a partition: nothing is published for
	// its rows, which must be copied; later changes of them still win.
	q(`CREATE TABLE %[1]s_2026_05 (LIKE %[1]s INCLUDING ALL)`)
	q(`INSERT INTO %s_2026_05 SELECT g, 'eu', '2026-05-03', g FROM generate_series(1000, 1019) g`)
	q(`ALTER TABLE %[1]s ATTACH PARTITION %[1]s_2026_05 FOR VALUES FROM ('2026-05-01') TO ('2026-06-01')`)
	q(`UPDATE %s SET amount = 0 WHERE id BETWEEN 1000 AND 1004`)
	q(`DELETE FROM %s WHERE id BETWEEN 1005 AND 1007`)
	step("a partition with rows attached")
	q(`DROP TABLE %s_2026_03_h1`)
	q(`DROP TABLE %s_2026_02_other`)
	insert(900, 5, "apac", "2026-07-01")
	step("partitions dropped")
	q(`TRUNCATE %s_later`)
	step("the default partition truncated")
	insert(1100, 5, "eu", "2026-05-01")
	q(`TRUNCATE %s`)
	insert(1200, 5, "us", "2026-05-01")
	step("the whole table truncated, rows inserted after it")
}

// TestPartitionedTableRefusals: a config naming a partition, partitioning
// whose bounds cannot be matched exactly (hash on text), an existing
// publication that does not publish via the root, and a partition without
// the helpers' TRUNCATE trigger are refused before anything streams, each
// with the fix in the message.
func TestPartitionedTableRefusals(t *testing.T) {
	p := setupPipelineWith(t, []int{0}, nil, true, "pay_", paymentsCfg, paymentsDDL...)
	tbl := p.table()
	t.Cleanup(func() {
		p.exec(context.Background(), 0, "DROP TABLE IF EXISTS "+pgx.Identifier{tbl + "_2026_01"}.Sanitize())
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// run runs a reader until it returns; one that starts streaming is
	// stopped after a while (and the check that follows fails).
	run := func(cfg reader.Config) error {
		rctx, stop := context.WithTimeout(ctx, 20*time.Second)
		defer stop()
		err := reader.New(cfg, p.log, prometheus.NewRegistry()).Run(rctx)
		if rctx.Err() != nil { // it streamed: what it made goes
			p.exec(ctx, 0, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active", cfg.Slot)
			p.exec(ctx, 0, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{cfg.Publication}.Sanitize())
		}
		return err
	}

	// A partition named instead of the root.
	leafCfg := p.readerConfig(0)
	leaf := *p.tables
	leaf.Tables = append(leaf.Tables[:0:0], p.tables.Tables...)
	leaf.Tables[0].Name = tbl + "_2026_01"
	leafCfg.Tables = &leaf
	err := run(leafCfg)
	if err == nil || !strings.Contains(err.Error(), "name the partitioned table public."+tbl) {
		t.Errorf("a partition in the config: %v", err)
	}

	// Partitioning whose bounds the loader could not match exactly.
	hashed := tbl + "_hk"
	p.exec(ctx, 0, fmt.Sprintf("CREATE TABLE %s (id bigint, k text, PRIMARY KEY (id, k)) PARTITION BY HASH (k)", hashed))
	t.Cleanup(func() { p.exec(context.Background(), 0, "DROP TABLE IF EXISTS "+hashed) })
	hashCfg := p.readerConfig(0)
	hk := *p.tables
	hk.Tables = append(hk.Tables[:0:0], p.tables.Tables...)
	hk.Tables[0].Name = hashed
	hashCfg.Tables = &hk
	err = run(hashCfg)
	if err == nil || !strings.Contains(err.Error(), "only hash partitioning on one bigint, integer, smallint or uuid column") {
		t.Errorf("hash partitioning on text: %v", err)
	}

	frac := tbl + "_frac"
	p.exec(ctx, 0, fmt.Sprintf("CREATE TABLE %s (id bigint, at timestamptz, PRIMARY KEY (id, at)) PARTITION BY RANGE (at)", frac))
	p.exec(ctx, 0, fmt.Sprintf("CREATE TABLE %[1]s_1 PARTITION OF %[1]s FOR VALUES FROM ('2026-01-01') TO ('2026-01-01 00:00:00.5')", frac))
	t.Cleanup(func() { p.exec(context.Background(), 0, "DROP TABLE IF EXISTS "+frac) })
	hk.Tables[0].Name = frac
	err = run(hashCfg)
	if err == nil || !strings.Contains(err.Error(), "fraction of a second") {
		t.Errorf("a range bound with a fraction of a second: %v", err)
	}

	// A publication made beforehand without publish_via_partition_root.
	cfg := p.readerConfig(0)
	p.exec(ctx, 0, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pgx.Identifier{cfg.Publication}.Sanitize(), pgx.Identifier{tbl}.Sanitize()))
	err = run(cfg)
	if err == nil || !strings.Contains(err.Error(), "SET (publish_via_partition_root = true)") {
		t.Errorf("a publication without publish_via_partition_root: %v", err)
	}

	// A partition without the TRUNCATE trigger of the helpers.
	p.exec(ctx, 0, fmt.Sprintf("ALTER PUBLICATION %s SET (publish_via_partition_root = true)", pgx.Identifier{cfg.Publication}.Sanitize()))
	p.exec(ctx, 0, fmt.Sprintf("DROP TRIGGER tributary_partition_truncated ON %s", pgx.Identifier{tbl + "_2026_01"}.Sanitize()))
	err = run(cfg)
	if err == nil || !strings.Contains(err.Error(), "tributary.watch_partitions()") {
		t.Errorf("a partition without the truncate trigger: %v", err)
	}
}

// comparePayments compares the shard's payments with ClickHouse's live rows.
func (p *pipeline) comparePayments(ctx context.Context, tbl string) string {
	return p.compareKeyed(ctx,
		`SELECT id::text, region || ' ' || to_char(paid_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' ' || amount::text FROM `+pgx.Identifier{tbl}.Sanitize(),
		fmt.Sprintf("SELECT toString(id), concat(region, ' ', toString(paid_at), ' ', toString(amount)) FROM `%s`.`%s` FINAL WHERE _deleted = 0", p.chDB, tbl))
}

// TestPartitionTruncateAfterLoaderRestart: a loader that starts with the
// table already in ClickHouse knows it only as ClickHouse describes it,
// without PostgreSQL types. A partition truncated while no loader ran is
// then the first record it sees of the table (and, the second time, comes
// in a batch with changes of the table); its rows must still be deleted.
// Before the fix the loader stopped the table ("partition key column
// "paid_at" is not in ClickHouse"), which then kept the partition's rows
// for good.
func TestPartitionTruncateAfterLoaderRestart(t *testing.T) {
	p := setupPipelineWith(t, []int{0}, nil, true, "pay_", paymentsCfg, paymentsDDL...)
	tbl := p.table()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	t.Cleanup(func() { stop(); p.wg.Wait() })
	q := func(sql string) { p.exec(ctx, 0, fmt.Sprintf(sql, tbl)) }
	q(`INSERT INTO %s SELECT g, (ARRAY['eu', 'us', 'apac'])[1 + g %% 3], '2026-01-03'::timestamptz + g * interval '7 hours', g
		FROM generate_series(1, 400) g`) // January into March, every region
	p.startReader(runCtx, 0)
	// Each loader has a store of its own, as a restarted process has.
	run := func(name string) func() {
		store, err := chstore.Open(ctx, chstore.Options{Addr: p.stack.ClickHouseAddr, Database: p.chDB})
		if err != nil {
			t.Fatal(err)
		}
		l := loader.New(loader.Config{Brokers: p.brokers, Group: p.group(), DLQTopic: p.dlqTopic(), Tables: p.tables,
			BatchRecords: 5000, BatchWait: 50 * time.Millisecond}, store, p.log.With(slog.String("loader", name)), prometheus.NewRegistry())
		lctx, cancel := context.WithCancel(runCtx)
		done := make(chan error, 1)
		go func() { done <- l.Run(lctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("loader %s: %v", name, err)
			}
			store.Close()
		}
	}
	equal := func(what string) {
		t.Helper()
		p.waitFor(ctx, 60*time.Second, what, func() bool { return p.comparePayments(ctx, tbl) == "" })
	}
	stopLoader := run("l1")
	equal("the initial copy")
	stopLoader()

	q(`TRUNCATE %s_2026_01`)
	stopLoader = run("l2")
	equal("a partition truncated while no loader ran")
	stopLoader()

	q(`BEGIN; INSERT INTO %[1]s VALUES (1001, 'eu', '2026-03-05', 1), (1002, 'us', '2026-02-05', 2);
		TRUNCATE %[1]s_2026_02_eu; UPDATE %[1]s SET amount = amount + 1 WHERE id < 300; COMMIT`)
	stopLoader = run("l3")
	defer stopLoader()
	equal("a partition truncated among changes, while no loader ran")
}
