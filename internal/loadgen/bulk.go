package loadgen

// Bulk traffic (Config.RowsPerOp > 1): each operation is one transaction
// on one shard that changes RowsPerOp rows of the demo tables, so that a
// benchmark can offer tens of thousands of row changes per second without
// paying PostgreSQL's per-transaction cost (and the generator's per-call
// cost) for each of them. It exists to measure the pipeline behind the
// shards (reader -> Kafka -> loader -> ClickHouse), not the shards.
//
// The rows changed are what the realistic traffic does, in one
// transaction: documents and invoices inserted with multi-row INSERTs
// whose ids come from the column default (tributary.next_id(): the same
// global Snowflake ids the single-row traffic gets), documents retitled
// and deleted, invoices paid and refunded. The demo's semantics hold, so
// cmd/verify still agrees after bulk traffic: every row is written on the
// shard that owns its workspace by the ring map, invoices move only
// issued -> paid -> refunded, and a document is deleted at most once.
//
// No two transactions in flight touch the same existing row: the ids an
// operation updates or deletes are taken out of the generator's lists for
// the duration of its transaction (and put back, or moved on, after it),
// so concurrent bulk transactions never wait on each other's row locks and
// cannot deadlock.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Row kinds of a bulk operation, in the order its statements run.
const (
	bulkDocInsert = iota
	bulkDocRetitle
	bulkDocDelete
	bulkInvInsert
	bulkInvPay
	bulkInvRefund
	bulkKinds
)

// bulkWeights is the share of each kind in a bulk operation's rows
// (percent): 55% inserts, 40% updates, 5% deletes, close to the
// single-row mix.
var bulkWeights = [bulkKinds]int{
	bulkDocInsert:  25,
	bulkDocRetitle: 15,
	bulkDocDelete:  5,
	bulkInvInsert:  30,
	bulkInvPay:     20,
	bulkInvRefund:  5,
}

// splitRows splits n rows over the kinds in proportion to weights, by
// cumulative rounding: the parts always add up to n exactly, and over many
// operations each kind gets its share even when n is small.
func splitRows(n int, weights [bulkKinds]int) [bulkKinds]int {
	var out [bulkKinds]int
	total := 0
	for _, w := range weights {
		total += w
	}
	if n <= 0 || total <= 0 {
		return out
	}
	cum, prev := 0, 0
	for i, w := range weights {
		cum += w
		upto := (n*cum + total/2) / total
		out[i] = upto - prev
		prev = upto
	}
	return out
}

// bulkPlan is what one bulk operation changes: the rows of each kind,
// capped by the existing rows available for updates and deletes; what an
// update cannot find goes to the inserts of its table, so the operation
// still changes n rows.
func bulkPlan(n int, docs, issued, paid int) [bulkKinds]int {
	p := splitRows(n, bulkWeights)
	limit := func(k, avail, into int) int {
		if p[k] > avail {
			p[into] += p[k] - avail
			p[k] = avail
		}
		return avail - p[k]
	}
	docs = limit(bulkDocRetitle, docs, bulkDocInsert)
	limit(bulkDocDelete, docs, bulkDocInsert)
	limit(bulkInvPay, issued, bulkInvInsert)
	limit(bulkInvRefund, paid, bulkInvInsert)
	return p
}

// takeWindow removes k ids from l starting at i (a contiguous window, so
// they are distinct) and returns them and what is left; the hole is filled
// from the tail, so it costs O(k), and the order of l changes.
func takeWindow(l []int64, i, k int) (taken, rest []int64) {
	if k <= 0 || len(l) == 0 {
		return nil, l
	}
	k = min(k, len(l))
	i = min(max(i, 0), len(l)-k)
	taken = append([]int64(nil), l[i:i+k]...)
	n := len(l)
	// Fill [i, i+k) with the last elements outside the window.
	tail := max(i+k, n-k)
	copy(l[i:], l[tail:n])
	return taken, l[:n-k]
}

// checkout takes k random ids of shard from list for one transaction.
func (g *Generator) checkout(list map[int][]int64, shard, k int, rnd *rand.Rand) []int64 {
	if k <= 0 {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	l := list[shard]
	if len(l) == 0 {
		return nil
	}
	taken, rest := takeWindow(l, rnd.IntN(len(l)), k)
	list[shard] = rest
	return taken
}

func (g *Generator) addAll(list map[int][]int64, shard int, ids []int64) {
	if len(ids) == 0 {
		return
	}
	g.mu.Lock()
	list[shard] = append(list[shard], ids...)
	g.mu.Unlock()
}

func (g *Generator) available(shard int) (docs, issued, paid int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.docs[shard]), len(g.issued[shard]), len(g.paid[shard])
}

// ownedWorkspaces lists, per shard, the workspaces 1..Workspaces that the
// ring map places there.
func (g *Generator) ownedWorkspaces() map[int][]int64 {
	out := map[int][]int64{}
	for ws := int64(1); ws <= int64(max(1, g.cfg.Workspaces)); ws++ {
		s := g.cfg.Ring.OwnerInt64(ws)
		out[s] = append(out[s], ws)
	}
	return out
}

