package query

// Revenue from exact pre-aggregates (internal/preagg writes them; design in
// schema/clickhouse.md, "Revenue at scale").
//
// One row per id block of the revenue table — ids in [b·2^bits,
// (b+1)·2^bits) — holds the block's kept (net), refunds and row count by
// (day, currency) and by (day, shard, currency), in arrays, recomputed
// whole from the table with FINAL (never a delta). Since an id never leaves
// its block, every version of a row is in one block, and a recomputed
// block is exact as of the watermarks recorded with the round. A request
// that the arrays can answer (UTC day bounds; day, week, month, shard and
// currency groups; currency filters) is read from them; anything else
// (workspaces, status filters, bounds inside a day) runs the live FINAL
// query.
//
// Never staler than the table: the blocks marked after the state's
// watermarks (PreaggDirty) are read live — the live query restricted to
// their ids — and the pre-aggregates answer for every other block, so the
// answer holds every change the table's watermarks hold, whatever the
// aggregator's lag. Why that is exact: marks precede their rows, and a
// round that took a mark at or below its watermark W recomputed the block
// after reading W, so after every row of the mark's batch was inserted. A
// row in the table is therefore either in its block's stored sums, or in a
// batch whose mark for the block is above W, which makes the block dirty.
// Marks are read after the answer's watermarks, so every row up to them
// has its mark visible.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/revenueblocks"
	"github.com/tributary/tributary/internal/tables"
)

// PreaggRead is how a revenue request reads the pre-aggregates: the block
// layout the state was computed under and the blocks to read live.
type PreaggRead struct {
	IDColumn string
	Kind     revenueblocks.IDKind
	Bits     int
	// Dirty are the blocks marked after the state's watermarks, sorted.
	Dirty []int64
}

// PreaggEligible says whether the pre-aggregates can answer req exactly.
func PreaggEligible(req RevenueRequest) bool {
	midnight := func(t time.Time) bool { t = t.UTC(); return t.Equal(t.Truncate(24 * time.Hour)) }
	return len(req.Workspaces) == 0 && len(req.Statuses) == 0 && !slices.Contains(req.GroupBy, GroupWorkspace) &&
		midnight(req.From) && midnight(req.To)
}

// ReadPreaggState reads the state of table's pre-aggregates; nil when none
// was computed (or the tables do not exist).
func (q *Queries) ReadPreaggState(ctx context.Context, table string) (*revenueblocks.State, error) {
	return revenueblocks.ReadState(ctx, q.conn, q.db, table)
}

// PreaggDirty returns the blocks of table marked after st's watermarks
// (sorted), on the shards st has and on any it lacks; all is true when an
// all-blocks mark (a TRUNCATE, a snapshot end) is among them, or when
// there are more than limit: the caller then answers from the live query.
func (q *Queries) PreaggDirty(ctx context.Context, table string, st *revenueblocks.State, limit int) (blocks []int64, all bool, err error) {
	conds := make([]string, 0, len(st.Shards)+1)
	args := []any{table}
	known := clickhouse.GroupSet{}
	for _, f := range st.Shards {
		conds = append(conds, "(shard = ? AND commit_lsn > ?)")
		args = append(args, uint16(f.Shard), uint64(f.LSN))
		known.Value = append(known.Value, uint16(f.Shard))
	}
	conds = append(conds, "shard NOT IN ?")
	args = append(args, known)
	rows, err := q.conn.Query(ctx, fmt.Sprintf("SELECT DISTINCT block FROM %s.%s WHERE source_table = ? AND (%s) ORDER BY block LIMIT %d",
		quote(q.db), revenueblocks.MarksTable, strings.Join(conds, " OR "), limit+1), args...)
	if err != nil {
		return nil, false, fmt.Errorf("read revenue marks: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var b int64
		if err := rows.Scan(&b); err != nil {
			return nil, false, fmt.Errorf("read revenue marks: %w", err)
		}
		if b < 0 {
			return nil, true, nil
		}
		blocks = append(blocks, b)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("read revenue marks: %w", err)
	}
	return blocks, len(blocks) > limit, nil
}

// RingVersion is the newest ring version ownership of table is stored
// under (0: none). Pre-aggregates computed under another version count
// rows by outdated ownership and must not answer.
func (q *Queries) RingVersion(ctx context.Context, table string) (int64, error) {
	v, err := chstore.RingVersion(ctx, q.conn, q.db, table)
	if err != nil && chstore.IsUnknownTable(err) {
		return 0, nil
	}
	return v, err
}

// planPreagg builds the read of the pre-aggregates: the same result columns
// as planRevenue's, so that Revenue reads either alike.
func planPreagg(db string, cfg *tables.Revenue, req RevenueRequest, exclude []int64) revenuePlan {
	p := revenuePlan{groupBy: slices.Clone(req.GroupBy)}
	if !slices.Contains(p.groupBy, GroupCurrency) {
		p.groupBy = append(p.groupBy, GroupCurrency)
	}
	if cfg.StatusColumn != "" {
		p.count, p.refund = slices.Clone(cfg.CountStatuses), slices.Clone(cfg.RefundStatuses)
	}
	if cfg.CurrencyColumn == "" && len(req.Currencies) > 0 && !slices.Contains(req.Currencies, cfg.Currency) {
		p.empty = true
	}
	byShard := slices.Contains(p.groupBy, GroupShard)
	var sel []string
	for i, g := range p.groupBy {
		var expr string
		switch g {
		case GroupDay:
			expr = "d"
		case GroupWeek:
			expr = "toMonday(d)"
		case GroupMonth:
			expr = "toStartOfMonth(d)"
		case GroupShard:
			expr = "sh"
		case GroupCurrency:
			if cfg.CurrencyColumn == "" {
				continue
			}
			expr = "c"
		default:
			continue // not eligible; never reach SQL
		}
		sel = append(sel, fmt.Sprintf("%s AS %s%d", expr, aliasPrefix, len(p.keys)))
		p.keys = append(p.keys, g)
		p.keyPos = append(p.keyPos, i)
	}
	sel = append(sel, "sum(k) AS "+aliasPrefix+"kept", "sum(r) AS "+aliasPrefix+"refunds", "sum(n) AS "+aliasPrefix+"invoices")
	join := "day AS d, currency AS c, kept AS k, refunds AS r, invoices AS n"
	if byShard {
		join = "s_day AS d, s_shard AS sh, s_currency AS c, s_kept AS k, s_refunds AS r, s_invoices AS n"
	}
	where := []string{"source_table = ?", "d >= toDate(?)", "d < toDate(?)"}
	args := []any{cfg.Table, req.From.UTC().Format(time.DateOnly), req.To.UTC().Format(time.DateOnly)}
	if len(req.Currencies) > 0 && cfg.CurrencyColumn != "" {
		where = append(where, "c IN ?")
		args = append(args, revenueblocks.GroupSet(req.Currencies))
	}
	if len(exclude) > 0 {
		set := clickhouse.GroupSet{Value: make([]any, len(exclude))}
		for i, b := range exclude {
			set.Value[i] = b
		}
		where = append(where, "block NOT IN ?")
		args = append(args, set)
	}
	p.finish(fmt.Sprintf("SELECT %s FROM %s.%s FINAL ARRAY JOIN %s WHERE %s", strings.Join(sel, ", "),
		quote(db), quote(revenueblocks.BlocksTable(cfg.Table)), join, strings.Join(where, " AND ")), req.MaxRows)
	p.args = args
	return p
}
