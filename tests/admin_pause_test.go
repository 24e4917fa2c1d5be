package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary/tributary/internal/chstore"
)

// TestAdminPauseResume: a paused table is no longer applied — an insert,
// an update and a delete made meanwhile stay out of ClickHouse, /v1/shards
// lists the table as stopped with the pause's reason — while the readers
// keep their slots confirmed past the writes. A loader started during the
// pause does not apply it either. Resumed, every change of the pause
// arrives, in order.
func TestAdminPauseResume(t *testing.T) {
	p := setupPipeline(t, []int{0, 1}, nil, true)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	for _, s := range p.shards {
		p.startReader(runCtx, s)
	}
	l1Ctx, stopL1 := context.WithCancel(runCtx)
	p.startLoader(l1Ctx, "l1")

	kept := p.insert(ctx, 0, 7, "kept", "k")
	gone := p.insert(ctx, 1, 8, "to delete", "d")
	for _, id := range []int64{kept, gone} {
		p.waitDoc(ctx, id, "a row before the pause", func(s int, _ docAnswer) bool { return s == http.StatusOK })
	}
	setPause := func(paused bool) {
		t.Helper()
		if err := chstore.WritePause(ctx, p.store.Conn(), p.chDB, chstore.Pause{Table: p.table(), Paused: paused,
			Reason: "test pause", By: "tester", At: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	// stoppedTables is /v1/shards' stopped tables, "table: reason" each.
	stoppedTables := func() string {
		_, _, body := apiGet(ctx, t, p.api.URL, "/v1/shards", "")
		var a struct {
			Stopped []struct{ Table, Reason string } `json:"stopped_tables"`
		}
		if err := json.Unmarshal(body, &a); err != nil {
			t.Fatalf("/v1/shards: %v: %s", err, body)
		}
		var out []string
		for _, s := range a.Stopped {
			out = append(out, s.Table+": "+s.Reason)
		}
		return strings.Join(out, "\n")
	}

	setPause(true)
	p.waitFor(ctx, 30*time.Second, "/v1/shards to list the paused table", func() bool {
		s := stoppedTables()
		return strings.HasPrefix(s, p.table()+": paused by tester") && strings.Contains(s, "test pause")
	})
	tbl := pgx.Identifier{p.table()}.Sanitize()
	added := p.insert(ctx, 1, 8, "added while paused", "a")
	p.exec(ctx, 0, "UPDATE "+tbl+" SET title = 'edited while paused' WHERE id = $1", kept)
	p.exec(ctx, 1, "DELETE FROM "+tbl+" WHERE id = $1", gone)
	for _, s := range p.shards {
		waitSlotConfirmed(ctx, t, p, s)
	}
	// The readers have confirmed the changes; the loader holds them.
	time.Sleep(3 * time.Second)
	if n := p.chCount(ctx, "SELECT count() FROM %[1]s.%[2]s WHERE id = ?", added); n != 0 {
		t.Errorf("the insert made during the pause is in ClickHouse (%d rows)", n)
	}
	if s, d := p.getDoc(ctx, kept); s != http.StatusOK || len(d.Copies) != 1 || d.Copies[0].Row["title"] != "kept" {
		t.Errorf("during the pause id %d = %d %+v, want the title from before it", kept, s, d)
	}

	// A loader that starts during the pause does not apply the table.
	stopL1()
	time.Sleep(500 * time.Millisecond)
	p.startLoader(runCtx, "l2")
	later := p.insert(ctx, 0, 7, "added after the loader restart", "l")
	waitSlotConfirmed(ctx, t, p, 0)
	time.Sleep(5 * time.Second)
	if n := p.chCount(ctx, "SELECT count() FROM %[1]s.%[2]s WHERE id IN (?, ?)", added, later); n != 0 {
		t.Errorf("a loader started during the pause applied %d rows of the paused table", n)
	}

	setPause(false)
	p.waitDoc(ctx, later, "the insert after the restart", func(s int, _ docAnswer) bool { return s == http.StatusOK })
	p.waitDoc(ctx, added, "the insert of the pause", func(s int, _ docAnswer) bool { return s == http.StatusOK })
	p.waitDoc(ctx, kept, "the update of the pause", func(s int, d docAnswer) bool {
		return s == http.StatusOK && len(d.Copies) == 1 && d.Copies[0].Row["title"] == "edited while paused"
	})
	p.waitDoc(ctx, gone, "the delete of the pause", func(s int, _ docAnswer) bool { return s == http.StatusNotFound })
	p.waitFor(ctx, 30*time.Second, "/v1/shards without the resumed table", func() bool {
		return !strings.Contains(stoppedTables(), "paused by")
	})
	if err := p.failed(); err != nil {
		t.Fatal(err)
	}
}

// waitSlotConfirmed waits until shard's slot has confirmed the shard's
// current WAL position: its reader holds no WAL back.
func waitSlotConfirmed(ctx context.Context, t *testing.T, p *pipeline, shard int) {
	t.Helper()
	conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[shard])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var target string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&target); err != nil {
		t.Fatal(err)
	}
	slot := fmt.Sprintf("e2e_%s_%d", p.suffix, shard)
	p.waitFor(ctx, 30*time.Second, "slot "+slot+" confirmed past "+target, func() bool {
		var ok bool
		err := conn.QueryRow(ctx, "SELECT confirmed_flush_lsn >= $1::pg_lsn FROM pg_replication_slots WHERE slot_name = $2", target, slot).Scan(&ok)
		return err == nil && ok
	})
}
