// Package loadgen writes realistic demo traffic to the shards: documents
// created, retitled, re-bodied (large, TOASTed), deleted and moved to a
// workspace on another shard with the move saga of docs/design/moves.md (saga.go; some moves
// left half-done or lost on purpose); invoices issued, paid and refunded;
// optionally notes in a legacy table with per-shard serial ids. Workspaces are placed on shards by the ring
// map, and a few workspaces are hot. It records, for a sample of writes,
// the shard, id and the shard's WAL position after commit, so that
// freshness can be measured (read-your-writes).
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/time/rate"

	"github.com/tributary/tributary/internal/pgdsn"
	"github.com/tributary/tributary/internal/ring"
)

// Config describes the traffic.
type Config struct {
	// DSNs are the shards' DSNs by shard number (any numbers: those of the
	// fleet file). The ring map may place workspaces on these shards only.
	DSNs       map[int]string
	Ring       *ring.Map
	Rate       float64       // operations per second, all shards together
	Duration   time.Duration // 0: until ctx ends
	Workspaces int
	// BodyBytes is the size of a large document body (TOASTed when > ~2 kB).
	BodyBytes int
	Workers   int
	// MoveShare is the share of operations (0..1) that move a document to a
	// workspace on another shard with the saga (saga.go).
	MoveShare float64
	// HalfDoneShare is the share of moves (0..1) stopped after the copy:
	// live on both shards, state copied, until a recovery (Resume) runs.
	HalfDoneShare float64
	// LoseShare is the share of moves (0..1) that skip the copy: deleted at
	// the source and marked done, on neither shard (a broken saga).
	LoseShare float64
	// LegacyShare is the share of operations (0..1) on legacy_notes, whose
	// ids are per-shard serials (they collide across shards by design).
	LegacyShare float64
	// RowsPerOp > 1 turns on bulk traffic (bulk.go): every operation is one
	// transaction that changes this many rows (multi-row inserts, updates
	// and deletes of documents and invoices), instead of one realistic
	// single-row operation. Moves and legacy notes are not generated then.
	RowsPerOp int
	// BulkBodyBytes is the size of the bodies of documents inserted by bulk
	// operations (small by default in the benchmarks: not TOASTed).
	BulkBodyBytes int
	// Tables names the tables written; empty names are the demo schema's
	// (DemoTables). Tests give tables of their own, with the demo's columns.
	Tables Tables
}

// Tables names the tables the traffic writes. Each has the columns of its
// demo counterpart (schema/postgres/10_demo.sql).
type Tables struct {
	Documents, Invoices, Moves, LegacyNotes string
}

// DemoTables are the demo schema's tables.
var DemoTables = Tables{Documents: "documents", Invoices: "invoices", Moves: "document_moves", LegacyNotes: "legacy_notes"}

// orDemo fills the names not given with the demo's.
func (t Tables) orDemo() Tables {
	for _, f := range []struct {
		name *string
		demo string
	}{
		{&t.Documents, DemoTables.Documents}, {&t.Invoices, DemoTables.Invoices},
		{&t.Moves, DemoTables.Moves}, {&t.LegacyNotes, DemoTables.LegacyNotes},
	} {
		if *f.name == "" {
			*f.name = f.demo
		}
	}
	return t
}

// Validate checks the shares.
func (c Config) Validate() error {
	for _, s := range []struct {
		what string
		v    float64
	}{{"move share", c.MoveShare}, {"half-done share", c.HalfDoneShare}, {"lose share", c.LoseShare},
		{"legacy share", c.LegacyShare}} {
		if s.v < 0 || s.v > 1 {
			return fmt.Errorf("loadgen: %s %v is not in 0..1", s.what, s.v)
		}
	}
	if c.MoveShare+c.LegacyShare > 1 {
		return errors.New("loadgen: move share + legacy share exceed 1")
	}
	if c.RowsPerOp < 0 || c.BulkBodyBytes < 0 {
		return errors.New("loadgen: rows per operation and bulk body bytes must be >= 0")
	}
	if c.RowsPerOp > 1 && (c.MoveShare > 0 || c.LegacyShare > 0) {
		return errors.New("loadgen: bulk operations (rows per operation > 1) make no moves or legacy notes")
	}
	if c.HalfDoneShare+c.LoseShare > 1 {
		return errors.New("loadgen: half-done share + lose share exceed 1")
	}
	return nil
}

