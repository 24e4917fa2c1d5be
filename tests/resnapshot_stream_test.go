package tests

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/admin"
	"github.com/tributary/tributary/internal/reader"
)

// resnapshotTarget is shard's reader of p as tributaryctl reaches it.
func (p *pipeline) resnapshotTarget(shard int) admin.ResnapshotTarget {
	return admin.ResnapshotTarget{Shard: shard, DSN: p.stack.ShardDSNs[shard], Slot: fmt.Sprintf("e2e_%s_%d", p.suffix, shard),
		StateTopic: "e2e_" + p.suffix + ".state", Brokers: p.brokers}
}

// seedResnapshotRows inserts n documents on shard, every tenth with a body
// large enough to be TOASTed (so that updates keeping it send "unchanged").
func (p *pipeline) seedResnapshotRows(ctx context.Context, shard, n int) {
	p.exec(ctx, shard, fmt.Sprintf(`INSERT INTO %s (workspace_id, title, body)
		SELECT g %% 5 + 1, 'doc ' || g, CASE WHEN g %% 10 = 0 THEN repeat(md5(g::text), 200) ELSE 'b' || g END
		FROM generate_series(1, %d) g`, pgx.Identifier{p.table()}.Sanitize(), n))
}

// hideChanges changes rows of shard's table with the table out of the
// publication, so that the slot never sees it — as if the changes were
// lost: 20 rows deleted, 20 updated. ClickHouse then differs from the shard.
func (p *pipeline) hideChanges(ctx context.Context, shard int) {
	tbl, pub := pgx.Identifier{p.table()}.Sanitize(), pgx.Identifier{"e2e_" + p.suffix}.Sanitize()
	p.exec(ctx, shard, fmt.Sprintf(`DO $$ BEGIN
		ALTER PUBLICATION %[2]s DROP TABLE %[1]s;
		DELETE FROM %[1]s WHERE id IN (SELECT id FROM %[1]s ORDER BY id LIMIT 20);
		UPDATE %[1]s SET title = 'changed unseen' WHERE id IN (SELECT id FROM %[1]s ORDER BY id DESC LIMIT 20);
	END $$`, tbl, pub))
	p.exec(ctx, shard, fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", pub, tbl))
}

// churn writes to shard until ctx ends: inserts, updates, deletes and
// updates that keep a TOASTed body (sent as unchanged). The first error
// ends it and is returned.
func (p *pipeline) churn(ctx context.Context, shard int) error {
	conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[shard])
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tbl := pgx.Identifier{p.table()}.Sanitize()
	stmts := []string{
		"INSERT INTO " + tbl + " (workspace_id, title, body) VALUES (3, 'churn', repeat(md5(random()::text), 100))",
		"UPDATE " + tbl + " SET title = title || '+', body = 'rewritten' WHERE id = (SELECT id FROM " + tbl + " ORDER BY random() LIMIT 1)",
		"DELETE FROM " + tbl + " WHERE id = (SELECT id FROM " + tbl + " ORDER BY random() LIMIT 1)",
		"UPDATE " + tbl + " SET title = title || '~' WHERE id = (SELECT id FROM " + tbl + " WHERE length(body) > 3000 ORDER BY random() LIMIT 1)",
	}
	for i := 0; ctx.Err() == nil; i++ {
		if _, err := conn.Exec(ctx, stmts[rand.IntN(len(stmts))]); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// freshnessStall samples every shard's watermark age until ctx ends and
// returns the largest seen per shard.
func (p *pipeline) freshnessStall(ctx context.Context) map[uint16]time.Duration {
	worst := map[uint16]time.Duration{}
	for ctx.Err() == nil {
		if ts, err := p.store.WatermarkTimes(ctx); err == nil {
			for s, at := range ts {
				worst[s] = max(worst[s], time.Since(at))
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	return worst
}

// TestResnapshotWhileStreaming: ClickHouse has rows shard 0 deleted and
// stale versions of rows it updated (changed with the table out of the
// publication). tributaryctl's resnapshot of the table on shard 0, while
// both shards take inserts, updates, deletes and unchanged-TOAST updates,
// must end with ClickHouse equal to both shards; a second request during
// it, an unknown table, a bad predicate are refused. The watermark ages of
// both shards during the copy are reported.
func TestResnapshotWhileStreaming(t *testing.T) {
	t.Parallel()
	p := setupPipeline(t, []int{0, 1}, nil, true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	t.Cleanup(func() { stop(); p.wg.Wait() })
	p.startLoader(runCtx, "l1")
	cfg0 := p.readerConfig(0)
	cfg0.SnapshotChunkRows, cfg0.SnapshotMaxRowsPerSecond = 50, 400 // many chunks, while the writes go on
	r0 := reader.New(cfg0, p.log, prometheus.NewRegistry())
	p.goRun("reader 0", func() error { return r0.Run(runCtx) })
	p.startReader(runCtx, 1)
	tbl := p.table()

	p.waitFor(ctx, 60*time.Second, "both readers streaming", func() bool {
		ts, _ := p.store.WatermarkTimes(ctx)
		return len(ts) == 2
	})
	p.seedResnapshotRows(ctx, 0, 1200)
	p.seedResnapshotRows(ctx, 1, 100)
	p.waitFor(ctx, 60*time.Second, "the rows streamed", func() bool { return p.compare(ctx, tbl) == "" })
	p.hideChanges(ctx, 0)
	time.Sleep(time.Second) // nothing may arrive: the changes were hidden
	if d := p.compare(ctx, tbl); d == "" {
		t.Fatal("ClickHouse equals the shard after the hidden changes: the test does not make it wrong")
	}

	cl, err := admin.NewProducer(p.brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	log := p.log.With(slog.String("tributaryctl", "resnapshot"))
	target := p.resnapshotTarget(0)
	table, _ := p.tables.ByName(tbl)

	// Bad input, refused before anything starts.
	conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, where := range []string{"no_such_column = 1", "workspace_id", "true); DROP TABLE x; --"} {
		err := admin.CheckResnapshot(ctx, conn, *table, where)
		if !errors.Is(err, admin.ErrResnapshotRefused) || !strings.Contains(err.Error(), "not a valid predicate") {
			t.Errorf("--where %q: want refused as not a valid predicate, got %v", where, err)
		}
	}
	missing := *table
	missing.Name = "no_such_table_" + p.suffix
	if err := admin.CheckResnapshot(ctx, conn, missing, ""); !errors.Is(err, admin.ErrResnapshotRefused) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("unknown table: want refused, got %v", err)
	}

	wctx, stopWriters := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var writeErrs []error
	for _, s := range []int{0, 1} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.churn(wctx, s); err != nil {
				mu.Lock()
				writeErrs = append(writeErrs, fmt.Errorf("shard %d writer: %w", s, err))
				mu.Unlock()
			}
		}()
	}
	// The same writes without a resnapshot first: the ages to compare with.
	bctx, stopBaseline := context.WithTimeout(ctx, 10*time.Second)
	baseline := p.freshnessStall(bctx)
	stopBaseline()
	sctx, stopSampling := context.WithCancel(ctx)
	stalls := make(chan map[uint16]time.Duration, 1)
	go func() { stalls <- p.freshnessStall(sctx) }()

	id, err := admin.RequestResnapshot(ctx, cl, target, *table, "", log)
	if err != nil {
		t.Fatal(err)
	}
	p.waitFor(ctx, 60*time.Second, "the reader took the request up", func() bool {
		st, err := admin.ResnapshotStatus(ctx, cl, target)
		return err == nil && st.Active != nil && st.Active.ID == id
	})
	if _, err := admin.RequestResnapshot(ctx, cl, target, *table, "", log); !errors.Is(err, admin.ErrResnapshotRefused) ||
		!strings.Contains(err.Error(), "is running") {
		t.Errorf("a second resnapshot while one runs: want refused, got %v", err)
	}
	done, err := admin.WaitResnapshot(ctx, cl, target, id, testWriter{t}, time.Second, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	stopSampling()
	worst := <-stalls
	if done.Phase != reader.PhaseDone || done.Rows() < 1000 {
		t.Fatalf("resnapshot ended %s with %d rows, want done with the table's rows", done.Phase, done.Rows())
	}
	time.Sleep(time.Second) // writes after the copy, too
	stopWriters()
	wg.Wait()
	if len(writeErrs) > 0 {
		t.Fatal(writeErrs)
	}
	p.waitFor(ctx, 90*time.Second, "ClickHouse equal to both shards after the resnapshot", func() bool { return p.compare(ctx, tbl) == "" })
	t.Logf("resnapshot of %d rows took %s; max watermark age during it: shard 0 %s, shard 1 %s (same writes, 10 s without a resnapshot: %s, %s)",
		done.Rows(), done.Finished.Sub(done.Started).Round(time.Millisecond), worst[0].Round(time.Millisecond), worst[1].Round(time.Millisecond),
		baseline[0].Round(time.Millisecond), baseline[1].Round(time.Millisecond))
	if err := p.failed(); err != nil {
		t.Fatal(err)
	}
}

// TestResnapshotKilledMidCopyResumes: the reader (a process) is killed
// with SIGKILL while a resnapshot copies, under writes; restarted, it
// continues the copy from its stored progress and ClickHouse ends equal to
// the shard, rows deleted while the slot was not looking included. The
// predicate form is checked too: a resnapshot of some rows only.
func TestResnapshotKilledMidCopyResumes(t *testing.T) {
	p, ctx, runCtx := oneShardPipeline(t, 5*time.Minute)
	tbl := p.table()
	p.startLoader(runCtx, "l1")
	rd, logFile := readerProcess(t, p, 0, tablesJSON(t, p), "--snapshot-chunk-rows", "50", "--snapshot-max-rows-per-second", "300")
	defer stopReaderProcess(t, rd, logFile)
	p.waitFor(ctx, 60*time.Second, "the reader streaming", func() bool {
		ts, _ := p.store.WatermarkTimes(ctx)
		return len(ts) == 1
	})
	p.seedResnapshotRows(ctx, 0, 1500)
	p.waitFor(ctx, 60*time.Second, "the rows streamed", func() bool { return p.compare(ctx, tbl) == "" })
	p.hideChanges(ctx, 0)

	cl, err := admin.NewProducer(p.brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	target := p.resnapshotTarget(0)
	table, _ := p.tables.ByName(tbl)
	wctx, stopWriter := context.WithCancel(ctx)
	writeErr := make(chan error, 1)
	go func() { writeErr <- p.churn(wctx, 0) }()

	id, err := admin.RequestResnapshot(ctx, cl, target, *table, "", p.log)
	if err != nil {
		t.Fatal(err)
	}
	var at int64
	p.waitFor(ctx, 60*time.Second, "the copy under way", func() bool {
		st, err := admin.ResnapshotStatus(ctx, cl, target)
		if err == nil && st.Active != nil && st.Active.ID == id && st.Active.Rows() >= 200 {
			at = st.Active.Rows()
			return true
		}
		return false
	})
	rd.kill()
	t.Logf("reader killed with %d rows copied", at)
	done, err := admin.WaitResnapshot(ctx, cl, target, id, testWriter{t}, time.Second, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if done.Phase != reader.PhaseDone {
		t.Fatalf("resnapshot ended %s: %s", done.Phase, done.Error)
	}
	stopWriter()
	if err := <-writeErr; err != nil {
		t.Fatal(err)
	}
	p.waitFor(ctx, 90*time.Second, "ClickHouse equal to the shard after the resumed resnapshot", func() bool { return p.compare(ctx, tbl) == "" })
	b, _ := os.ReadFile(logFile)
	if !strings.Contains(string(b), "resnapshot: resuming the copy from its stored progress") {
		t.Error("the restarted reader did not resume the copy (no \"resnapshot: resuming\" in its log)")
	}
	if rd.startCount() < 2 {
		t.Errorf("the reader started %d times, want a restart after the kill", rd.startCount())
	}

	// Some rows only: rows hidden from the slot that match are fixed, an
	// update hidden on a row that does not match stays as it was.
	tblq := pgx.Identifier{tbl}.Sanitize()
	pub := pgx.Identifier{"e2e_" + p.suffix}.Sanitize()
	p.exec(ctx, 0, fmt.Sprintf(`DO $$ BEGIN ALTER PUBLICATION %[2]s DROP TABLE %[1]s;
		UPDATE %[1]s SET title = 'hidden ' || workspace_id; END $$`, tblq, pub))
	p.exec(ctx, 0, fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", pub, tblq))
	id, err = admin.RequestResnapshot(ctx, cl, target, *table, "workspace_id = 2", p.log)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.WaitResnapshot(ctx, cl, target, id, testWriter{t}, time.Second, time.Minute); err != nil {
		t.Fatal(err)
	}
	p.waitFor(ctx, 60*time.Second, "workspace 2's rows fixed", func() bool {
		var n uint64
		err := p.store.Conn().QueryRow(ctx, fmt.Sprintf("SELECT count() FROM `%s`.`%s` FINAL WHERE _deleted = 0 AND workspace_id = 2 AND title = 'hidden 2'", p.chDB, tbl)).Scan(&n)
		return err == nil && n > 0 && p.compareWhere(ctx, tbl, "workspace_id = 2") == ""
	})
	var stale uint64
	if err := p.store.Conn().QueryRow(ctx, fmt.Sprintf("SELECT count() FROM `%s`.`%s` FINAL WHERE _deleted = 0 AND workspace_id = 3 AND title = 'hidden 3'", p.chDB, tbl)).Scan(&stale); err != nil {
		t.Fatal(err)
	}
	if stale != 0 {
		t.Errorf("%d rows of workspace 3 were copied by a resnapshot of workspace_id = 2", stale)
	}
}

// tablesJSON writes p's table configuration as cdc-reader reads it.
func tablesJSON(t *testing.T, p *pipeline) string {
	t.Helper()
	return fmt.Sprintf(`{"topic_prefix":"e2e_%s.","tables":[{"name":%q,"id_column":"id","id_layout":"seed000","shard_key":"workspace_id"}]}`,
		p.suffix, p.table())
}

// compareWhere is compare restricted to the rows matching a predicate on
// workspace_id ("workspace_id = N"), on the shard and in ClickHouse.
func (p *pipeline) compareWhere(ctx context.Context, tbl, where string) string {
	return p.compareKeyed(ctx,
		"SELECT id::text, title FROM "+pgx.Identifier{tbl}.Sanitize()+" WHERE "+where,
		fmt.Sprintf("SELECT toString(id), title FROM `%s`.`%s` FINAL WHERE _deleted = 0 AND %s", p.chDB, tbl, where))
}

// TestResnapshotCommandRefuses: tributaryctl resnapshot refuses an
// unknown shard and an unknown table before connecting anywhere, naming
// what is known.
func TestResnapshotCommandRefuses(t *testing.T) {
	st := loadStack(t)
	bin := ctlBinary(t)
	dir := t.TempDir()
	tables := filepath.Join(dir, "tables.json")
	fleet := filepath.Join(dir, "fleet.json")
	os.WriteFile(tables, []byte(`{"tables":[{"name":"docs","id_column":"id","id_layout":"seed000","shard_key":"workspace_id"}]}`), 0o644) //nolint:errcheck
	os.WriteFile(fleet, []byte(`{"shards":[{"shard":0,"dsn_env":"X_DSN"}]}`), 0o644)                                                      //nolint:errcheck
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--shard", "7", "--table", "docs"}, "shard 7 is not in the fleet"},
		{[]string{"--shard", "0", "--table", "nope"}, `no such table in`},
		{[]string{"--table", "docs"}, "--shard is required"},
	} {
		args := append([]string{"resnapshot", "--kafka-brokers", strings.Join(st.KafkaBrokers, ","), "--tables", tables, "--fleet", fleet}, c.args...)
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "X_DSN="+st.ShardDSNs[0])
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("tributaryctl %s: want a refusal saying %q, got %v:\n%s", strings.Join(c.args, " "), c.want, err, out)
		}
	}
}

var ctlOnce sync.Once

// ctlBinary builds tributaryctl next to the other binaries.
func ctlBinary(t *testing.T) string {
	t.Helper()
	dir := binaries(t)
	var err error
	var out []byte
	ctlOnce.Do(func() { out, err = exec.Command("go", "build", "-o", dir+"/", "../cmd/tributaryctl").CombinedOutput() })
	if err != nil {
		t.Fatalf("go build tributaryctl: %v\n%s", err, out)
	}
	return filepath.Join(dir, "tributaryctl")
}

// TestResnapshotTruncateStartsOver: a TRUNCATE of the table in the middle
// of its resnapshot starts the copy over in a new epoch (a chunk read
// before the truncate may reach ClickHouse after it); ClickHouse must end
// equal to the shard — the truncated rows gone, the later ones there.
func TestResnapshotTruncateStartsOver(t *testing.T) {
	p, ctx, runCtx := oneShardPipeline(t, 4*time.Minute)
	tbl := p.table()
	p.startLoader(runCtx, "l1")
	cfg := p.readerConfig(0)
	cfg.SnapshotChunkRows, cfg.SnapshotMaxRowsPerSecond = 50, 200
	r := reader.New(cfg, p.log, prometheus.NewRegistry())
	p.goRun("reader 0", func() error { return r.Run(runCtx) })
	p.waitFor(ctx, 60*time.Second, "the reader streaming", func() bool {
		ts, _ := p.store.WatermarkTimes(ctx)
		return len(ts) == 1
	})
	p.seedResnapshotRows(ctx, 0, 1000)
	p.waitFor(ctx, 60*time.Second, "the rows streamed", func() bool { return p.compare(ctx, tbl) == "" })

	cl, err := admin.NewProducer(p.brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	target := p.resnapshotTarget(0)
	table, _ := p.tables.ByName(tbl)
	id, err := admin.RequestResnapshot(ctx, cl, target, *table, "", p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.waitFor(ctx, 60*time.Second, "the copy under way", func() bool {
		st, err := admin.ResnapshotStatus(ctx, cl, target)
		return err == nil && st.Active != nil && st.Active.ID == id && st.Active.Rows() >= 100
	})
	p.exec(ctx, 0, "TRUNCATE "+pgx.Identifier{tbl}.Sanitize())
	p.seedResnapshotRows(ctx, 0, 30)
	done, err := admin.WaitResnapshot(ctx, cl, target, id, testWriter{t}, time.Second, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if done.Phase != reader.PhaseDone || done.Restarts != 1 {
		t.Fatalf("resnapshot ended %s after %d restarts, want done after 1 (the truncate)", done.Phase, done.Restarts)
	}
	p.waitFor(ctx, 60*time.Second, "ClickHouse equal to the shard", func() bool { return p.compare(ctx, tbl) == "" })
	if err := p.failed(); err != nil {
		t.Fatal(err)
	}
}
