package tests

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/loader"
	"github.com/tributary/tributary/internal/reader"
)

// TestRunbookTableStoppedRecovery follows docs/runbook.md's procedure for
// TributaryTableStopped: a column's type changes at the source, the loader
// stops the table; an operator changes the ClickHouse column to the type
// the new source type maps to and restarts the loader, which then applies
// the paused changes — the one that stopped the table included — and
// nothing written before is lost.
func TestRunbookTableStoppedRecovery(t *testing.T) {
	p := setupPipeline(t, []int{0}, nil, true)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	runCtx, runCancel := context.WithCancel(context.Background())
	t.Cleanup(func() { runCancel(); p.wg.Wait() })
	p.startReader(runCtx, 0)

	// A loader the test can stop on its own; like a restarted process, each
	// has its own store (the store caches table layouts).
	startLoader := func(name string) (*prometheus.Registry, func()) {
		reg := prometheus.NewRegistry()
		store, err := chstore.Open(ctx, chstore.Options{Addr: p.stack.ClickHouseAddr, Database: p.chDB})
		if err != nil {
			t.Fatal(err)
		}
		l := loader.New(loader.Config{
			Brokers: p.brokers, Group: p.group(), DLQTopic: p.dlqTopic(), Tables: p.tables,
			BatchRecords: 5000, BatchWait: 50 * time.Millisecond,
			DuplicateGrace: 3 * time.Second, AnomalyInterval: 200 * time.Millisecond,
		}, store, p.log.With(slog.String("loader", name)), reg)
		lctx, lcancel := context.WithCancel(runCtx)
		done := make(chan error, 1)
		go func() { done <- l.Run(lctx) }()
		return reg, func() {
			lcancel()
			if err := <-done; err != nil {
				t.Errorf("loader %s returned: %v", name, err)
			}
			store.Close()
		}
	}
	reg, stop := startLoader("before")
	stopped := func(reg *prometheus.Registry) float64 {
		v, _ := metricOf(t, reg, "tributary_loader_table_stopped", map[string]string{"table": p.table()})
		return v
	}

	tbl := pgx.Identifier{p.table()}.Sanitize()
	a := p.insert(ctx, 0, 41, "before", "body a")
	p.waitDoc(ctx, a, "the row written before the change", func(s int, d docAnswer) bool {
		return s == http.StatusOK && len(d.Copies) == 1 && d.Copies[0].Row["workspace_id"] == "41"
	})

	// The incompatible change: bigint (Int64) becomes text (String).
	p.exec(ctx, 0, fmt.Sprintf("ALTER TABLE %s ALTER COLUMN workspace_id TYPE text", tbl))
	d := p.queryID(ctx, 0, fmt.Sprintf("INSERT INTO %s (workspace_id, title, body) VALUES ('ws-d', 'after', 'body d') RETURNING id", tbl))
	p.waitFor(ctx, 60*time.Second, "tributary_loader_table_stopped = 1", func() bool { return stopped(reg) == 1 })
	if s, _ := p.getDoc(ctx, d); s != http.StatusNotFound {
		t.Fatalf("row %d written after the type change is visible while the table is stopped (status %d)", d, s)
	}
	stop()

	// The runbook's fix: the ClickHouse column takes the new source type's
	// mapping (text → String; a non-key column is Nullable), then the
	// loaders restart.
	if err := p.store.Conn().Exec(ctx, fmt.Sprintf("ALTER TABLE `%s`.`%s` MODIFY COLUMN workspace_id Nullable(String)", p.chDB, p.table())); err != nil {
		t.Fatalf("the runbook's ALTER ... MODIFY COLUMN: %v", err)
	}
	reg, stop = startLoader("after")
	defer stop()
	e := p.queryID(ctx, 0, fmt.Sprintf("INSERT INTO %s (workspace_id, title, body) VALUES ('ws-e', 'later', 'body e') RETURNING id", tbl))
	for id, ws := range map[int64]string{d: "ws-d", e: "ws-e"} {
		p.waitDoc(ctx, id, "a row written after the change, once fixed", func(s int, doc docAnswer) bool {
			return s == http.StatusOK && len(doc.Copies) == 1 && doc.Copies[0].Row["workspace_id"] == ws
		})
	}
	if s, doc := p.getDoc(ctx, a); s != http.StatusOK || len(doc.Copies) != 1 || doc.Copies[0].Row["workspace_id"] != "41" || doc.Copies[0].Row["title"] != "before" {
		t.Errorf("row %d written before the change: status %d, %+v; want workspace_id \"41\", title \"before\"", a, s, doc)
	}
	if v := stopped(reg); v != 0 {
		t.Errorf("tributary_loader_table_stopped = %v after the fix, want 0", v)
	}
	if diff := p.compare(ctx, p.table()); diff != "" {
		t.Errorf("ClickHouse differs from the shard after the fix:\n%s", diff)
	}
	if err := p.failed(); err != nil {
		t.Fatalf("a component failed: %v", err)
	}
}

