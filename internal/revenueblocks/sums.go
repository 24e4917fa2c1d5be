package revenueblocks

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/tables"
)

// AliasPrefix starts the names of the columns revenue queries compute, so
// that they never meet a column of the table.
const AliasPrefix = "__revenue_"

// ErrInexactAmount: the amount column is not a Decimal, so its sum could
// not be exact; revenue over it is refused, never summed.
var ErrInexactAmount = errors.New("amount column is not Decimal")

// Sums returns the three result columns every revenue query ends with —
// AliasPrefix+"kept", +"refunds" and +"invoices" — and the conditions on
// the status column: what an invoice counts for, shared by the live query
// and a block's recomputation so that both count alike. count and refund
// are the statuses counted and those counted as refunds (nil without a
// status column).
func Sums(cfg *tables.Revenue, count, refund []string) (sel []string, selArgs []any, where []string, whereArgs []any) {
	amount := chstore.Quote(cfg.AmountColumn)
	isRefund := "0"
	if cfg.StatusColumn != "" {
		scol := chstore.Quote(cfg.StatusColumn)
		where = append(where, scol+" IN ?")
		whereArgs = append(whereArgs, GroupSet(append(slices.Clone(count), refund...)))
		if len(refund) > 0 {
			isRefund = scol + " IN ?"
			selArgs = append(selArgs, GroupSet(refund), GroupSet(refund))
		}
	}
	if rc := cfg.RefundedAmountColumn; rc != "" {
		// Each row's refund; "amount - amount" is a zero of the amount's own
		// Decimal type (a literal 0 would need a supertype 18.16 lacks).
		rq := chstore.Quote(rc)
		r := fmt.Sprintf("if(%s, ifNull(%s, %s), ifNull(%s, %s - %s))", isRefund, rq, amount, rq, amount, amount)
		sel = append(sel,
			fmt.Sprintf("sum(%s - %s) AS %skept", amount, r, AliasPrefix),
			fmt.Sprintf("sum(%s) AS %srefunds", r, AliasPrefix))
	} else {
		sel = append(sel,
			fmt.Sprintf("sumIf(%s, NOT (%s)) AS %skept", amount, isRefund, AliasPrefix),
			fmt.Sprintf("sumIf(%s, %s) AS %srefunds", amount, isRefund, AliasPrefix))
	}
	sel = append(sel, fmt.Sprintf("count() AS %sinvoices", AliasPrefix))
	return sel, selArgs, where, whereArgs
}

// Recompute is the query that recomputes blocks of the revenue table in
// database db (all of them when blocks is nil): per block, day, shard and
// currency, the kept and refunds sums and the row count of the live,
// owned rows (ownership by shardKey under the ring map; "": every row),
// exactly as the live query counts them. Its columns: block, day, shard,
// currency, kept, refunds, count.
func Recompute(db string, cfg *tables.Revenue, kind IDKind, idColumn, shardKey string, bits int, blocks []int64) (string, []any) {
	tcol := chstore.Quote(cfg.TimeColumn)
	cur := "''"
	if cfg.CurrencyColumn != "" {
		cur = "ifNull(upper(" + chstore.Quote(cfg.CurrencyColumn) + "), '')"
	}
	var count, refund []string
	if cfg.StatusColumn != "" {
		count, refund = cfg.CountStatuses, cfg.RefundStatuses
	}
	sums, selArgs, where, whereArgs := Sums(cfg, count, refund)
	where = append([]string{"_deleted = 0", tcol + " IS NOT NULL"}, where...)
	if shardKey != "" {
		where = append(where, chstore.OwnedWhere(db, shardKey))
		whereArgs = append(whereArgs, chstore.PlacementArgs(cfg.Table, 2)...)
	}
	if blocks != nil {
		w, a := BlocksWhere(kind, idColumn, bits, blocks)
		where = append(where, w)
		whereArgs = append(whereArgs, a...)
	}
	sql := fmt.Sprintf(`SELECT %s AS __b, toDate(toDateTime(assumeNotNull(%s), 'UTC')) AS __d, _shard, %s AS __c, %s
		FROM %s.%s FINAL WHERE %s GROUP BY __b, __d, _shard, __c`,
		BlockExpr(kind, idColumn, bits), tcol, cur, strings.Join(sums, ", "), chstore.Quote(db), chstore.Quote(cfg.Table), strings.Join(where, " AND "))
	return sql, append(selArgs, whereArgs...)
}

var decimalType = regexp.MustCompile(`^(?:Nullable\()?Decimal(?:\(\d+,\s*(\d+)\)|(?:32|64|128|256)\((\d+)\))\)?$`)

// DecimalScale returns the scale of a ClickHouse Decimal type name; ok is
// false for any other type.
func DecimalScale(typ string) (scale int32, ok bool) {
	m := decimalType.FindStringSubmatch(typ)
	if m == nil {
		return 0, false
	}
	n, err := strconv.ParseInt(m[1]+m[2], 10, 32)
	if err != nil {
		return 0, false
	}
	return int32(n), true
}

// GroupSet binds a non-empty list for `x IN ?` (a slice bound to `IN (?)`
// does not work with clickhouse-go).
func GroupSet(vals []string) clickhouse.GroupSet {
	s := clickhouse.GroupSet{Value: make([]any, len(vals))}
	for i, v := range vals {
		s.Value[i] = v
	}
	return s
}