// Write is one sampled write: after it committed, shard's WAL was at LSN.
type Write struct {
	Shard int
	Table string
	ID    int64
	LSN   string
	At    time.Time
}

// Stats counts what was done.
type Stats struct {
	Ops, Errors                      atomic.Int64
	DocsCreated, DocsEdited, DocsDel atomic.Int64
	InvIssued, InvPaid, InvRefunded  atomic.Int64
	// Moves counts moves by outcome.
	MovesDone, MovesHalfDone, MovesLost atomic.Int64
	// LegacyNotes counts writes to the legacy serial-id table.
	LegacyNotes atomic.Int64
	// Rows counts the rows of documents, invoices and legacy notes that
	// committed operations inserted, updated or deleted (not moves).
	Rows atomic.Int64
}

// Generator runs the traffic.
type Generator struct {
	cfg   Config
	log   *slog.Logger
	pools map[int]*pgxpool.Pool // by shard number
	Stats Stats
	// names are the tables written, docsT, invT and notesT their quoted
	// names; saga moves documents (moves.go).
	names               Tables
	docsT, invT, notesT string
	saga                Saga

	// The lists below are by shard number; every shard has an entry.
	mu      sync.Mutex
	owned   map[int][]int64 // its workspaces (bulk operations)
	docs    map[int][]int64 // live document ids
	issued  map[int][]int64 // invoices still 'issued'
	paid    map[int][]int64 // invoices 'paid'
	samples []Write
}

// New connects to every shard.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Generator, error) {
	if len(cfg.DSNs) == 0 || cfg.Ring == nil {
		return nil, errors.New("loadgen: shards and ring map are required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Every shard the ring map places workspaces on must be given, before
	// anything connects.
	for _, s := range cfg.Ring.Shards() {
		if _, ok := cfg.DSNs[s.ID]; !ok {
			return nil, fmt.Errorf("loadgen: the ring map places workspaces on shard %d, which is not among the shards given (%v)",
				s.ID, slices.Sorted(maps.Keys(cfg.DSNs)))
		}
	}
	names := cfg.Tables.orDemo()
	g := &Generator{cfg: cfg, log: log, pools: map[int]*pgxpool.Pool{},
		docs: map[int][]int64{}, issued: map[int][]int64{}, paid: map[int][]int64{},
		names: names, docsT: ident(names.Documents), invT: ident(names.Invoices), notesT: ident(names.LegacyNotes),
		saga: Saga{Documents: names.Documents, Moves: names.Moves, IDColumn: "id", WorkspaceColumn: "workspace_id"}}
	for _, n := range slices.Sorted(maps.Keys(cfg.DSNs)) {
		if err := pgdsn.Check(cfg.DSNs[n]); err != nil { // pgx's error may show some of the password
			g.Close()
			return nil, fmt.Errorf("shard %d: %w", n, err)
		}
		p, err := pgxpool.New(ctx, cfg.DSNs[n])
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("shard %d: %w", n, err)
		}
		if err := p.Ping(ctx); err != nil {
			p.Close()
			g.Close()
			return nil, fmt.Errorf("shard %d: %w", n, err)
		}
		g.pools[n] = p
	}
	g.owned = g.ownedWorkspaces()
	return g, nil
}

// DefaultVNodes is the virtual nodes per shard of DefaultRing's map.
const DefaultVNodes = 64

// DefaultRing is the ring map used when none is published: version 1, the
// given shards (any numbers) with DefaultVNodes virtual nodes each. For
// shards 0..3 it is deploy/local/ringmap.json.
func DefaultRing(shards []int) (*ring.Map, error) {
	rs := make([]ring.Shard, len(shards))
	for i, n := range shards {
		rs[i] = ring.Shard{ID: n}
	}
	return ring.New(1, rs, DefaultVNodes)
}