// TestRunbookUnroutedRecovery follows docs/runbook.md's procedure for
// TributaryUnroutedChanges: a configured table is renamed at the source
// while the pipeline runs. The publication follows the table, its name does
// not: the reader counts the renamed relation's changes as unrouted (what
// the alert reads) and ClickHouse falls behind the shard; a restarted
// reader refuses to start. The fix — rename it back, drop the slot, start
// the reader — copies the shard again, and ClickHouse equals the shard.
func TestRunbookUnroutedRecovery(t *testing.T) {
	p := setupPipeline(t, []int{0}, nil, true)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	runCtx, runCancel := context.WithCancel(context.Background())
	t.Cleanup(func() { runCancel(); p.wg.Wait() })
	p.startLoader(runCtx, "l1")
	r1Ctx, stopR1 := context.WithCancel(runCtx)
	reg := p.startMeteredReader(r1Ctx, 0)

	tbl := p.table()
	var ids []int64
	for i := 0; i < 10; i++ {
		ids = append(ids, p.insert(ctx, 0, int64(i%3+1), fmt.Sprintf("doc %d", i), "b"))
	}
	p.waitFor(ctx, 30*time.Second, "the rows before the rename applied", func() bool { return p.compare(ctx, tbl) == "" })

	renamed := tbl + "_renamed"
	p.exec(ctx, 0, fmt.Sprintf("ALTER TABLE %s RENAME TO %s", pgx.Identifier{tbl}.Sanitize(), pgx.Identifier{renamed}.Sanitize()))
	p.exec(ctx, 0, fmt.Sprintf("UPDATE %s SET title = 'changed after the rename' WHERE id = $1", pgx.Identifier{renamed}.Sanitize()), ids[0])
	p.exec(ctx, 0, fmt.Sprintf("DELETE FROM %s WHERE id = $1", pgx.Identifier{renamed}.Sanitize()), ids[1])
	p.exec(ctx, 0, fmt.Sprintf("INSERT INTO %s (workspace_id, title, body) VALUES (7, 'inserted after the rename', 'b')", pgx.Identifier{renamed}.Sanitize()))
	unrouted := func() float64 {
		v, _ := metricOf(t, reg, "tributary_reader_unrouted_changes_total", map[string]string{"shard": "0", "relation": "public." + renamed})
		return v
	}
	p.waitFor(ctx, 30*time.Second, "the renamed relation's 3 changes counted as unrouted", func() bool { return unrouted() == 3 })
	stopR1()
	slot := p.waitSlotInactive(ctx, 0)

	// A restarted reader refuses the configuration instead of streaming on.
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	err := reader.New(p.readerConfig(0), p.log, prometheus.NewRegistry()).Run(rctx)
	rcancel()
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("reader started on a shard whose configured table was renamed: %v", err)
	}
	t.Logf("the restarted reader refused: %v", err)

	// The runbook's fix.
	p.exec(ctx, 0, fmt.Sprintf("ALTER TABLE %s RENAME TO %s", pgx.Identifier{renamed}.Sanitize(), pgx.Identifier{tbl}.Sanitize()))
	if d := p.compare(ctx, tbl); d == "" {
		t.Fatal("ClickHouse equals the shard before the fix: the skipped changes were not missing")
	}
	p.exec(ctx, 0, "SELECT pg_drop_replication_slot($1)", slot)
	p.startReader(runCtx, 0)
	p.waitFor(ctx, 60*time.Second, "ClickHouse equal to the shard after the new copy", func() bool { return p.compare(ctx, tbl) == "" })
	if err := p.failed(); err != nil {
		t.Fatal(err)
	}
}