// bulk performs one bulk operation: one transaction on the shard owning a
// random workspace, changing g.cfg.RowsPerOp rows.
func (g *Generator) bulk(ctx context.Context, rnd *rand.Rand) error {
	ws := g.workspace(rnd)
	shard := g.cfg.Ring.OwnerInt64(ws)
	owned := g.owned[shard]
	rowWS := func() int64 { // the op's workspace for a third of the rows (hot ones stay hot)
		if rnd.IntN(3) == 0 || len(owned) == 0 {
			return ws
		}
		return owned[rnd.IntN(len(owned))]
	}
	docs, issued, paid := g.available(shard)
	plan := bulkPlan(g.cfg.RowsPerOp, docs, issued, paid)
	// Existing rows, out of the lists while the transaction runs.
	retitle := g.checkout(g.docs, shard, plan[bulkDocRetitle], rnd)
	del := g.checkout(g.docs, shard, plan[bulkDocDelete], rnd)
	pay := g.checkout(g.issued, shard, plan[bulkInvPay], rnd)
	refund := g.checkout(g.paid, shard, plan[bulkInvRefund], rnd)
	// Another operation may have taken ids between available and checkout:
	// insert instead, so the operation still changes RowsPerOp rows.
	plan[bulkDocInsert] += plan[bulkDocRetitle] - len(retitle) + plan[bulkDocDelete] - len(del)
	plan[bulkInvInsert] += plan[bulkInvPay] - len(pay) + plan[bulkInvRefund] - len(refund)

	// One round trip for every statement; the callbacks run as the
	// results arrive, when the batch is closed.
	b := &pgx.Batch{}
	var newDocs, newInv []int64
	var changed int64 // rows the statements reported
	ids := func(into *[]int64) func(pgx.Rows) error {
		return func(rows pgx.Rows) error {
			var err error
			*into, err = pgx.AppendRows(*into, rows, pgx.RowTo[int64])
			changed += int64(len(*into))
			return err
		}
	}
	count := func(ct pgconn.CommandTag) error {
		changed += ct.RowsAffected()
		return nil
	}
	if n := plan[bulkDocInsert]; n > 0 {
		wss, titles, bodies := make([]int64, n), make([]string, n), make([]string, n)
		for i := range n {
			wss[i] = rowWS()
			titles[i] = "bulk doc " + strconv.Itoa(rnd.IntN(1e6)) + " in ws " + strconv.FormatInt(wss[i], 10)
			bodies[i] = body(rnd, g.cfg.BulkBodyBytes)
		}
		b.Queue(`INSERT INTO `+g.docsT+` (workspace_id, title, body)
			SELECT w, t, b FROM unnest($1::bigint[], $2::text[], $3::text[]) AS u(w, t, b) RETURNING id`,
			wss, titles, bodies).Query(ids(&newDocs))
	}
	if len(retitle) > 0 {
		b.Queue(`UPDATE `+g.docsT+` SET title = 'retitled ' || (random() * 1e6)::int, updated_at = now() WHERE id = ANY($1)`,
			retitle).Exec(count)
	}
	if len(del) > 0 {
		b.Queue(`DELETE FROM `+g.docsT+` WHERE id = ANY($1)`, del).Exec(count)
	}
	if n := plan[bulkInvInsert]; n > 0 {
		wss, amounts, curs := make([]int64, n), make([]string, n), make([]string, n)
		for i := range n {
			wss[i] = rowWS()
			amounts[i] = fmt.Sprintf("%d.%02d", 1+rnd.IntN(5000), rnd.IntN(100))
			curs[i] = []string{"EUR", "USD", "GBP"}[rnd.IntN(3)]
		}
		b.Queue(`INSERT INTO `+g.invT+` (workspace_id, amount, currency, status, issued_at)
			SELECT w, a::numeric, c, 'issued', now() FROM unnest($1::bigint[], $2::text[], $3::text[]) AS u(w, a, c) RETURNING id`,
			wss, amounts, curs).Query(ids(&newInv))
	}
	if len(pay) > 0 {
		b.Queue(`UPDATE `+g.invT+` SET status = 'paid', paid_at = now() WHERE id = ANY($1)`, pay).Exec(count)
	}
	if len(refund) > 0 {
		b.Queue(`UPDATE `+g.invT+` SET status = 'refunded' WHERE id = ANY($1)`, refund).Exec(count)
	}

	lsn, err := g.commitBatch(ctx, shard, b)
	if err != nil {
		// Rolled back: the rows are as they were.
		g.addAll(g.docs, shard, retitle)
		g.addAll(g.docs, shard, del)
		g.addAll(g.issued, shard, pay)
		g.addAll(g.paid, shard, refund)
		return fmt.Errorf("shard %d bulk: %w", shard, err)
	}
	g.addAll(g.docs, shard, retitle)
	g.addAll(g.docs, shard, newDocs)
	g.addAll(g.issued, shard, newInv)
	g.addAll(g.paid, shard, pay)
	g.Stats.DocsCreated.Add(int64(len(newDocs)))
	g.Stats.DocsEdited.Add(int64(len(retitle)))
	g.Stats.DocsDel.Add(int64(len(del)))
	g.Stats.InvIssued.Add(int64(len(newInv)))
	g.Stats.InvPaid.Add(int64(len(pay)))
	g.Stats.InvRefunded.Add(int64(len(refund)))
	g.Stats.Rows.Add(changed)
	if lsn != "" {
		table, id := g.names.Invoices, int64(0)
		if len(newDocs) > 0 {
			table, id = g.names.Documents, newDocs[0]
		} else if len(newInv) > 0 {
			id = newInv[0]
		}
		g.sample(Write{Shard: shard, Table: table, ID: id, LSN: lsn})
	}
	return nil
}

// commitBatch runs b in one transaction on shard and commits; for a 1%
// sample of operations it returns the shard's WAL position after the
// commit.
func (g *Generator) commitBatch(ctx context.Context, shard int, b *pgx.Batch) (lsn string, err error) {
	pool := g.pools[shard]
	tx, err := pool.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	// Close reads every result, runs the callbacks, and returns the first error.
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return "", err
	}
	if err := tx.Commit(ctx); err != nil {
		return "", err
	}
	if rand.IntN(100) == 0 { // sample 1%: position after commit
		if err := pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
			lsn = ""
		}
	}
	return lsn, nil
}
