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
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

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

// PreaggIDKind is how the ids of a revenue table map to blocks.
type PreaggIDKind string

// The id kinds the pre-aggregates handle.
const (
	// PreaggInteger: a block is the id shifted right by the block bits.
	PreaggInteger PreaggIDKind = "integer"
	// PreaggUUID: a block is the uuid's first 64 bits (for UUIDv7, its
	// creation time) shifted right by the block bits.
	PreaggUUID PreaggIDKind = "uuid"
)

// ErrPreaggUnsupportedID: the id column's type has no block function.
var ErrPreaggUnsupportedID = errors.New("id column type has no pre-aggregate blocks")

// PreaggIDKindOf returns the kind of ids of the ClickHouse type typ.
func PreaggIDKindOf(typ string) (PreaggIDKind, error) {
	switch typ {
	case "Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64":
		return PreaggInteger, nil
	case "UUID":
		return PreaggUUID, nil
	}
	return "", fmt.Errorf("%w: %s (integers and UUID have; composite identities are not supported yet)", ErrPreaggUnsupportedID, typ)
}

// PreaggBlockExpr is the block of the id column col in SQL: the same
// function as preagg.BlockOf in Go. For a uuid, its text's first 16 hex
// digits, read as a big-endian UInt64 (18.16 and current ClickHouse give
// the same text; their UUID ordering is not the text's, so uuid blocks are
// selected by this expression, not by id ranges).
func PreaggBlockExpr(kind PreaggIDKind, col string, bits int) string {
	id := quote(col)
	if kind == PreaggUUID {
		s := "toString(" + id + ")"
		return fmt.Sprintf("toInt64(bitShiftRight(reinterpretAsUInt64(reverse(unhex(concat(substring(%[1]s, 1, 8), substring(%[1]s, 10, 4), substring(%[1]s, 15, 4))))), %[2]d))", s, bits)
	}
	return fmt.Sprintf("toInt64(bitShiftRight(%s, %d))", id, bits)
}

// preaggBlocksWhere restricts the revenue table to the given blocks
// (sorted): integer ids by id ranges (a primary-key range read), uuids by
// the block expression.
func preaggBlocksWhere(kind PreaggIDKind, col string, bits int, blocks []int64) (string, []any) {
	if kind == PreaggUUID {
		set := clickhouse.GroupSet{Value: make([]any, len(blocks))}
		for i, b := range blocks {
			set.Value[i] = b
		}
		return PreaggBlockExpr(kind, col, bits) + " IN ?", []any{set}
	}
	id := quote(col)
	var ranges []string
	for i := 0; i < len(blocks); {
		j := i
		for j+1 < len(blocks) && blocks[j+1] == blocks[j]+1 {
			j++
		}
		ranges = append(ranges, fmt.Sprintf("(%s >= %d AND %s < %d)", id, blocks[i]<<bits, id, (blocks[j]+1)<<bits))
		i = j + 1
	}
	return "(" + strings.Join(ranges, " OR ") + ")", nil
}

