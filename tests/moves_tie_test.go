package tests

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestMovesWithinOneSecond: a document moved from shard 0 to 1 and, in the
// same second, on from 1 to 2 (half-done: copied, the source kept). The
// move log's times reach ClickHouse 18.16 in whole seconds, so the two
// moves tie on their start; the older one has the larger id, which is how
// ties were broken before. The answer must follow the chain: the move in
// progress is 1 -> 2, the current copy is shard 1's, shard 2's is hidden.
func TestMovesWithinOneSecond(t *testing.T) {
	mp := newMovesPipeline(t, []int{0, 1, 2})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	docs, moves := pgx.Identifier{mp.table()}.Sanitize(), pgx.Identifier{mp.movesTable}.Sanitize()
	const first, second = "ffffffff-ffff-4fff-bfff-ffffffffffff", "00000000-0000-4000-8000-000000000001"
	sec := time.Now().UTC().Truncate(time.Second).Add(-2 * time.Second)
	id := mp.insert(ctx, 0, 1, "moved twice", "body")

	// 0 -> 1, done: the copy on 1, the source row deleted, the move logged
	// on shard 0.
	mp.exec(ctx, 1, fmt.Sprintf("INSERT INTO %s (id, workspace_id, title, body) VALUES ($1, 2, 'moved twice', 'body')", docs), id)
	mp.exec(ctx, 0, fmt.Sprintf(`WITH m AS (INSERT INTO %s (move_id, document_id, from_workspace, to_workspace, from_shard, to_shard, state, started_at, finished_at)
		VALUES ($1, $2, 1, 2, 0, 1, 'done', $3, $4) RETURNING 1) DELETE FROM %s WHERE id = $2`, moves, docs),
		first, id, sec.Add(100*time.Millisecond), sec.Add(200*time.Millisecond))
	// 1 -> 2 in the same second, copied: the copy on 2, the move logged on
	// shard 1, the row on 1 kept.
	mp.exec(ctx, 1, fmt.Sprintf(`INSERT INTO %s (move_id, document_id, from_workspace, to_workspace, from_shard, to_shard, state, started_at)
		VALUES ($1, $2, 2, 3, 1, 2, 'copied', $3)`, moves), second, id, sec.Add(300*time.Millisecond))
	mp.exec(ctx, 2, fmt.Sprintf("INSERT INTO %s (id, workspace_id, title, body) VALUES ($1, 3, 'moved twice', 'body')", docs), id)

	mp.waitFor(ctx, fmt.Sprintf("/v1/tables/%s/rows/%d", mp.table(), id), "copies on shards 1 and 2", func(s int, b map[string]any) bool {
		return s == 200 && slices.Equal(copyShards(b), []int{1, 2})
	})
	b := mp.waitFor(ctx, "/v1/documents/"+strconv.FormatInt(id, 10), "both moves in the log", func(s int, b map[string]any) bool {
		m := moveOf(b)
		return s == 200 && m != nil && (m["move_id"] == second || m["move_id"] == first && len(copyShards(b)) == 2)
	})
	m := moveOf(b)
	if m["move_id"] != second || m["status"] != "move in progress" || m["from_shard"] != float64(1) || m["to_shard"] != float64(2) {
		t.Fatalf("newest move %v, want %s from shard 1 to 2 in progress", m, second)
	}
	if !slices.Equal(copyShards(b), []int{1}) || b["duplicate"] != false {
		t.Fatalf("copies %v (duplicate %v), want shard 1's only", copyShards(b), b["duplicate"])
	}
	if hidden, _ := m["hidden_copies_on_shards"].([]any); len(hidden) != 1 || hidden[0] != float64(2) {
		t.Fatalf("hidden copies %v, want [2]", m["hidden_copies_on_shards"])
	}
}
