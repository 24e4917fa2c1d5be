package tests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/admin"
	"github.com/tributary/tributary/internal/reader"
)

// staleByHand writes, straight into ClickHouse, a copy of n live rows of
// each of workspaces (shard 0) under the negated id: rows the shard never
// had, versioned as their originals. It returns the ids of every such row
// live in those workspaces (a row whose negation was written before is
// not taken again).
func (p *pipeline) staleByHand(ctx context.Context, t *testing.T, n int, workspaces ...int) []string {
	t.Helper()
	tbl := fmt.Sprintf("`%s`.`%s`", p.chDB, p.table())
	var ws []string
	for _, w := range workspaces {
		ws = append(ws, fmt.Sprint(w))
	}
	q := fmt.Sprintf(`INSERT INTO %[1]s (id, workspace_id, title, body, created_at, _shard, _version, _deleted, _commit_lsn, _commit_ts)
		SELECT -id, workspace_id, 'stale by hand', body, created_at, _shard, _version, 0, _commit_lsn, _commit_ts
		FROM %[1]s FINAL WHERE _shard = 0 AND _deleted = 0 AND id > 0 AND workspace_id IN (%[2]s) AND -id NOT IN (SELECT id FROM %[1]s)
		LIMIT %[3]d BY workspace_id`, tbl, strings.Join(ws, ", "), n)
	if err := p.store.Conn().Exec(ctx, q); err != nil {
		t.Fatal(err)
	}
	rows, err := p.store.Conn().Query(ctx, fmt.Sprintf("SELECT toString(id) FROM %s FINAL WHERE _deleted = 0 AND id < 0 AND workspace_id IN (%s)", tbl, strings.Join(ws, ", ")))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if len(ids) != n*len(workspaces) {
		t.Fatalf("wrote %d stale rows by hand, want %d", len(ids), n*len(workspaces))
	}
	return ids
}

