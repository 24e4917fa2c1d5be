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
// (workspaces, status filters, bounds inside a day, read-your-writes waits)
// runs the live FINAL query.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/tables"
)

// Pre-aggregate tables (the blocks table is per revenue table, since its
// arrays have the amount's Decimal scale).
const (
	PreaggMarksTable = "_revenue_marks"
	PreaggStateTable = "_revenue_state"
)

// PreaggBlocksTable is the blocks table of a revenue table.
func PreaggBlocksTable(table string) string { return "_revenue_" + table }

// PreaggEligible says whether the pre-aggregates can answer req exactly.
func PreaggEligible(req RevenueRequest) bool {
	midnight := func(t time.Time) bool { t = t.UTC(); return t.Equal(t.Truncate(24 * time.Hour)) }
	return len(req.Workspaces) == 0 && len(req.Statuses) == 0 && !slices.Contains(req.GroupBy, GroupWorkspace) &&
		midnight(req.From) && midnight(req.To)
}

// PreaggState is the pre-aggregates' freshness: per shard, the watermark
// the last round recomputed up to.
type PreaggState struct {
	Freshness   []ShardFreshness
	RingVersion int64
	Computed    time.Time
}

// ReadPreaggState reads the state of table's pre-aggregates; nil when none
// was computed (or the tables do not exist).
func (q *Queries) ReadPreaggState(ctx context.Context, table string) (*PreaggState, error) {
	rows, err := q.conn.Query(ctx, fmt.Sprintf(`SELECT shard, argMax(lsn, computed), argMax(commit_ts, computed),
		argMax(ring_version, computed), max(computed) FROM %s.%s WHERE source_table = ? GROUP BY shard ORDER BY shard`,
		quote(q.db), PreaggStateTable), table)
	if err != nil {
		if isUnknownTable(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read pre-aggregate state: %w", err)
	}
	defer rows.Close()
	var st *PreaggState
	for rows.Next() {
		var shard uint16
		var lsn, computed uint64
		var ts time.Time
		var ring int64
		if err := rows.Scan(&shard, &lsn, &ts, &ring, &computed); err != nil {
			return nil, fmt.Errorf("read pre-aggregate state: %w", err)
		}
		if st == nil {
			st = &PreaggState{}
		}
		st.Freshness = append(st.Freshness, FreshnessAt(int(shard), envelope.LSN(lsn), ts, true))
		st.RingVersion = ring
		if c := time.Unix(0, int64(computed)).UTC(); c.After(st.Computed) {
			st.Computed = c
		}
	}
	return st, rows.Err()
}

// RingVersion is the newest ring version ownership of table is stored
// under (0: none). Pre-aggregates computed under another version count
// rows by outdated ownership and must not answer.
func (q *Queries) RingVersion(ctx context.Context, table string) (int64, error) {
	v, err := chstore.RingVersion(ctx, q.conn, q.db, table)
	if err != nil && isUnknownTable(err) {
		return 0, nil
	}
	return v, err
}

// planPreagg builds the read of the pre-aggregates: the same result columns
// as planRevenue's, so that Revenue reads either alike.
func planPreagg(db string, cfg *tables.Revenue, req RevenueRequest) revenuePlan {
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
		args = append(args, groupSet(req.Currencies))
	}
	p.finish(fmt.Sprintf("SELECT %s FROM %s.%s FINAL ARRAY JOIN %s WHERE %s", strings.Join(sel, ", "),
		quote(db), quote(PreaggBlocksTable(cfg.Table)), join, strings.Join(where, " AND ")), req.MaxRows)
	p.args = args
	return p
}

// PreaggRecompute is the query that recomputes blocks of the revenue table
// (all of them when blocks is nil): per block, day, shard and currency, the
// kept and refunds sums and the row count of the live, owned rows, exactly
// as the live query counts them. Its columns: block, day, shard, currency,
// kept, refunds, count.
func PreaggRecompute(db string, cfg *tables.Revenue, idColumn, shardKey string, bits int, blocks []int64) (string, []any) {
	id, tcol := quote(idColumn), quote(cfg.TimeColumn)
	cur := "''"
	if cfg.CurrencyColumn != "" {
		cur = "ifNull(upper(" + quote(cfg.CurrencyColumn) + "), '')"
	}
	var count, refund []string
	if cfg.StatusColumn != "" {
		count, refund = cfg.CountStatuses, cfg.RefundStatuses
	}
	sums, selArgs, where, whereArgs := revenueSums(cfg, count, refund)
	where = append([]string{"_deleted = 0", tcol + " IS NOT NULL"}, where...)
	if shardKey != "" {
		where = append(where, chstore.OwnedWhere(db, shardKey))
		whereArgs = append(whereArgs, chstore.PlacementArgs(cfg.Table, 2)...)
	}
	if blocks != nil {
		// Id ranges, not intDiv(id) IN: a primary-key range read.
		var ranges []string
		for i := 0; i < len(blocks); {
			j := i
			for j+1 < len(blocks) && blocks[j+1] == blocks[j]+1 {
				j++
			}
			ranges = append(ranges, fmt.Sprintf("(%s >= %d AND %s < %d)", id, blocks[i]<<bits, id, (blocks[j]+1)<<bits))
			i = j + 1
		}
		where = append(where, "("+strings.Join(ranges, " OR ")+")")
	}
	sql := fmt.Sprintf(`SELECT intDiv(%s, %d) AS __b, toDate(toDateTime(assumeNotNull(%s), 'UTC')) AS __d, _shard, %s AS __c, %s
		FROM %s.%s FINAL WHERE %s GROUP BY __b, __d, _shard, __c`,
		id, int64(1)<<bits, tcol, cur, strings.Join(sums, ", "), quote(db), quote(cfg.Table), strings.Join(where, " AND "))
	return sql, append(selArgs, whereArgs...)
}

// DecimalScale returns the scale of a ClickHouse Decimal type name.
func DecimalScale(typ string) (int32, bool) { return decimalScale(typ) }