// Close releases the pools.
func (g *Generator) Close() {
	for _, p := range g.pools {
		p.Close()
	}
}

// Resume finishes every unfinished move logged on any shard (the saga's
// recovery job) and returns how many it finished.
func (g *Generator) Resume(ctx context.Context) (int, error) {
	shards := map[int]Shard{}
	for n, p := range g.pools {
		shards[n] = Shard{ID: n, Pool: p}
	}
	total := 0
	for _, n := range slices.Sorted(maps.Keys(g.pools)) {
		done, err := g.saga.Resume(ctx, shards[n], shards)
		total += done
		if err != nil {
			return total, fmt.Errorf("shard %d: %w", n, err)
		}
	}
	return total, nil
}

// Samples returns the sampled writes so far.
func (g *Generator) Samples() []Write {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]Write(nil), g.samples...)
}

// Run generates traffic until the duration passes or ctx ends.
func (g *Generator) Run(ctx context.Context) error {
	return g.RunFor(ctx, g.cfg.Rate, g.cfg.Duration)
}

// RunFor generates traffic at ops operations/s for d (0: until ctx ends).
// The documents and invoices of earlier runs stay there to be edited, paid
// and deleted.
func (g *Generator) RunFor(ctx context.Context, ops float64, d time.Duration) error {
	if d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	lim := rate.NewLimiter(rate.Limit(ops), max(1, int(ops/10)))
	workers := max(1, g.cfg.Workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(seed, uint64(time.Now().UnixNano())))
			for lim.Wait(ctx) == nil {
				if err := g.one(ctx, rnd); err != nil && ctx.Err() == nil {
					g.Stats.Errors.Add(1)
					g.log.Warn("operation failed", slog.Any("err", err))
				}
				g.Stats.Ops.Add(1)
			}
		}(uint64(w))
	}
	wg.Wait()
	return nil
}

// workspace picks a workspace, a few of them hot.
func (g *Generator) workspace(rnd *rand.Rand) int64 {
	if rnd.IntN(10) < 3 { // 30% of traffic on 3 hot workspaces
		return int64(1 + rnd.IntN(3))
	}
	return int64(1 + rnd.IntN(max(1, g.cfg.Workspaces)))
}

func (g *Generator) pick(list map[int][]int64, shard int, rnd *rand.Rand, remove bool) (int64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	l := list[shard]
	if len(l) == 0 {
		return 0, false
	}
	i := rnd.IntN(len(l))
	id := l[i]
	if remove {
		l[i] = l[len(l)-1]
		list[shard] = l[:len(l)-1]
	}
	return id, true
}

func (g *Generator) add(list map[int][]int64, shard int, id int64) {
	g.mu.Lock()
	list[shard] = append(list[shard], id)
	g.mu.Unlock()
}

func body(rnd *rand.Rand, n int) string {
	var b strings.Builder
	words := []string{"alpha ", "bravo ", "charlie ", "delta ", "echo ", "foxtrot ", "golf ", "hotel "}
	for b.Len() < n {
		b.WriteString(words[rnd.IntN(len(words))])
	}
	return b.String()
}

// sample records a sampled write (at most 100,000 are kept).
func (g *Generator) sample(w Write) {
	w.At = time.Now()
	g.mu.Lock()
	if len(g.samples) < 100000 {
		g.samples = append(g.samples, w)
	}
	g.mu.Unlock()
}

