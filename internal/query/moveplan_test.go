package query

import (
	"strings"
	"testing"
	"time"

	"github.com/tributary/tributary/internal/tables"
)

// TestMovePlansMatchTheIdentity: every read of the log matches moves on
// (move id, log shard), never the move id alone (per-shard ids collide
// across shards), and without a from-shard column the source is _shard.
func TestMovePlansMatchTheIdentity(t *testing.T) {
	l := &MoveLog{Moves: &tables.Moves{DocumentColumn: "document_id", ToShardColumn: "to_shard", StateColumn: "state",
		StartedColumn: "started_at", InProgressStates: []string{"started"}, DoneStates: []string{"done"}},
		Log: &tables.Table{Name: "moves", IDColumn: "move_id"}, Documents: &tables.Table{Name: "documents", IDColumn: "id"}}
	for name, sql := range map[string]string{"scan": planLatestMove("db", l), "index": planLatestMoveIndexed("db", l)} {
		if !strings.Contains(sql, "WHERE (`move_id`, _shard) IN (SELECT ") {
			t.Errorf("%s: the log is not read by (move id, log shard):\n%s", name, sql)
		}
		if !strings.Contains(sql, "toInt64(_shard), toString(`document_id`), toInt64(_shard), toInt64(`to_shard`)") {
			t.Errorf("%s: without a from-shard column the source must be the log row's shard:\n%s", name, sql)
		}
	}
	cond, args := planMoveAnomalies("db", l, []string{MoveStuck, MoveLost}, time.Unix(0, 0))
	if !strings.HasPrefix(cond, "(`move_id`, _shard) IN (SELECT tupleElement(_mv_force, 1), tupleElement(_mv_force, 2) FROM (SELECT argMax(") {
		t.Errorf("the listing is not restricted to the moves in force:\n%s", cond)
	}
	if n := strings.Count(cond, "?"); n != len(args) {
		t.Errorf("%d placeholders, %d arguments:\n%s", n, len(args), cond)
	}
	l.Moves.FromShardColumn = "from_shard"
	if sql := planLatestMove("db", l); !strings.Contains(sql, "toInt64(`from_shard`), toInt64(`to_shard`)") {
		t.Errorf("with a from-shard column the source is that column:\n%s", sql)
	}
}
