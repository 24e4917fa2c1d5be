// Package revenueblocks is what the writer of the revenue pre-aggregates
// (internal/preagg, run by an elected loader) and their reader
// (internal/query, run by the API) must agree on, kept in a leaf so that
// neither side imports the other: the tables, how ids map to blocks, the
// state a round records, and the SQL of what an invoice counts for, which
// the live query and a block's recomputation share so that both count
// alike. The design is in schema/clickhouse.md, "Revenue at scale".
package revenueblocks

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/tributary/tributary/internal/chstore"
)

// The pre-aggregate tables shared by every revenue table; the blocks table
// is per revenue table (BlocksTable), since its arrays have the amount's
// Decimal scale.
const (
	MarksTable = "_revenue_marks"
	StateTable = "_revenue_state"
)

// BlocksTable is the blocks table of a revenue table.
func BlocksTable(table string) string { return "_revenue_" + table }

// IDKind is how the ids of a revenue table map to blocks.
type IDKind string

// The id kinds the pre-aggregates handle.
const (
	// Integer: a block is the id shifted right by the block bits.
	Integer IDKind = "integer"
	// UUID: a block is the uuid's first 64 bits (for UUIDv7, its creation
	// time) shifted right by the block bits.
	UUID IDKind = "uuid"
)

// ErrUnsupportedID: the id column's type has no block function.
var ErrUnsupportedID = errors.New("id column type has no pre-aggregate blocks")

// KindOf returns the kind of ids of the ClickHouse type typ.
func KindOf(typ string) (IDKind, error) {
	switch typ {
	case "Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64":
		return Integer, nil
	case "UUID":
		return UUID, nil
	}
	return "", fmt.Errorf("%w: %s (integers and UUID have; composite identities are not supported yet)", ErrUnsupportedID, typ)
}

// BlockExpr is the block of the id column col in SQL: the same function as
// preagg.BlockOf in Go. For a uuid, its text's first 16 hex digits, read as
// a big-endian UInt64 (18.16 and current ClickHouse give the same text;
// their UUID ordering is not the text's, so uuid blocks are selected by
// this expression, not by id ranges).
func BlockExpr(kind IDKind, col string, bits int) string {
	id := chstore.Quote(col)
	if kind == UUID {
		s := "toString(" + id + ")"
		return fmt.Sprintf("toInt64(bitShiftRight(reinterpretAsUInt64(reverse(unhex(concat(substring(%[1]s, 1, 8), substring(%[1]s, 10, 4), substring(%[1]s, 15, 4))))), %[2]d))", s, bits)
	}
	return fmt.Sprintf("toInt64(bitShiftRight(%s, %d))", id, bits)
}

// BlocksWhere restricts the revenue table to the given blocks (sorted):
// integer ids by id ranges (a primary-key range read), uuids by the block
// expression.
func BlocksWhere(kind IDKind, col string, bits int, blocks []int64) (string, []any) {
	if kind == UUID {
		set := clickhouse.GroupSet{Value: make([]any, len(blocks))}
		for i, b := range blocks {
			set.Value[i] = b
		}
		return BlockExpr(kind, col, bits) + " IN ?", []any{set}
	}
	id := chstore.Quote(col)
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
