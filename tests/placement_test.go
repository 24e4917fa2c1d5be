package tests

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/loader"
	"github.com/tributary/tributary/internal/ring"
)

// TestMisplacedRows is the stale-router failure of docs/design/moves.md: a writer with a stale ring
// map puts rows on a shard that does not own their workspace. The loader,
// given the published map, counts those writes as they happen, keeps the
// number of misplaced live rows, and lists them; after a cutover to a new
// map (a shard added), rows left on the old owner are reported.
func TestMisplacedRows(t *testing.T) {
	p := setupPipeline(t, []int{0, 1}, nil, true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tbl := p.table()

	v1, err := ring.New(1, []ring.Shard{{ID: 0}, {ID: 1}}, 64)
	if err != nil {
		t.Fatal(err)
	}
	v2, err := ring.New(2, []ring.Shard{{ID: 0}, {ID: 1}, {ID: 2}}, 64)
	if err != nil {
		t.Fatal(err)
	}
	// Workspaces: a owned by 0 and b by 1 under both maps; c owned by 1
	// under v1 and by the new shard 2 under v2.
	var wsA, wsB, wsC int64 = -1, -1, -1
	for ws := int64(1); ws < 100000 && (wsA < 0 || wsB < 0 || wsC < 0); ws++ {
		o1, o2 := v1.OwnerInt64(ws), v2.OwnerInt64(ws)
		switch {
		case wsA < 0 && o1 == 0 && o2 == 0:
			wsA = ws
		case wsB < 0 && o1 == 1 && o2 == 1:
			wsB = ws
		case wsC < 0 && o1 == 1 && o2 == 2:
			wsC = ws
		}
	}
	if wsA < 0 || wsB < 0 || wsC < 0 {
		t.Fatalf("no workspaces with the needed owners: %d %d %d", wsA, wsB, wsC)
	}

	runCtx, runCancel := context.WithCancel(context.Background())
	defer runCancel()
	for _, s := range p.shards {
		p.startReader(runCtx, s)
	}
	withRing := func(m *ring.Map) func(*loader.Config) {
		return func(c *loader.Config) { c.Ring, c.MisplacedInterval = m, 200*time.Millisecond }
	}
	l1Ctx, stopL1 := context.WithCancel(runCtx)
	reg := p.startMeteredLoader(l1Ctx, "l1", withRing(v1))

	for i := 0; i < 3; i++ {
		p.insert(ctx, 0, wsA, "placed", "b")
	}
	stray1 := p.insert(ctx, 0, wsB, "stale router", "b") // shard 0 does not own b
	stray2 := p.insert(ctx, 0, wsB, "stale router", "b")
	p.insert(ctx, 1, wsB, "placed", "b")
	c := p.insert(ctx, 1, wsC, "moves at cutover", "b")

	misplaced := func(want map[uint16]uint64) func() bool {
		return func() bool {
			t, err := p.store.Lookup(ctx, tbl, []string{"id"})
			if err != nil || t == nil {
				return false
			}
			got, err := p.store.MisplacedCounts(ctx, t, "workspace_id")
			return err == nil && fmt.Sprint(got) == fmt.Sprint(want)
		}
	}
	p.waitFor(ctx, 30*time.Second, "2 misplaced rows on shard 0", misplaced(map[uint16]uint64{0: 2}))
	p.waitFor(ctx, 10*time.Second, "tributary_misplaced_rows{shard=0} = 2", func() bool {
		v, _ := metricOf(t, reg, "tributary_misplaced_rows", map[string]string{"table": tbl, "shard": "0"})
		return v == 2
	})
	// Writes, not rows: a row the initial copy and the stream both carry
	// (inserted while the snapshot ran) is written, and counted, twice.
	if v, _ := metricOf(t, reg, "tributary_misplaced_writes_total", map[string]string{"table": tbl, "shard": "0"}); v < 2 {
		t.Errorf("tributary_misplaced_writes_total{shard=0} = %v, want >= 2", v)
	}
	if v, ok := metricOf(t, reg, "tributary_misplaced_writes_total", map[string]string{"table": tbl, "shard": "1"}); ok && v != 0 {
		t.Errorf("tributary_misplaced_writes_total{shard=1} = %v, want 0", v)
	}
	lt, err := p.store.Lookup(ctx, tbl, []string{"id"})
	if err != nil || lt == nil {
		t.Fatalf("table layout: %v", err)
	}
	rows, err := p.store.MisplacedRows(ctx, lt, "workspace_id", nil, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("listed %d misplaced rows, want 2: %+v", len(rows), rows)
	}
	for _, r := range rows {
		if (r.ID != strconv.FormatInt(stray1, 10) && r.ID != strconv.FormatInt(stray2, 10)) || r.Shard != 0 || r.Owner != 1 ||
			r.Key != strconv.FormatInt(wsB, 10) {
			t.Errorf("misplaced row %+v, want one of ids %d, %d on shard 0 owned by 1 (workspace %d)", r, stray1, stray2, wsB)
		}
	}

	// The operator moves one stray row away (deleted on the wrong shard):
	// one left.
	p.exec(ctx, 0, fmt.Sprintf("DELETE FROM %s WHERE id = $1", tbl), stray1)
	p.waitFor(ctx, 30*time.Second, "1 misplaced row after the delete", misplaced(map[uint16]uint64{0: 1}))

	// Cutover to v2 (shard 2 added): the loader restarts with the new map
	// and re-places every known workspace; c's row on shard 1 is now a
	// leftover on the old owner. Writes continue meanwhile.
	stopL1()
	p.insert(ctx, 1, wsC, "written during the cutover", "b")
	reg2 := p.startMeteredLoader(runCtx, "l2", withRing(v2))
	p.waitFor(ctx, 30*time.Second, "after cutover: 1 stray on shard 0, 2 leftovers on shard 1",
		misplaced(map[uint16]uint64{0: 1, 1: 2}))
	p.waitFor(ctx, 10*time.Second, "tributary_misplaced_rows{shard=1} = 2 on the new loader", func() bool {
		v, _ := metricOf(t, reg2, "tributary_misplaced_rows", map[string]string{"table": tbl, "shard": "1"})
		return v == 2
	})
	rows, err = p.store.MisplacedRows(ctx, lt, "workspace_id", nil, 100)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range rows {
		if r.ID == strconv.FormatInt(c, 10) {
			found = r.Shard == 1 && r.Owner == 2
		}
	}
	if !found {
		t.Errorf("leftover %d not listed on shard 1 with owner 2: %+v", c, rows)
	}
	// A loader still running v1 (the stale pod) writes its ownership of c's
	// workspace: the newer ring version keeps winning.
	if err := p.store.WriteOwnership(ctx, []chstore.Ownership{{Table: tbl, Key: strconv.FormatInt(wsC, 10), Owner: 1, RingVersion: 1}}); err != nil {
		t.Fatal(err)
	}
	if !misplaced(map[uint16]uint64{0: 1, 1: 2})() {
		t.Error("an older ring version's ownership write changed the answer")
	}
}