// PreaggRead is how a revenue request reads the pre-aggregates: the block
// layout the state was computed under and the blocks to read live.
type PreaggRead struct {
	IDColumn string
	Kind     PreaggIDKind
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

// PreaggState is the pre-aggregates' freshness: per shard, the watermark
// the last round recomputed up to.
type PreaggState struct {
	Freshness   []ShardFreshness
	RingVersion int64
	Computed    time.Time
	// Kind and Bits are the block layout of the stored blocks ("" and 0:
	// unknown, written before the layout was recorded).
	Kind PreaggIDKind
	Bits int
}

// ReadPreaggState reads the state of table's pre-aggregates; nil when none
// was computed (or the tables do not exist).
func (q *Queries) ReadPreaggState(ctx context.Context, table string) (*PreaggState, error) {
	rows, err := q.conn.Query(ctx, fmt.Sprintf(`SELECT shard, argMax(lsn, computed), argMax(commit_ts, computed),
		argMax(ring_version, computed), max(computed), argMax(id_kind, computed), argMax(block_bits, computed)
		FROM %s.%s WHERE source_table = ? GROUP BY shard ORDER BY shard`,
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
		var kind string
		var bits uint8
		if err := rows.Scan(&shard, &lsn, &ts, &ring, &computed, &kind, &bits); err != nil {
			return nil, fmt.Errorf("read pre-aggregate state: %w", err)
		}
		if st == nil {
			st = &PreaggState{}
		}
		st.Freshness = append(st.Freshness, FreshnessAt(int(shard), envelope.LSN(lsn), ts, true))
		st.RingVersion = ring
		if len(st.Freshness) == 1 {
			st.Kind, st.Bits = PreaggIDKind(kind), int(bits)
		} else if st.Kind != PreaggIDKind(kind) || st.Bits != int(bits) {
			st.Kind, st.Bits = "", 0 // shards written under different layouts: mid-change
		}
		if c := time.Unix(0, int64(computed)).UTC(); c.After(st.Computed) {
			st.Computed = c
		}
	}
	return st, rows.Err()
}

// PreaggDirty returns the blocks of table marked after st's watermarks
// (sorted), on the shards st has and on any it lacks; all is true when an
// all-blocks mark (a TRUNCATE, a snapshot end) is among them, or when
// there are more than limit: the caller then answers from the live query.
func (q *Queries) PreaggDirty(ctx context.Context, table string, st *PreaggState, limit int) (blocks []int64, all bool, err error) {
	conds := make([]string, 0, len(st.Freshness)+1)
	args := []any{table}
	known := clickhouse.GroupSet{}
	for _, f := range st.Freshness {
		conds = append(conds, "(shard = ? AND commit_lsn > ?)")
		args = append(args, uint16(f.Shard), uint64(f.LSN()))
		known.Value = append(known.Value, uint16(f.Shard))
	}
	conds = append(conds, "shard NOT IN ?")
	args = append(args, known)
	rows, err := q.conn.Query(ctx, fmt.Sprintf("SELECT DISTINCT block FROM %s.%s WHERE source_table = ? AND (%s) ORDER BY block LIMIT %d",
		quote(q.db), PreaggMarksTable, strings.Join(conds, " OR "), limit+1), args...)
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
	if err != nil && isUnknownTable(err) {
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
		args = append(args, groupSet(req.Currencies))
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
		quote(db), quote(PreaggBlocksTable(cfg.Table)), join, strings.Join(where, " AND ")), req.MaxRows)
	p.args = args
	return p
}

// PreaggRecompute is the query that recomputes blocks of the revenue table
// (all of them when blocks is nil): per block, day, shard and currency, the
// kept and refunds sums and the row count of the live, owned rows, exactly
// as the live query counts them. Its columns: block, day, shard, currency,
// kept, refunds, count.
func PreaggRecompute(db string, cfg *tables.Revenue, kind PreaggIDKind, idColumn, shardKey string, bits int, blocks []int64) (string, []any) {
	tcol := quote(cfg.TimeColumn)
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
		w, a := preaggBlocksWhere(kind, idColumn, bits, blocks)
		where = append(where, w)
		whereArgs = append(whereArgs, a...)
	}
	sql := fmt.Sprintf(`SELECT %s AS __b, toDate(toDateTime(assumeNotNull(%s), 'UTC')) AS __d, _shard, %s AS __c, %s
		FROM %s.%s FINAL WHERE %s GROUP BY __b, __d, _shard, __c`,
		PreaggBlockExpr(kind, idColumn, bits), tcol, cur, strings.Join(sums, ", "), quote(db), quote(cfg.Table), strings.Join(where, " AND "))
	return sql, append(selArgs, whereArgs...)
}

// DecimalScale returns the scale of a ClickHouse Decimal type name.
func DecimalScale(typ string) (int32, bool) { return decimalScale(typ) }
