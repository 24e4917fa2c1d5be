package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary/tributary/internal/loader"
	"github.com/tributary/tributary/internal/query"
	"github.com/tributary/tributary/internal/ring"
)

// TestArcMoveRevenueExact is the arc-move rollout of docs/design/moves.md with writes running: a
// shard is added by moving arcs of the ring to it. Revenue through the API
// equals the scatter-gather ground truth computed per the ring map in force
// at every step — each row counted once, from the owner of its account,
// from the live query and from the pre-aggregates alike:
//
//  1. ring v1 (shards 0, 1);
//  2. v2 (shards 0, 1, 2) staged in the same file, loaded without a
//     restart; the moving accounts' rows are bulk-copied to shard 2 and
//     caught up while writes still go to the old owners: the copies are
//     not counted and not misplaced (tributary_moving_rows);
//  3. cutover: writes paused, last changes copied, v2 published, writes
//     resume on the new owners: the rows left on the old owners are not
//     counted and are listed by GET /v1/anomalies/misplaced;
//  4. a stale copy of the v1 file is refused; a stale router writes to an
//     old owner (listed); the leftovers are deleted (none listed).
func TestArcMoveRevenueExact(t *testing.T) {
	t.Parallel()
	p := setupRevenuePipeline(t, []int{0, 1, 2}, true)
	cfg := p.tables.Revenue
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	tbl := pgx.Identifier{p.table()}.Sanitize()

	v1, err := ring.New(1, []ring.Shard{{ID: 0}, {ID: 1}}, 64)
	if err != nil {
		t.Fatal(err)
	}
	v2, err := ring.New(2, []ring.Shard{{ID: 0}, {ID: 1}, {ID: 2}}, 64)
	if err != nil {
		t.Fatal(err)
	}
	accounts := make([]int64, 40)
	var moving []int64 // accounts whose owner changes: all to shard 2
	for i := range accounts {
		accounts[i] = int64(1 + i)
		if v1.OwnerInt64(accounts[i]) != v2.OwnerInt64(accounts[i]) {
			moving = append(moving, accounts[i])
		}
	}
	if len(moving) < 3 {
		t.Fatalf("only %d of %d accounts move to shard 2", len(moving), len(accounts))
	}

	// The published file, read again by the loader every 200 ms.
	ringPath := filepath.Join(t.TempDir(), "ringmap.json")
	publish := func(f ring.File) {
		data, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(ringPath+".tmp", data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(ringPath+".tmp", ringPath); err != nil {
			t.Fatal(err)
		}
	}
	publish(v1.File())

	// inForce is the map the ground truth counts by; router the map the
	// writers route by.
	var inForce, router atomic.Pointer[ring.Map]
	inForce.Store(v1)
	router.Store(v1)
	p.owned = func(shard int) []int64 {
		m := inForce.Load()
		return slices.DeleteFunc(slices.Clone(accounts), func(a int64) bool { return m.OwnerInt64(a) != shard })
	}

	runCtx, runCancel := context.WithCancel(context.Background())
	defer runCancel()
	for _, s := range p.shards {
		p.startReader(runCtx, s)
	}
	// The loader also runs the revenue aggregator: whole-day reports come
	// from the pre-aggregates, which must follow ownership too (a new ring
	// version recomputes every block).
	reg := p.startMeteredLoader(runCtx, "l1", func(c *loader.Config) {
		c.Ring, c.RingPath, c.RingReloadInterval, c.MisplacedInterval = v1, ringPath, 200*time.Millisecond, 200*time.Millisecond
		c.RevenueAggregator, c.PreaggInterval, c.PreaggBlockBits = true, 200*time.Millisecond, 30
	})
	p.preagg = true
	metric := func(name string, labels map[string]string) float64 {
		v, _ := metricOf(t, reg, name, labels)
		return v
	}

	// Initial orders, each on its account's owner.
	rng := rand.New(rand.NewPCG(7, 3))
	byShard := map[int][]revOrder{}
	for i, o := range revGenOrders(rng, 400) {
		o.account = accounts[i%len(accounts)]
		s := v1.OwnerInt64(o.account)
		byShard[s] = append(byShard[s], o)
	}
	for s, os := range byShard {
		p.insertRevenueOrders(ctx, s, os)
	}

	// Writes continue throughout: new orders and state changes, routed by
	// the router's map. pause stops them between two writes.
	var pause sync.Mutex
	var written atomic.Int64
	writerCtx, stopWriter := context.WithCancel(ctx)
	writerDone := make(chan error, 1)
	go func() { writerDone <- arcWriter(writerCtx, p, &pause, &router, accounts, &written) }()
	defer func() {
		stopWriter()
		if err := <-writerDone; err != nil && ctx.Err() == nil {
			t.Errorf("writer: %v", err)
		}
	}()

	groupings := [][]string{{"currency"}, {"workspace", "currency"}, {"shard", "currency"}}
	checkpoint := func(what string) {
		t.Helper()
		pause.Lock()
		defer pause.Unlock()
		p.waitRevenueFresh(ctx, p.revenueWALPositions(ctx))
		for _, g := range groupings {
			if n := p.compareRevenue(ctx, cfg, revFrom, revTo, g, nil, nil, nil); n == 0 {
				t.Errorf("%s: group_by=%v compared no rows", what, g)
			}
		}
		if t.Failed() {
			t.Fatalf("%s: revenue differs from the ground truth per ring v%d", what, inForce.Load().Version())
		}
	}
	checkpoint("ring v1")

	// 2. Stage v2 and bulk-copy the moving accounts to shard 2; writes
	// still go to the old owners.
	staged := v1.File()
	next := v2.File()
	staged.Next = &next
	publish(staged)
	p.waitFor(ctx, 30*time.Second, "the staged map applied", func() bool {
		return metric("tributary_ring_map_reloads_total", map[string]string{"outcome": "applied"}) >= 1
	})
	for _, s := range []int{0, 1} {
		arcCopy(ctx, p, tbl, s, 2, moving)
	}
	for _, s := range []int{0, 1} { // catch up with what was written meanwhile
		arcCopy(ctx, p, tbl, s, 2, moving)
	}
	checkpoint("v2 staged, arcs copied")
	p.waitFor(ctx, 30*time.Second, "the copies counted as moving, none misplaced", func() bool {
		return metric("tributary_moving_rows", map[string]string{"table": p.table(), "shard": "2"}) > 0 &&
			metric("tributary_misplaced_rows", map[string]string{"table": p.table(), "shard": "2"}) == 0
	})
	if rows := arcMisplaced(ctx, t, p); len(rows) != 0 {
		t.Fatalf("a planned move's copies are listed as misplaced: %+v", rows[0])
	}
	// By id, a copied row is one row: the owner's copy, the staged
	// owner's named as moving.
	movedID := p.queryID(ctx, v1.OwnerInt64(moving[0]), fmt.Sprintf("SELECT min(id) FROM %s WHERE account_id = $1", tbl), moving[0])
	arcByID(ctx, t, p, movedID, v1.OwnerInt64(moving[0]), hidden{2, "moving"})
	if n := metric("tributary_misplaced_writes_total", map[string]string{"table": p.table(), "shard": "2"}); n != 0 {
		t.Errorf("tributary_misplaced_writes_total{shard=2} = %v during a planned move, want 0", n)
	}
	// Every copied row is live on two shards: recorded as arc_move, never
	// alerted as a duplicate, even past the grace period (3 s here).
	copies := arcCount(ctx, p, tbl, []int{2}, moving)
	kind := func(gauge, k string) float64 {
		return metric(gauge, map[string]string{"table": p.table(), "kind": k})
	}
	p.waitFor(ctx, 30*time.Second, fmt.Sprintf("%d arc_move anomalies", copies), func() bool {
		return int64(kind("tributary_duplicate_ids_pending", "arc_move")) == copies
	})
	time.Sleep(4 * time.Second)
	if n, m := kind("tributary_duplicate_ids", "duplicate"), kind("tributary_duplicate_ids_pending", "duplicate"); n+m != 0 {
		t.Errorf("a planned move's copies counted as duplicates: %v alerting, %v pending", n, m)
	}

	// 3. Cutover: pause the arc's writes, apply the last changes, publish
	// v2, resume on the new owners.
	pause.Lock()
	for _, s := range []int{0, 1} {
		arcCopy(ctx, p, tbl, s, 2, moving)
	}
	publish(v2.File())
	p.waitFor(ctx, 30*time.Second, "ring v2 in force", func() bool {
		return metric("tributary_ring_map_version", nil) == 2
	})
	inForce.Store(v2)
	router.Store(v2)
	pause.Unlock()
	checkpoint("after cutover")
	leftovers := arcCount(ctx, p, tbl, []int{0, 1}, moving)
	if leftovers == 0 {
		t.Fatal("no rows left on the old owners to check")
	}
	p.waitFor(ctx, 30*time.Second, "the leftovers listed as misplaced", func() bool {
		return int64(len(arcMisplaced(ctx, t, p))) == leftovers
	})
	for _, r := range arcMisplaced(ctx, t, p) {
		if r.Owner != 2 || r.Shard == 2 || r.RingVersion != 2 || r.ShardKey != "account_id" {
			t.Errorf("misplaced row %+v, want a leftover on shard 0 or 1 owned by 2 under ring v2", r)
		}
	}
	// By id, the new owner's copy now; the old owner's is misplaced.
	arcByID(ctx, t, p, movedID, 2, hidden{v1.OwnerInt64(moving[0]), "misplaced"})
	// Once cut over, a row still on both shards is a half-done move: a
	// duplicate, alerted after the grace period.
	p.waitFor(ctx, 30*time.Second, "leftovers turned from arc_move into duplicates", func() bool {
		return kind("tributary_duplicate_ids_pending", "arc_move") == 0 &&
			int64(kind("tributary_duplicate_ids", "duplicate")+kind("tributary_duplicate_ids_pending", "duplicate")) == leftovers
	})

	// 4. A stale copy of the v1 file is refused; v2 stays in force.
	publish(v1.File())
	p.waitFor(ctx, 30*time.Second, "the stale map refused", func() bool {
		return metric("tributary_ring_map_reloads_total", map[string]string{"outcome": "refused"}) >= 1
	})
	if v := metric("tributary_ring_map_version", nil); v != 2 {
		t.Fatalf("ring version %v after a stale file, want 2", v)
	}
	// A stale router (a pod routing by the old map after cutover) writes a moved account's
	// order to its old owner: listed, not counted.
	stale := moving[0]
	p.insertRevenueOrders(ctx, v1.OwnerInt64(stale), []revOrder{{account: stale, total: "123.45", currency: "EUR", state: "paid",
		placed: revFrom.Add(48 * time.Hour)}})
	p.waitFor(ctx, 30*time.Second, "the stale router's row listed", func() bool {
		return int64(len(arcMisplaced(ctx, t, p))) == leftovers+1
	})
	checkpoint("after a stale router's write")
	// The operator deletes the leftovers (and the stray row).
	pause.Lock()
	for _, s := range []int{0, 1} {
		p.exec(ctx, s, fmt.Sprintf("DELETE FROM %s WHERE account_id = ANY($1)", tbl), moving)
	}
	pause.Unlock()
	p.waitFor(ctx, 30*time.Second, "no misplaced rows and no duplicates after the cleanup", func() bool {
		return len(arcMisplaced(ctx, t, p)) == 0 &&
			kind("tributary_duplicate_ids", "duplicate")+kind("tributary_duplicate_ids_pending", "duplicate") == 0
	})
	checkpoint("after the cleanup")
	if written.Load() == 0 {
		t.Error("the writer wrote nothing")
	}
	if err := p.failed(); err != nil {
		t.Fatal(err)
	}
}

// arcWriter inserts orders and changes order states, on the owner of each
// account under the router's map, until ctx ends.
func arcWriter(ctx context.Context, p *pipeline, pause *sync.Mutex, router *atomic.Pointer[ring.Map], accounts []int64, written *atomic.Int64) error {
	conns := map[int]*pgx.Conn{}
	defer func() {
		for _, c := range conns {
			c.Close(context.Background())
		}
	}()
	for _, s := range p.shards {
		c, err := pgx.Connect(ctx, p.stack.ShardDSNs[s])
		if err != nil {
			return err
		}
		conns[s] = c
	}
	tbl := pgx.Identifier{p.table()}.Sanitize()
	rng := rand.New(rand.NewPCG(11, 5))
	type order struct{ id, account int64 }
	var orders []order
	step := func() error {
		pause.Lock()
		defer pause.Unlock()
		a := accounts[rng.IntN(len(accounts))]
		c := conns[router.Load().OwnerInt64(a)]
		if len(orders) > 0 && rng.IntN(3) == 0 {
			// Its current owner holds the order: copied there at cutover.
			o := orders[rng.IntN(len(orders))]
			c = conns[router.Load().OwnerInt64(o.account)]
			_, err := c.Exec(ctx, fmt.Sprintf("UPDATE %s SET state = $2, total = total + 1 WHERE id = $1", tbl), o.id,
				[]string{"paid", "refunded", "void"}[rng.IntN(3)])
			return err
		}
		var id int64
		err := c.QueryRow(ctx, fmt.Sprintf(`INSERT INTO %s (account_id, total, currency_code, state, placed_at)
			VALUES ($1, $2::numeric, 'EUR', 'paid', $3) RETURNING id`, tbl),
			a, fmt.Sprintf("%d.%02d", rng.IntN(10000), rng.IntN(100)), revFrom.Add(time.Duration(rng.IntN(80*24))*time.Hour)).Scan(&id)
		orders = append(orders, order{id, a})
		return err
	}
	for ctx.Err() == nil {
		if err := step(); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		written.Add(1)
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// arcCopy copies (upserts) the rows of accounts from one shard to another,
// keeping their ids: a bulk copy, or a catch-up when run again.
func arcCopy(ctx context.Context, p *pipeline, tbl string, from, to int, accounts []int64) {
	p.t.Helper()
	src, err := pgx.Connect(ctx, p.stack.ShardDSNs[from])
	if err != nil {
		p.t.Fatal(err)
	}
	defer src.Close(ctx)
	var ids, accts []int64
	var totals, curs, states []string
	var placed []time.Time
	rows, err := src.Query(ctx, fmt.Sprintf("SELECT id, account_id, total::text, currency_code, state, placed_at FROM %s WHERE account_id = ANY($1)", tbl), accounts)
	if err != nil {
		p.t.Fatal(err)
	}
	for rows.Next() {
		var id, a int64
		var total, cur, st string
		var at time.Time
		if err := rows.Scan(&id, &a, &total, &cur, &st, &at); err != nil {
			p.t.Fatal(err)
		}
		ids, accts, totals, curs, states, placed = append(ids, id), append(accts, a), append(totals, total), append(curs, cur), append(states, st), append(placed, at)
	}
	if rows.Err() != nil {
		p.t.Fatal(rows.Err())
	}
	p.exec(ctx, to, fmt.Sprintf(`INSERT INTO %s (id, account_id, total, currency_code, state, placed_at)
		SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[]::numeric[], $4::text[], $5::text[], $6::timestamptz[])
		ON CONFLICT (id) DO UPDATE SET account_id = EXCLUDED.account_id, total = EXCLUDED.total,
			currency_code = EXCLUDED.currency_code, state = EXCLUDED.state, placed_at = EXCLUDED.placed_at
		WHERE (%[1]s.account_id, %[1]s.total, %[1]s.currency_code, %[1]s.state, %[1]s.placed_at)
			IS DISTINCT FROM (EXCLUDED.account_id, EXCLUDED.total, EXCLUDED.currency_code, EXCLUDED.state, EXCLUDED.placed_at)`, tbl),
		ids, accts, totals, curs, states, placed)
}

// arcCount counts the rows of accounts on the shards.
func arcCount(ctx context.Context, p *pipeline, tbl string, shards []int, accounts []int64) int64 {
	var n int64
	for _, s := range shards {
		n += p.queryID(ctx, s, fmt.Sprintf("SELECT count(*) FROM %s WHERE account_id = ANY($1)", tbl), accounts)
	}
	return n
}

// arcMisplaced lists every misplaced row through the API, a small page at
// a time (so that the cursor is exercised).
func arcMisplaced(ctx context.Context, t *testing.T, p *pipeline) []query.MisplacedRow {
	t.Helper()
	var all []query.MisplacedRow
	cursor := ""
	for range 1000 {
		params := url.Values{"limit": {"7"}, "table": {p.table()}}
		if cursor != "" {
			params.Set("cursor", cursor)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.api.URL+"/v1/anomalies/misplaced?"+params.Encode(), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var page struct {
			Rows []query.MisplacedRow `json:"rows"`
			Next string               `json:"next_cursor"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /v1/anomalies/misplaced: %d %v", resp.StatusCode, err)
		}
		all = append(all, page.Rows...)
		if page.Next == "" {
			return all
		}
		cursor = page.Next
	}
	t.Fatal("misplaced listing does not end")
	return nil
}

// hidden is a copy a by-id answer names but does not show.
type hidden struct {
	shard  int
	reason string
}

// arcByID checks GET /v1/documents/{id} (the orders table here) shows one
// copy, on shard, and names the other.
func arcByID(ctx context.Context, t *testing.T, p *pipeline, id int64, shard int, other hidden) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/v1/documents/%d", p.api.URL, id), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		Copies []struct {
			Shard int `json:"shard"`
		} `json:"copies"`
		Duplicate bool `json:"duplicate"`
		Placement *struct {
			Hidden []struct {
				Shard  int    `json:"shard"`
				Reason string `json:"reason"`
			} `json:"hidden_copies"`
		} `json:"placement"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/documents/%d: %d %v", id, resp.StatusCode, err)
	}
	if len(got.Copies) != 1 || got.Copies[0].Shard != shard || got.Duplicate || got.Placement == nil ||
		len(got.Placement.Hidden) != 1 || got.Placement.Hidden[0].Shard != other.shard || got.Placement.Hidden[0].Reason != other.reason {
		t.Errorf("GET /v1/documents/%d = %+v (placement %+v), want the copy on shard %d and %+v hidden", id, got, got.Placement, shard, other)
	}
}
