package query

import (
	"strings"
	"testing"

	"github.com/tributary/tributary/internal/tables"
)

// TestPlanRowWithMoves: the read with the move count is Row's read (the
// same FINAL, PREWHERE on the id alone, tombstone filter and order) with
// one more column, the index's count of rows naming the id; the id is
// bound twice, the count first.
func TestPlanRowWithMoves(t *testing.T) {
	l := &MoveLog{Moves: &tables.Moves{DocumentColumn: "document_id"},
		Log: &tables.Table{Name: "document_moves", IDColumn: "move_id"}, Documents: &tables.Table{Name: "documents", IDColumn: "id"}}
	sql := planRowWithMoves("db", l)
	count := ", (SELECT count() FROM `db`.`_document_moves_by_document` WHERE document = ?) AS " + movesColumn
	if !strings.Contains(sql, count) {
		t.Fatalf("planRowWithMoves lacks the index count %q:\n%s", count, sql)
	}
	if row := strings.Replace(sql, count, "", 1); row != planRow("db", "documents", "id", "") {
		t.Fatalf("planRowWithMoves without the count is not Row's read:\n got %s\nwant %s", row, planRow("db", "documents", "id", ""))
	}
	if strings.Index(sql, count) > strings.Index(sql, "PREWHERE") {
		t.Fatalf("the count must be bound before the id of the read: %s", sql)
	}
}