// one performs one random operation on the shard owning a random workspace
// (with RowsPerOp > 1, one bulk operation).
func (g *Generator) one(ctx context.Context, rnd *rand.Rand) error {
	if g.cfg.RowsPerOp > 1 {
		return g.bulk(ctx, rnd)
	}
	switch r := rnd.Float64(); {
	case r < g.cfg.MoveShare:
		return g.move(ctx, rnd)
	case r < g.cfg.MoveShare+g.cfg.LegacyShare:
		return g.legacyNote(ctx, rnd)
	}
	ws := g.workspace(rnd)
	shard := g.cfg.Ring.OwnerInt64(ws)
	pool := g.pools[shard]
	var table string
	var id int64
	var err error
	switch op := rnd.IntN(100); {
	case op < 25: // new document
		table = g.names.Documents
		size := 200
		if rnd.IntN(3) == 0 {
			size = g.cfg.BodyBytes
		}
		err = pool.QueryRow(ctx, `INSERT INTO `+g.docsT+` (workspace_id, title, body) VALUES ($1, $2, $3) RETURNING id`,
			ws, fmt.Sprintf("doc %d in ws %d", rnd.IntN(1e6), ws), body(rnd, size)).Scan(&id)
		if err == nil {
			g.add(g.docs, shard, id)
			g.Stats.DocsCreated.Add(1)
		}
	case op < 40: // retitle (body unchanged: TOAST marker downstream)
		table = g.names.Documents
		var ok bool
		if id, ok = g.pick(g.docs, shard, rnd, false); !ok {
			return nil
		}
		_, err = pool.Exec(ctx, `UPDATE `+g.docsT+` SET title = $2, updated_at = now() WHERE id = $1`, id, fmt.Sprintf("retitled %d", rnd.IntN(1e6)))
		g.Stats.DocsEdited.Add(1)
	case op < 48: // new large body
		table = g.names.Documents
		var ok bool
		if id, ok = g.pick(g.docs, shard, rnd, false); !ok {
			return nil
		}
		_, err = pool.Exec(ctx, `UPDATE `+g.docsT+` SET body = $2, updated_at = now() WHERE id = $1`, id, body(rnd, g.cfg.BodyBytes))
		g.Stats.DocsEdited.Add(1)
	case op < 53: // delete
		table = g.names.Documents
		var ok bool
		if id, ok = g.pick(g.docs, shard, rnd, true); !ok {
			return nil
		}
		_, err = pool.Exec(ctx, `DELETE FROM `+g.docsT+` WHERE id = $1`, id)
		g.Stats.DocsDel.Add(1)
	case op < 80: // issue an invoice
		table = g.names.Invoices
		cur := []string{"EUR", "USD", "GBP"}[rnd.IntN(3)]
		amount := fmt.Sprintf("%d.%02d", 1+rnd.IntN(5000), rnd.IntN(100))
		err = pool.QueryRow(ctx, `INSERT INTO `+g.invT+` (workspace_id, amount, currency, status, issued_at)
			VALUES ($1, $2::numeric, $3, 'issued', now()) RETURNING id`, ws, amount, cur).Scan(&id)
		if err == nil {
			g.add(g.issued, shard, id)
			g.Stats.InvIssued.Add(1)
		}
	case op < 95: // pay
		table = g.names.Invoices
		var ok bool
		if id, ok = g.pick(g.issued, shard, rnd, true); !ok {
			return nil
		}
		_, err = pool.Exec(ctx, `UPDATE `+g.invT+` SET status = 'paid', paid_at = now() WHERE id = $1`, id)
		if err == nil {
			g.add(g.paid, shard, id)
			g.Stats.InvPaid.Add(1)
		}
	default: // refund
		table = g.names.Invoices
		var ok bool
		if id, ok = g.pick(g.paid, shard, rnd, true); !ok {
			return nil
		}
		_, err = pool.Exec(ctx, `UPDATE `+g.invT+` SET status = 'refunded' WHERE id = $1`, id)
		g.Stats.InvRefunded.Add(1)
	}
	if err != nil {
		return fmt.Errorf("shard %d %s: %w", shard, table, err)
	}
	g.Stats.Rows.Add(1)
	if rnd.IntN(100) == 0 { // sample 1%: position after commit
		var lsn string
		if err := pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err == nil {
			g.sample(Write{Shard: shard, Table: table, ID: id, LSN: lsn})
		}
	}
	return nil
}
