package api

import (
	"strings"
	"testing"
	"time"

	"github.com/tributary/tributary/internal/query"
	"github.com/tributary/tributary/internal/tables"
)

func testMoveLog(t *testing.T) *query.MoveLog {
	t.Helper()
	cfg, err := tables.Parse([]byte(`{"tables": [
		{"name": "documents", "id_column": "id", "id_layout": "seed000"},
		{"name": "document_moves", "id_column": "move_id", "id_layout": "uuidv4"}],
		"moves": {"table": "document_moves", "documents_table": "documents", "document_column": "document_id",
			"from_shard_column": "from_shard", "to_shard_column": "to_shard", "state_column": "state",
			"in_progress_states": ["started", "copied"], "done_states": ["done"], "started_column": "started_at", "grace": "1m"}}`))
	if err != nil {
		t.Fatal(err)
	}
	l, ok := query.MoveLogOf(cfg, "documents")
	if !ok {
		t.Fatal("no move log")
	}
	return l
}

func TestParseMovesQuery(t *testing.T) {
	l := testMoveLog(t)
	now := time.Date(2026, 11, 30, 12, 0, 30, 700e6, time.UTC)
	next := cursor{kind: cursorAnomalies, filters: filterPrint("moves", "all"), time: 100, table: "document_moves", id: "m1"}.encode()
	otherKind := cursor{kind: cursorAnomalies, filters: filterPrint("moves", "stuck"), time: 100, table: "document_moves", id: "m1"}.encode()
	otherTable := cursor{kind: cursorAnomalies, filters: filterPrint("moves", "all"), time: 100, table: "documents", id: "m1"}.encode()
	cases := []struct {
		raw, err string
		kinds    int
		limit    int
	}{
		{"", "", 2, defaultAnomalyLimit},
		{"kind=all&limit=7", "", 2, 7},
		{"kind=stuck", "", 1, defaultAnomalyLimit},
		{"kind=lost", "", 1, defaultAnomalyLimit},
		{"kind=gone", "bad_kind", 0, 0},
		{"limit=0", "bad_limit", 0, 0},
		{"limit=501", "bad_limit", 0, 0},
		{"kind=stuck&kind=lost", "bad_kind", 0, 0},
		{"table=documents", "unknown_parameter", 0, 0},
		{"cursor=" + next, "", 2, defaultAnomalyLimit},
		{"kind=stuck&cursor=" + next, "bad_cursor", 0, 0},
		{"cursor=" + otherKind, "bad_cursor", 0, 0},
		{"cursor=" + otherTable, "bad_cursor", 0, 0},
		{"cursor=garbage", "bad_cursor", 0, 0},
	}
	for _, c := range cases {
		t.Run(c.raw, func(t *testing.T) {
			req, _, err := parseMovesQuery(c.raw, l, now)
			if c.err != "" {
				e, ok := err.(*Error)
				if !ok || e.Code != c.err {
					t.Fatalf("error %v, want %s", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(req.Kinds) != c.kinds || req.Limit != c.limit {
				t.Fatalf("request %+v", req)
			}
			if want := time.Date(2026, 11, 30, 11, 59, 30, 0, time.UTC); !req.Cutoff.Equal(want) {
				t.Fatalf("cutoff %s, want %s (now - grace, whole seconds)", req.Cutoff, want)
			}
			if strings.Contains(c.raw, "cursor=") && (req.After == nil || req.After.MoveID != "m1" || req.After.StartedAt.Unix() != 100) {
				t.Fatalf("after = %+v", req.After)
			}
		})
	}
}

func TestDescribeMove(t *testing.T) {
	cfg := testMoveLog(t).Moves
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	fin := now.Add(-2 * time.Minute)
	both := []query.Copy{{Shard: 0}, {Shard: 1}}
	cases := []struct {
		name         string
		move         query.Move
		all, current []query.Copy
		status, kind string
		pastGrace    bool
		hidden       int
	}{
		{"in progress, fresh", query.Move{State: "copied", FromShard: 0, ToShard: 1, StartedAt: now.Add(-10 * time.Second)},
			both, both[:1], statusMoveInProgress, "", false, 1},
		{"in progress, stuck", query.Move{State: "started", FromShard: 0, ToShard: 1, StartedAt: now.Add(-2 * time.Minute)},
			both[:1], both[:1], statusMoveInProgress, query.MoveStuck, true, 0},
		{"done, arrived", query.Move{State: "done", FromShard: 0, ToShard: 1, StartedAt: fin, FinishedAt: &fin},
			both[1:], both[1:], statusMoved, "", false, 0},
		{"done, on neither shard", query.Move{State: "done", FromShard: 0, ToShard: 1, StartedAt: fin, FinishedAt: &fin},
			nil, nil, statusMoved, query.MoveLost, true, 0},
		{"done, on neither shard, within grace", query.Move{State: "done", StartedAt: now, FinishedAt: &now},
			nil, nil, statusMoved, "", false, 0},
		{"failed", query.Move{State: "failed", StartedAt: fin}, both, both, "failed", "", false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, an := describeMove(&c.move, cfg, c.all, c.current, now)
			kind := ""
			if an != nil {
				kind = an.Kind
			}
			if st.Status != c.status || kind != c.kind || st.PastGrace != c.pastGrace || len(st.HiddenShards) != c.hidden {
				t.Fatalf("status %q anomaly %q past grace %v hidden %v", st.Status, kind, st.PastGrace, st.HiddenShards)
			}
		})
	}
}