// hideDeletes deletes n rows of workspace ws on shard 0 with the table out
// of the publication (the slot never sees them) and returns their ids.
func (p *pipeline) hideDeletes(ctx context.Context, t *testing.T, ws, n int) []string {
	t.Helper()
	tbl, pub := pgx.Identifier{p.table()}.Sanitize(), pgx.Identifier{"e2e_" + p.suffix}.Sanitize()
	conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // committed below
	if _, err := tx.Exec(ctx, fmt.Sprintf("ALTER PUBLICATION %s DROP TABLE %s", pub, tbl)); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, fmt.Sprintf("DELETE FROM %[1]s WHERE id IN (SELECT id FROM %[1]s WHERE workspace_id = $1 ORDER BY id LIMIT $2) RETURNING id::text", tbl), ws, n)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(ids) != n {
		t.Fatalf("hidden deletes: %d of %d, %v", len(ids), n, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	p.exec(ctx, 0, fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", pub, tbl))
	return ids
}

// liveInClickHouse counts which of ids ClickHouse holds live on shard 0.
func (p *pipeline) liveInClickHouse(ctx context.Context, t *testing.T, ids []string) int {
	t.Helper()
	var n uint64
	q := fmt.Sprintf("SELECT count() FROM `%s`.`%s` FINAL WHERE _deleted = 0 AND _shard = 0 AND has(splitByChar(',', ?), toString(id))", p.chDB, p.table())
	if err := p.store.Conn().QueryRow(ctx, q, strings.Join(ids, ",")).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return int(n)
}

// TestResnapshotWhereDeletes: ClickHouse holds rows shard 0 does not have
// — written into ClickHouse by hand, and deleted at the source with the
// table out of the publication — in workspace 2 and in workspace 3, and
// rows of workspace 3 updated unseen. tributaryctl resnapshot --where
// "workspace_id = 2", while the shard takes inserts, updates and deletes,
// must leave workspace 2 equal to the shard and delete every row the shard
// does not have (a deleted row has no values left to test the predicate
// on), and copy nothing outside the predicate: workspace 3's unseen
// updates stay. A predicate PostgreSQL refuses is refused first. A
// resnapshot of every row then fixes everything, stale rows written by
// hand included.
func TestResnapshotWhereDeletes(t *testing.T) {
	p, ctx, runCtx := oneShardPipeline(t, 8*time.Minute)
	tbl := p.table()
	p.startLoader(runCtx, "l1")
	cfg := p.readerConfig(0)
	cfg.SnapshotChunkRows, cfg.SnapshotMaxRowsPerSecond = 50, 400 // many chunks, while the writes go on
	r := reader.New(cfg, p.log, prometheus.NewRegistry())
	p.goRun("reader 0", func() error { return r.Run(runCtx) })
	p.waitFor(ctx, 60*time.Second, "the reader streaming", func() bool {
		ts, _ := p.store.WatermarkTimes(ctx)
		return len(ts) == 1
	})
	p.seedResnapshotRows(ctx, 0, 800)
	p.waitFor(ctx, 60*time.Second, "the rows streamed", func() bool { return p.compare(ctx, tbl) == "" })

	byHand := p.staleByHand(ctx, t, 3, 2, 3)
	hidden := append(p.hideDeletes(ctx, t, 2, 10), p.hideDeletes(ctx, t, 3, 10)...)
	tblq, pub := pgx.Identifier{tbl}.Sanitize(), pgx.Identifier{"e2e_" + p.suffix}.Sanitize()
	p.exec(ctx, 0, fmt.Sprintf(`DO $$ BEGIN ALTER PUBLICATION %[2]s DROP TABLE %[1]s;
		UPDATE %[1]s SET title = 'hidden ' || workspace_id WHERE workspace_id IN (2, 3); END $$`, tblq, pub))
	p.exec(ctx, 0, fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", pub, tblq))
	time.Sleep(time.Second) // nothing may arrive: the changes were hidden
	if n := p.liveInClickHouse(ctx, t, append(byHand, hidden...)); n != len(byHand)+len(hidden) {
		t.Fatalf("%d of the %d stale rows live in ClickHouse before the resnapshot: the test does not make it wrong", n, len(byHand)+len(hidden))
	}

	// A predicate PostgreSQL refuses is refused before anything starts.
	if out, err := p.ctl(ctx, t, "resnapshot", "--shard", "0", "--table", tbl, "--where", "no_such_column = 2"); err == nil ||
		!strings.Contains(out, "not a valid predicate") || !strings.Contains(out, "no_such_column") {
		t.Errorf("tributaryctl resnapshot with a bad --where: want refused, naming the predicate and PostgreSQL's reason, got %v:\n%s", err, out)
	}

	wctx, stopWriter := context.WithCancel(ctx)
	writeErr := make(chan error, 1)
	go func() { writeErr <- p.churn(wctx, 0) }()
	out, err := p.ctl(ctx, t, "resnapshot", "--shard", "0", "--table", tbl, "--where", "workspace_id = 2", "--progress-interval", "1s")
	if err != nil {
		t.Fatalf("tributaryctl resnapshot --where: %v\n%s", err, out)
	}
	t.Logf("tributaryctl resnapshot --where:\n%s", out)
	if !strings.Contains(out, "sweep shard 0 table "+tbl) || !strings.Contains(out, "deleted") {
		t.Errorf("tributaryctl resnapshot --where printed no sweep result")
	}
	time.Sleep(time.Second) // writes after the copy, too
	stopWriter()
	if err := <-writeErr; err != nil {
		t.Fatal(err)
	}
	p.waitFor(ctx, 90*time.Second, "workspace 2 equal to the shard, the rows the shard no longer has deleted", func() bool {
		return p.compareWhere(ctx, tbl, "workspace_id = 2") == "" && p.liveInClickHouse(ctx, t, append(byHand, hidden...)) == 0
	})
	var stale uint64
	if err := p.store.Conn().QueryRow(ctx, fmt.Sprintf("SELECT count() FROM `%s`.`%s` FINAL WHERE _deleted = 0 AND workspace_id = 3 AND title = 'hidden 3'", p.chDB, tbl)).Scan(&stale); err != nil {
		t.Fatal(err)
	}
	if stale != 0 {
		t.Errorf("%d rows of workspace 3 were copied by a resnapshot of workspace_id = 2", stale)
	}

	// Every row: stale rows by hand again, and the unseen updates.
	byHand = p.staleByHand(ctx, t, 2, 3, 4)
	cl, err := admin.NewProducer(p.brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	table, _ := p.tables.ByName(tbl)
	target := p.resnapshotTarget(0)
	id, err := admin.RequestResnapshot(ctx, cl, target, *table, "", p.log)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.WaitResnapshot(ctx, cl, target, id, testWriter{t}, time.Second, time.Minute); err != nil {
		t.Fatal(err)
	}
	p.waitFor(ctx, 90*time.Second, "ClickHouse equal to the shard after a resnapshot of every row", func() bool { return p.compare(ctx, tbl) == "" })
	if n := p.liveInClickHouse(ctx, t, byHand); n != 0 {
		t.Errorf("%d rows written by hand live after a resnapshot of every row", n)
	}
	if err := p.failed(); err != nil {
		t.Fatal(err)
	}
}

// ctl runs tributaryctl with p's Kafka, ClickHouse, table config and a
// fleet of p's shards, and the names p's readers run with; it returns the
// combined output.
func (p *pipeline) ctl(ctx context.Context, t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := p.ctlCommand(ctx, t, args...).CombinedOutput()
	return string(out), err
}

// ctlCommand is the tributaryctl command ctl runs, not started.
func (p *pipeline) ctlCommand(ctx context.Context, t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	dir := t.TempDir()
	tables, fleet := filepath.Join(dir, "tables.json"), filepath.Join(dir, "fleet.json")
	var shards, env []string
	for _, s := range p.shards {
		shards = append(shards, fmt.Sprintf(`{"shard":%d,"dsn_env":"CTL_SHARD_%d_DSN"}`, s, s))
		env = append(env, fmt.Sprintf("CTL_SHARD_%d_DSN=%s", s, p.stack.ShardDSNs[s]))
	}
	if err := os.WriteFile(tables, []byte(tablesJSON(t, p)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fleet, []byte(`{"shards":[`+strings.Join(shards, ",")+`]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	full := append(args, "--kafka-brokers", strings.Join(p.brokers, ","), "--tables", tables, "--fleet", fleet,
		"--slot", "e2e_"+p.suffix+"_{shard}", "--state-topic", "e2e_"+p.suffix+".state",
		"--clickhouse-addr", p.stack.ClickHouseAddr, "--clickhouse-db", p.chDB)
	cmd := exec.CommandContext(ctx, ctlBinary(t), full...)
	cmd.Env = append(os.Environ(), env...)
	return cmd
}
