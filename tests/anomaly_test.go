package tests

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/tributary/tributary/internal/chstore"
)

// waitAnomaly polls the anomaly state of id until check accepts it.
func (p *pipeline) waitAnomaly(ctx context.Context, id int64, what string, check func(a chstore.Anomaly, ok bool) bool) {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var a chstore.Anomaly
	var ok bool
	for time.Now().Before(deadline) {
		if err := p.failed(); err != nil {
			p.t.Fatalf("waiting for %s: %v", what, err)
		}
		got, err := p.store.Anomalies(ctx, p.table(), []string{strconv.FormatInt(id, 10)}, false)
		if err != nil {
			p.t.Fatalf("read anomalies: %v", err)
		}
		a, ok = got[strconv.FormatInt(id, 10)]
		if check(a, ok) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.t.Fatalf("timed out waiting for %s of id %d: last %+v (present %v)", what, id, a, ok)
}

// TestDuplicateIDs: an id left live on two shards becomes an alerting
// anomaly after the grace period (3 s here); a move that completes within
// the grace period is recorded and resolved, and never alerts.
func TestDuplicateIDs(t *testing.T) {
	p := newPipeline(t, []int{0, 1}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tbl := p.table()

	stuck := p.insert(ctx, 0, 1, "half-done move", "b")
	moved := p.insert(ctx, 0, 2, "completed move", "b")
	// The saga's copy step for both; only one finishes (delete at the source).
	p.exec(ctx, 1, fmt.Sprintf("INSERT INTO %s (id, workspace_id, title, body) VALUES ($1, 101, 'half-done move', 'b')", tbl), stuck)
	p.exec(ctx, 1, fmt.Sprintf("INSERT INTO %s (id, workspace_id, title, body) VALUES ($1, 102, 'completed move', 'b')", tbl), moved)
	p.exec(ctx, 0, fmt.Sprintf("DELETE FROM %s WHERE id = $1", tbl), moved)

	p.waitAnomaly(ctx, stuck, "alert", func(a chstore.Anomaly, ok bool) bool {
		return ok && !a.Resolved && a.Alerted && a.Kind == chstore.KindDuplicate && len(a.Shards) == 2
	})
	// The completed move: either never seen as a duplicate (both steps in
	// one batch) or seen and resolved — never alerted.
	p.waitDoc(ctx, moved, "move done", func(s int, d docAnswer) bool {
		return s == 200 && len(d.Copies) == 1 && d.Copies[0].Shard == 1
	})
	time.Sleep(4 * time.Second) // longer than the grace period
	got, err := p.store.Anomalies(ctx, tbl, []string{strconv.FormatInt(moved, 10)}, false)
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := got[strconv.FormatInt(moved, 10)]; ok && (!a.Resolved || a.Alerted) {
		t.Fatalf("completed move reported as an anomaly: %+v", a)
	}

	// Resolving the stuck one: delete the source copy.
	p.exec(ctx, 0, fmt.Sprintf("DELETE FROM %s WHERE id = $1", tbl), stuck)
	p.waitAnomaly(ctx, stuck, "resolution", func(a chstore.Anomaly, ok bool) bool { return ok && a.Resolved })
}

// TestAlertCannotUndoResolution: a loader's periodic evaluation marks an
// open anomaly alerted from a copy it read earlier; meanwhile the loader
// owning the id's partition resolved it. The stale alert must not reopen it.
func TestAlertCannotUndoResolution(t *testing.T) {
	store, _ := scratchStore(t, "e2e_alert_")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := time.Now().UTC().Truncate(time.Second)
	open := chstore.Anomaly{Table: "docs", ID: "42", Kind: chstore.KindDuplicate, Shards: []uint16{0, 1}, FirstSeen: now, LastSeen: now}
	if err := store.WriteAnomalies(ctx, time.Now(), []chstore.Anomaly{open}); err != nil {
		t.Fatal(err)
	}
	read := func() chstore.Anomaly {
		got, err := store.Anomalies(ctx, "docs", []string{"42"}, false)
		if err != nil {
			t.Fatal(err)
		}
		return got["42"]
	}
	stale := read() // the evaluator's copy
	resolved := stale
	resolved.Resolved, resolved.Shards = true, []uint16{1}
	if err := store.WriteAnomalies(ctx, time.Now(), []chstore.Anomaly{resolved}); err != nil { // the owner
		t.Fatal(err)
	}
	stale.Alerted = true
	if err := store.MarkAlerted(ctx, []chstore.Anomaly{stale}); err != nil {
		t.Fatal(err)
	}
	if got := read(); !got.Resolved || got.Alerted {
		t.Fatalf("after a stale alert: %+v, want resolved and not alerted", got)
	}
	// Without a newer state, the alert is stored.
	open2 := read()
	open2.ID, open2.Resolved, open2.Ver = "43", false, 0
	if err := store.WriteAnomalies(ctx, time.Now(), []chstore.Anomaly{open2}); err != nil {
		t.Fatal(err)
	}
	got, err := store.Anomalies(ctx, "docs", []string{"43"}, false)
	if err != nil {
		t.Fatal(err)
	}
	a := got["43"]
	a.Alerted = true
	if err := store.MarkAlerted(ctx, []chstore.Anomaly{a}); err != nil {
		t.Fatal(err)
	}
	got, err = store.Anomalies(ctx, "docs", []string{"43"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if !got["43"].Alerted || got["43"].Resolved {
		t.Fatalf("alert not stored: %+v", got["43"])
	}
}

// TestStaleDetectionCannotUndoResolution: across a rebalance, the old owner
// of a partition may still detect a batch it polled before, from a read of
// ClickHouse older than the new owner's. Whatever order the two states are
// written in, the one read later stands: the id the new owner resolved is
// not reopened by the stale detection written after it.
func TestStaleDetectionCannotUndoResolution(t *testing.T) {
	store, _ := scratchStore(t, "e2e_stale_")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	read := func(id string) chstore.Anomaly {
		got, err := store.Anomalies(ctx, "docs", []string{id}, false)
		if err != nil {
			t.Fatal(err)
		}
		return got[id]
	}
	now := time.Now().UTC().Truncate(time.Second)
	open := chstore.Anomaly{Table: "docs", ID: "42", Kind: chstore.KindDuplicate, Shards: []uint16{0, 1}, FirstSeen: now, LastSeen: now}
	if err := store.WriteAnomalies(ctx, time.Now(), []chstore.Anomaly{open}); err != nil {
		t.Fatal(err)
	}

	// The old owner reads: still live on shards 0 and 1, seen later.
	staleAt := time.Now()
	stale := read("42")
	stale.LastSeen = now.Add(time.Second)
	// The new owner reads after the delete on shard 0 is in, and resolves.
	time.Sleep(time.Millisecond)
	freshAt := time.Now()
	resolved := read("42")
	resolved.Resolved, resolved.Shards, resolved.LastSeen = true, []uint16{1}, now.Add(2*time.Second)
	if err := store.WriteAnomalies(ctx, freshAt, []chstore.Anomaly{resolved}); err != nil {
		t.Fatal(err)
	}
	// The old owner's write lands last.
	if err := store.WriteAnomalies(ctx, staleAt, []chstore.Anomaly{stale}); err != nil {
		t.Fatal(err)
	}
	if got := read("42"); !got.Resolved || len(got.Shards) != 1 {
		t.Fatalf("after a stale detection written last: %+v, want the resolution read later", got)
	}

	// A state read after the stored one's read is stored.
	reopenAt := time.Now()
	reopen := read("42")
	reopen.Resolved, reopen.Shards, reopen.FirstSeen = false, []uint16{1, 2}, now.Add(3*time.Second)
	if err := store.WriteAnomalies(ctx, reopenAt, []chstore.Anomaly{reopen}); err != nil {
		t.Fatal(err)
	}
	if got := read("42"); got.Resolved || len(got.Shards) != 2 {
		t.Fatalf("a newer detection was not stored: %+v", got)
	}
}
