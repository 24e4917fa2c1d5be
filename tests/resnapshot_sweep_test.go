package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/admin"
	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/reader"
)

// setPause pauses (or resumes) table as tributaryctl pause does.
func (p *pipeline) setPause(ctx context.Context, table string, paused bool) {
	p.t.Helper()
	if err := chstore.WritePause(ctx, p.store.Conn(), p.chDB, chstore.Pause{Table: table, Paused: paused,
		Reason: "test pause", By: "tester", At: time.Now()}); err != nil {
		p.t.Fatal(err)
	}
}

// TestResnapshotSweepSurvivesKills: ClickHouse holds rows shard 0 does
// not have (written by hand, deleted unseen) in workspaces 2 and 3.
// tributaryctl resnapshot --where "workspace_id = 2" runs under writes,
// with the table paused so that the sweep after the copy mostly waits for
// the loader: tributaryctl is killed with SIGKILL once the copy is done
// (the resnapshot stored as sweeping), then the reader, mid-sweep (waiting,
// or — seen once — already deleting). Nobody asks again: the restarted
// reader sweeps again (a second attempt), and once the table is resumed,
// every row the shard does not have is deleted and workspace 2 equals the
// shard. The reader is killed once more while the sweep deletes, if the
// test sees it doing so. The reader reads ClickHouse as a read-only user.
// With the second attempt left out, this fails ("want done after at least
// two sweep attempts").
func TestResnapshotSweepSurvivesKills(t *testing.T) {
	p, ctx, runCtx := oneShardPipeline(t, 8*time.Minute)
	tbl := p.table()
	p.startLoader(runCtx, "l1")
	// The sweep reads ClickHouse as the stack's read-only user (the API's):
	// it needs no DDL and no insert.
	user, pwFile := p.stack.Env["TRIBUTARY_CLICKHOUSE_READER_USER"], p.stack.Env["TRIBUTARY_CLICKHOUSE_READER_PASSWORD_FILE"]
	if user == "" || pwFile == "" {
		t.Fatal("stack.env names no read-only ClickHouse user (TRIBUTARY_CLICKHOUSE_READER_USER, _PASSWORD_FILE)")
	}
	rd, logFile := readerProcess(t, p, 0, tablesJSON(t, p), "--snapshot-chunk-rows", "50", "--snapshot-max-rows-per-second", "400",
		"--sweep-batch", "10", "--clickhouse-user", user, "--clickhouse-password-file", pwFile)
	defer stopReaderProcess(t, rd, logFile)
	p.waitFor(ctx, 60*time.Second, "the reader streaming", func() bool {
		ts, _ := p.store.WatermarkTimes(ctx)
		return len(ts) == 1
	})
	p.seedResnapshotRows(ctx, 0, 800)
	p.waitFor(ctx, 60*time.Second, "the rows streamed", func() bool { return p.compare(ctx, tbl) == "" })
	byHand := p.staleByHand(ctx, t, 3, 2, 3)
	stale := append(byHand, append(p.hideDeletes(ctx, t, 2, 10), p.hideDeletes(ctx, t, 3, 10)...)...)
	if n := p.liveInClickHouse(ctx, t, stale); n != len(stale) {
		t.Fatalf("%d of the %d stale rows live in ClickHouse before the resnapshot: the test does not make it wrong", n, len(stale))
	}

	cl, err := admin.NewProducer(p.brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	target := p.resnapshotTarget(0)
	wctx, stopWriter := context.WithCancel(ctx)
	writeErr := make(chan error, 1)
	go func() { writeErr <- p.churn(wctx, 0) }()

	p.setPause(ctx, tbl, true)
	topic := p.tables.Tables[0].Topic
	p.waitFor(ctx, 60*time.Second, "the loader holding the paused table (its watermark still under writes)", func() bool {
		before, err := p.store.WatermarkLSN(ctx, topic, 0, 0)
		time.Sleep(1500 * time.Millisecond)
		after, err2 := p.store.WatermarkLSN(ctx, topic, 0, 0)
		return err == nil && err2 == nil && before == after
	})
	ctl := p.ctlCommand(ctx, t, "resnapshot", "--shard", "0", "--table", tbl, "--where", "workspace_id = 2", "--progress-interval", "1s")
	var ctlOut bytes.Buffer
	ctl.Stdout, ctl.Stderr = &ctlOut, &ctlOut
	if err := ctl.Start(); err != nil {
		t.Fatal(err)
	}
	var id string
	p.waitFor(ctx, 120*time.Second, "the copy done, the sweep stored as due", func() bool {
		st, err := admin.ResnapshotStatus(ctx, cl, target)
		if a := st.RunningOf(tbl); err == nil && a != nil && a.Phase == reader.PhaseSweeping {
			id = a.ID
			return true
		}
		return false
	})
	ctl.Process.Kill() //nolint:errcheck // tributaryctl killed after the copy
	ctl.Wait()         //nolint:errcheck // killed
	t.Logf("tributaryctl killed after the copy:\n%s", ctlOut.String())
	rd.kill() // the reader killed mid-sweep (waiting for the paused table)
	starts := rd.startCount()
	p.waitFor(ctx, 60*time.Second, "the reader restarted", func() bool { return rd.startCount() > starts })
	p.setPause(ctx, tbl, false)

	killedDeleting := false
	var done *reader.Resnapshot
	p.waitFor(ctx, 180*time.Second, "the resnapshot done without anyone asking again", func() bool {
		st, err := admin.ResnapshotStatus(ctx, cl, target)
		if err != nil {
			return false
		}
		a, running := st.Find(id)
		switch {
		case a != nil && !running:
			done = a
			return true
		case a != nil && a.Phase == reader.PhaseSweeping && a.Sweep != nil && a.Sweep.Checked > 0 && !killedDeleting:
			killedDeleting = true
			rd.kill()
		}
		return false
	})
	t.Logf("reader killed again while the sweep deleted: %v; the resnapshot: %s", killedDeleting, admin.ProgressLine(0, done, 0))
	if done.Phase != reader.PhaseDone || done.Sweep == nil || done.Sweep.Attempts < 2 {
		t.Fatalf("resnapshot ended %s (%s), sweep %+v: want done after at least two sweep attempts", done.Phase, done.Error, done.Sweep)
	}
	time.Sleep(time.Second) // writes after the sweep, too
	stopWriter()
	if err := <-writeErr; err != nil {
		t.Fatal(err)
	}
	p.waitFor(ctx, 90*time.Second, "workspace 2 equal to the shard, the rows the shard no longer has deleted", func() bool {
		return p.compareWhere(ctx, tbl, "workspace_id = 2") == "" && p.liveInClickHouse(ctx, t, stale) == 0
	})
	b, _ := os.ReadFile(logFile)
	if n := strings.Count(string(b), "resnapshot sweeping"); n < 2 {
		t.Errorf("the reader's log shows %d sweeps started, want one before the kill and one after", n)
	}
}

// TestResnapshotTablesAtOnce: resnapshots of two tables of one shard run
// at the same time — one of every row, asked by tributaryctl on a
// pseudo-terminal, one with a predicate (and so a sweep) — under writes; a
// second resnapshot of a table whose resnapshot runs is refused, saying
// why. Both end done, each in an epoch of its own, and ClickHouse equals
// the shard in both tables, rows hidden from the slot fixed — table B
// takes no other writes, so its sweep's deletes arrive alone. What the
// terminal received: a progress bar redrawn in place, never wider than
// the terminal, and the final line.
func TestResnapshotTablesAtOnce(t *testing.T) {
	p := setupPipelineWith(t, []int{0}, nil, true, "docs_",
		`{"topic_prefix":"e2e_%[1]s.","tables":[{"name":%[2]q,"id_column":"id","id_layout":"seed000","shard_key":"workspace_id"},`+
			`{"name":"%[2]s_b","id_column":"id","id_layout":"seed000","shard_key":"workspace_id"}]}`,
		docsDDL, strings.ReplaceAll(docsDDL, "%s", "%s_b"), "ALTER TABLE %s ALTER COLUMN body SET STORAGE EXTERNAL")
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	t.Cleanup(func() { stop(); p.wg.Wait() })
	tblA, tblB := p.table(), p.table()+"_b"
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(cctx, p.stack.ShardDSNs[0]); err == nil {
			conn.Exec(cctx, "DROP TABLE IF EXISTS "+pgx.Identifier{tblB}.Sanitize()) //nolint:errcheck // cleanup
			conn.Close(cctx)
		}
	})
	p.startLoader(runCtx, "l1")
	cfg := p.readerConfig(0)
	cfg.SnapshotChunkRows, cfg.SnapshotMaxRowsPerSecond = 50, 400
	r := reader.New(cfg, p.log, prometheus.NewRegistry())
	p.goRun("reader 0", func() error { return r.Run(runCtx) })
	p.waitFor(ctx, 60*time.Second, "the reader streaming", func() bool {
		ts, _ := p.store.WatermarkTimes(ctx)
		return len(ts) == 1
	})
	p.seedResnapshotRows(ctx, 0, 1000)
	qb, pub := pgx.Identifier{tblB}.Sanitize(), pgx.Identifier{"e2e_" + p.suffix}.Sanitize()
	p.exec(ctx, 0, "INSERT INTO "+qb+" (workspace_id, title, body) SELECT g % 5 + 1, 'b ' || g, 'b' FROM generate_series(1, 600) g")
	p.waitFor(ctx, 60*time.Second, "the rows streamed", func() bool { return p.compare(ctx, tblA) == "" && p.compare(ctx, tblB) == "" })
	// Statistics, so that the copies have an estimate (a bar, not a count).
	p.exec(ctx, 0, "ANALYZE "+pgx.Identifier{tblA}.Sanitize())
	p.hideChanges(ctx, 0)
	p.exec(ctx, 0, fmt.Sprintf(`DO $$ BEGIN ALTER PUBLICATION %[2]s DROP TABLE %[1]s;
		DELETE FROM %[1]s WHERE id IN (SELECT id FROM %[1]s WHERE workspace_id = 2 ORDER BY id LIMIT 10);
		UPDATE %[1]s SET title = 'changed unseen' WHERE workspace_id = 2; END $$`, qb, pub))
	p.exec(ctx, 0, fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", pub, qb))
	time.Sleep(time.Second) // nothing may arrive: the changes were hidden
	if p.compare(ctx, tblA) == "" || p.compareWhere(ctx, tblB, "workspace_id = 2") == "" {
		t.Fatal("ClickHouse equals the shard after the hidden changes: the test does not make it wrong")
	}

	cl, err := admin.NewProducer(p.brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	target := p.resnapshotTarget(0)
	a, _ := p.tables.ByName(tblA)
	b, _ := p.tables.ByName(tblB)
	wctx, stopWriter := context.WithCancel(ctx)
	writeErr := make(chan error, 1)
	go func() { writeErr <- p.churn(wctx, 0) }()

	// The first through tributaryctl on a terminal of 60 columns: its
	// progress bar is redrawn in place and cut to the terminal's width.
	onTerm := startOnPty(t, p.ctlCommand(ctx, t, "resnapshot", "--shard", "0", "--table", tblA, "--progress-interval", "300ms"), 60)
	var idA string
	p.waitFor(ctx, 60*time.Second, "the reader took the first request up", func() bool {
		st, err := admin.ResnapshotStatus(ctx, cl, target)
		if ra := st.RunningOf(tblA); err == nil && ra != nil {
			idA = ra.ID
			return true
		}
		return false
	})
	idB, err := admin.RequestResnapshot(ctx, cl, target, *b, "workspace_id = 2", p.log)
	if err != nil {
		t.Fatalf("a resnapshot of another table while one runs: %v", err)
	}
	if _, err := admin.RequestResnapshot(ctx, cl, target, *a, "", p.log); !errors.Is(err, admin.ErrResnapshotRefused) ||
		!strings.Contains(err.Error(), "is running") || !strings.Contains(err.Error(), "one at a time per table") {
		t.Errorf("a second resnapshot of a table whose resnapshot runs: want refused, saying one at a time per table, got %v", err)
	}
	both := false
	p.waitFor(ctx, 180*time.Second, "both resnapshots done", func() bool {
		st, err := admin.ResnapshotStatus(ctx, cl, target)
		if err != nil {
			return false
		}
		both = both || len(st.Running) == 2
		ea, ra := st.Find(idA)
		eb, rb := st.Find(idB)
		return ea != nil && !ra && eb != nil && !rb
	})
	screen, err := onTerm.wait()
	if err != nil {
		t.Fatalf("tributaryctl resnapshot on a terminal: %v\n%q", err, screen)
	}
	bars := 0
	for _, l := range screenLines(screen) {
		if strings.Contains(l, "[#") || strings.Contains(l, "[-") {
			bars++
			if n := len([]rune(l)); n >= 60 {
				t.Errorf("a progress bar of %d columns on a terminal of 60: %q", n, l)
			}
		}
	}
	if bars == 0 || !strings.Contains(screen, "\x1b[2K") || !strings.Contains(screen, "table "+tblA+" (every row): done") {
		t.Errorf("tributaryctl on a terminal: want bars redrawn in place (erase line) and the final line, got %d bars in %q", bars, screen)
	}
	t.Logf("tributaryctl on a 60-column terminal received %d bytes, %d bar draws; the last lines: %q", len(screen), bars, screen[max(0, len(screen)-400):])
	st, err := admin.ResnapshotStatus(ctx, cl, target)
	if err != nil {
		t.Fatal(err)
	}
	doneA, _ := st.Find(idA)
	doneB, _ := st.Find(idB)
	t.Logf("%s\n%s", admin.ProgressLine(0, doneA, 0), admin.ProgressLine(0, doneB, 0))
	if doneA.Phase != reader.PhaseDone || doneB.Phase != reader.PhaseDone || doneA.Epoch == doneB.Epoch {
		t.Fatalf("resnapshots ended %s (epoch %d) and %s (epoch %d): want both done, each in an epoch of its own", doneA.Phase, doneA.Epoch, doneB.Phase, doneB.Epoch)
	}
	if !both {
		t.Error("the two resnapshots were never seen running at once")
	}
	stopWriter()
	if err := <-writeErr; err != nil {
		t.Fatal(err)
	}
	p.waitFor(ctx, 90*time.Second, "both tables equal to the shard", func() bool {
		return p.compare(ctx, tblA) == "" && p.compare(ctx, tblB) == ""
	})
	if err := p.failed(); err != nil {
		t.Fatal(err)
	}
}
