package tests

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary/tributary/internal/loadgen"
)

// serialMovesDDL is a move log as users keep it: per-shard bigserial move
// ids and no from-shard column (the log row lives on the source shard).
const serialMovesDDL = `CREATE TABLE %s (
	move_id bigserial PRIMARY KEY,
	document_id bigint NOT NULL,
	to_shard int NOT NULL,
	state text NOT NULL DEFAULT 'started',
	started_at timestamptz NOT NULL DEFAULT now(),
	finished_at timestamptz
)`

// serialMoveLog configures serialMovesDDL: no from_shard_column.
var serialMoveLog = moveLogSpec{ddl: serialMovesDDL, idLayout: "serial", fields: `"document_column": "document_id",
	"to_shard_column": "to_shard", "state_column": "state", "in_progress_states": ["started", "copied"],
	"done_states": ["done"], "started_column": "started_at", "finished_column": "finished_at", "grace": "3s"`}

// rawMove is one move written straight to the shards of a serial move log.
type rawMove struct {
	doc, toWS    int64
	from, to     int
	state        string    // the log's state; done deletes the source row
	copied       bool      // the row was copied to the target
	started      time.Time // finished a tenth of a second later when done
	setSequence  int64     // when set, the source log's sequence is moved so that this is the move id
	wantMoveID   int64     // the move id the log must give it (0: not checked)
	documentBody string
}

// serialMove runs m on the shards: the copy (when copied), then in one
// transaction on the source the log row and, when done, the delete. It
// returns the move id the source's sequence gave.
func (mp *movesPipeline) serialMove(ctx context.Context, m rawMove) int64 {
	mp.t.Helper()
	docs, moves := pgx.Identifier{mp.table()}.Sanitize(), pgx.Identifier{mp.movesTable}.Sanitize()
	if m.copied {
		mp.exec(ctx, m.to, fmt.Sprintf("INSERT INTO %s (id, workspace_id, title, body) VALUES ($1, $2, 'moved', 'body') ON CONFLICT (id) DO NOTHING", docs),
			m.doc, m.toWS)
	}
	if m.setSequence > 0 {
		mp.exec(ctx, m.from, fmt.Sprintf("SELECT setval(pg_get_serial_sequence('%s', 'move_id'), $1)", mp.movesTable), m.setSequence-1)
	}
	var finished *time.Time
	if m.state == loadgen.StateDone {
		f := m.started.Add(100 * time.Millisecond)
		finished = &f
	}
	var id int64
	err := pgx.BeginFunc(ctx, mp.pools[m.from], func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, fmt.Sprintf("INSERT INTO %s (document_id, to_shard, state, started_at, finished_at) VALUES ($1, $2, $3, $4, $5) RETURNING move_id", moves),
			m.doc, m.to, m.state, m.started, finished).Scan(&id); err != nil {
			return err
		}
		if m.state != loadgen.StateDone {
			return nil
		}
		_, err := tx.Exec(ctx, fmt.Sprintf("DELETE FROM %s WHERE id = $1", docs), m.doc)
		return err
	})
	if err != nil {
		mp.t.Fatalf("move %d from shard %d to %d: %v", m.doc, m.from, m.to, err)
	}
	if m.wantMoveID != 0 && id != m.wantMoveID {
		mp.t.Fatalf("move of %d logged on shard %d got id %d, want %d (the test's collisions depend on it)", m.doc, m.from, id, m.wantMoveID)
	}
	return id
}

// listedMoveKeys returns "<log shard>/<move id>" -> kind from GET
// /v1/anomalies/moves.
func listedMoveKeys(body map[string]any) map[string]string {
	out := map[string]string{}
	list, _ := body["anomalies"].([]any)
	for _, a := range list {
		m := a.(map[string]any)
		shard, _ := m["log_shard"].(float64)
		out[fmt.Sprintf("%d/%s", int(shard), m["move_id"])] = m["kind"].(string)
	}
	return out
}

// moveIs reports whether the move block m is move id logged on logShard,
// of document doc, from one shard to another.
func moveIs(m map[string]any, logShard int, id string, doc int64, from, to int) bool {
	return m != nil && m["log_shard"] == float64(logShard) && m["move_id"] == id && m["document_id"] == strconv.FormatInt(doc, 10) &&
		m["from_shard"] == float64(from) && m["to_shard"] == float64(to)
}

// TestMovesSerialIDsWithoutFromShard: a move log with per-shard serial
// move ids and no from-shard column, the ids colliding across shards on
// purpose, documents moved several times, some before the initial copy.
// Each document is shown with its own move (the one in force), a chain of
// moves is judged by its newest move only, and the listing, the gauges
// and the verifier agree:
//   - C moved 1 -> 0 -> 2 within one second, before the initial copy (so
//     ClickHouse never saw it on 0): moved, live on 2, never lost; its
//     moves are ids 1 on shards 1 and 0, and the second hop is the one in
//     force although its log shard is the lower (the chain decides);
//   - D's move 0 -> 1 was left started an hour ago and superseded by a
//     move 0 -> 2 that finished: not stuck;
//   - E's move 1 -> 0 still says copied when, in the same second, a move
//     0 -> 2 takes it on and finishes: the chain makes the second the move
//     in force (although the first is in progress and its log shard the
//     higher), so nothing is stuck;
//   - A (0 -> 1, done) and B (1 -> 0, left copied, so stuck) have the same
//     move id, 5, on shards 0 and 1;
//   - L (2 -> 0, done without a copy) is lost; its move id, 1, is also
//     C's on shards 0 and 1.
func TestMovesSerialIDsWithoutFromShard(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	sec := time.Now().UTC().Truncate(time.Second).Add(-30 * time.Second)
	var c, d, e int64
	spec := serialMoveLog
	spec.before = func(ctx context.Context, mp *movesPipeline) {
		c = mp.insert(ctx, 1, 1, "moved twice before the copy", "body")
		mp.serialMove(ctx, rawMove{doc: c, toWS: 2, from: 1, to: 0, state: "done", copied: true, started: sec.Add(100 * time.Millisecond), wantMoveID: 1})
		mp.serialMove(ctx, rawMove{doc: c, toWS: 3, from: 0, to: 2, state: "done", copied: true, started: sec.Add(400 * time.Millisecond), wantMoveID: 1})
		d = mp.insert(ctx, 0, 4, "a stale move superseded", "body")
		mp.serialMove(ctx, rawMove{doc: d, toWS: 5, from: 0, to: 1, state: "started", started: sec.Add(-time.Hour), wantMoveID: 2})
		mp.serialMove(ctx, rawMove{doc: d, toWS: 6, from: 0, to: 2, state: "done", copied: true, started: sec, wantMoveID: 3})
		e = mp.insert(ctx, 1, 13, "moved on before its first move was marked done", "body")
		at := sec.Add(2 * time.Second)
		mp.serialMove(ctx, rawMove{doc: e, toWS: 14, from: 1, to: 0, state: "copied", copied: true, started: at.Add(100 * time.Millisecond), wantMoveID: 2})
		mp.exec(ctx, 1, fmt.Sprintf("DELETE FROM %s WHERE id = $1", pgx.Identifier{mp.table()}.Sanitize()), e)
		mp.serialMove(ctx, rawMove{doc: e, toWS: 15, from: 0, to: 2, state: "done", copied: true, started: at.Add(500 * time.Millisecond), wantMoveID: 4})
	}
	mp := newMovesPipelineWith(t, []int{0, 1, 2}, spec)
	doc := func(id int64) string { return "/v1/documents/" + strconv.FormatInt(id, 10) }
	mp.waitFor(ctx, doc(c), "the initial copy", func(s int, b map[string]any) bool { return s == 200 && moveOf(b) != nil })

	a := mp.insert(ctx, 0, 7, "moved once", "body")
	b := mp.insert(ctx, 1, 8, "left half-done", "body")
	l := mp.insert(ctx, 2, 9, "lost", "body")
	now := time.Now().UTC()
	mp.serialMove(ctx, rawMove{doc: a, toWS: 10, from: 0, to: 1, state: "done", copied: true, started: now.Add(-10 * time.Second), wantMoveID: 5})
	mp.serialMove(ctx, rawMove{doc: b, toWS: 11, from: 1, to: 0, state: "copied", copied: true, started: now.Add(-8 * time.Second), setSequence: 5, wantMoveID: 5})
	mp.serialMove(ctx, rawMove{doc: l, toWS: 12, from: 2, to: 0, state: "done", started: now.Add(-6 * time.Second), wantMoveID: 1})

	body := mp.waitFor(ctx, doc(b), "B stuck", func(s int, body map[string]any) bool { return s == 200 && anomalyKind(body) == "stuck" })
	if m := moveOf(body); !moveIs(m, 1, "5", b, 1, 0) || m["status"] != "move in progress" || !slices.Equal(copyShards(body), []int{1}) || body["duplicate"] != false {
		t.Fatalf("B: %v, want one copy on shard 1 with its own move 5 logged on shard 1, from 1 to 0, in progress", body)
	}
	body = mp.waitFor(ctx, doc(l), "L lost", func(s int, body map[string]any) bool {
		d, _ := body["detail"].(map[string]any)
		return s == 404 && d != nil && anomalyKind(d) == "lost"
	})
	if m := moveOf(body["detail"].(map[string]any)); !moveIs(m, 2, "1", l, 2, 0) {
		t.Fatalf("L: %v, want its own move 1 logged on shard 2", body)
	}
	for _, w := range []struct {
		name     string
		id       int64
		shard    int
		logShard int
		moveID   string
		from, to int
	}{
		{"C (1 -> 0 -> 2 before the copy)", c, 2, 0, "1", 0, 2},
		{"D (a stale move superseded)", d, 2, 0, "3", 0, 2},
		{"A (same move id as B)", a, 1, 0, "5", 0, 1},
		{"E (a move in progress continued in the same second)", e, 2, 0, "4", 0, 2},
	} {
		body := mp.waitFor(ctx, doc(w.id), w.name, func(s int, body map[string]any) bool {
			return s == 200 && slices.Equal(copyShards(body), []int{w.shard})
		})
		m := moveOf(body)
		if !moveIs(m, w.logShard, w.moveID, w.id, w.from, w.to) || m["status"] != "moved" || body["anomaly"] != nil || body["duplicate"] != false {
			t.Fatalf("%s: %v, want its own move %s logged on shard %d, from %d to %d, moved, no anomaly", w.name, body, w.moveID, w.logShard, w.from, w.to)
		}
	}

	// The listing: B's move stuck, L's lost, nothing else (C's first hop
	// reached a shard ClickHouse never saw it on; D's stale move and E's
	// continued one are not in force). Pages of one keep the (log shard, move id) order.
	want := map[string]string{"1/5": "stuck", "2/1": "lost"}
	body = mp.waitFor(ctx, "/v1/anomalies/moves", "the listing", func(s int, body map[string]any) bool {
		return s == 200 && listedMoveKeys(body)["1/5"] == "stuck" && listedMoveKeys(body)["2/1"] == "lost"
	})
	if got := listedMoveKeys(body); len(got) != len(want) {
		t.Fatalf("listing %v, want exactly %v", body["anomalies"], want)
	}
	_, p1 := mp.get(ctx, "/v1/anomalies/moves?limit=1")
	next, _ := p1["next_cursor"].(string)
	_, p2 := mp.get(ctx, "/v1/anomalies/moves?limit=1&cursor="+url.QueryEscape(next))
	k1, k2 := listedMoveKeys(p1), listedMoveKeys(p2)
	if len(k1) != 1 || len(k2) != 1 || k1["2/1"] != "lost" || k2["1/5"] != "stuck" || p2["next_cursor"] != nil {
		t.Fatalf("pages of one: %v then %v, want L's move (the newer) then B's", p1["anomalies"], p2["anomalies"])
	}
	mp.waitGauge("tributary_moves_stuck", 1)
	mp.waitGauge("tributary_moves_lost", 1)

	rep := mp.runVerify(ctx)
	if !rep.Passed || rep.Moves == nil || rep.Moves.Moves != 9 || rep.Moves.InProgress != 1 || rep.Moves.Stuck != 1 || rep.Moves.Lost != 1 {
		t.Fatalf("verify: passed %v, moves %+v, differences %+v", rep.Passed, rep.Moves, rep.Differences)
	}
}

// TestMoveJustBeforeRecopy: a document moved 0 -> 3 -> 2 by the saga
// while shard 3's reader was down and its slot gone, so that shard 3's
// next copy (a new epoch) never contains it: ClickHouse never sees it on
// shard 3. The document is live on shard 2 and must never be reported
// lost — not by id, not in the listing, not by the gauge — while a move
// that really lost its document, made after, is.
func TestMoveJustBeforeRecopy(t *testing.T) {
	mp := newMovesPipeline(t, []int{0, 2, 3})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	doc := func(id int64) string { return "/v1/documents/" + strconv.FormatInt(id, 10) }
	g := mp.insert(ctx, 0, 1, "moved twice in the gap", "body")
	mp.waitFor(ctx, doc(g), "the document on shard 0", func(s int, b map[string]any) bool { return s == 200 })
	// Shard 3's reader streams (its first copy is done) before it stops.
	h := mp.insert(ctx, 3, 4, "streamed from shard 3", "body")
	mp.waitFor(ctx, doc(h), "a document streamed from shard 3", func(s int, b map[string]any) bool { return s == 200 })

	slot := mp.stopReader(ctx, 3)
	mp.exec(ctx, 3, "SELECT pg_drop_replication_slot($1)", slot)
	started := time.Now()
	first, err := mp.saga.Move(ctx, mp.shard(0), mp.shard(3), g, 1, 2, loadgen.Complete)
	if err != nil {
		t.Fatal(err)
	}
	second, err := mp.saga.Move(ctx, mp.shard(3), mp.shard(2), g, 2, 3, loadgen.Complete)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("moved 0 -> 3 -> 2 in %s", time.Since(started))
	mp.startReader(3) // a new slot: shard 3 is copied again

	// The move log (shard 3, copied again) can reach ClickHouse before
	// shard 0's delete and shard 2's insert are streamed: wait for both,
	// as each answer's freshness says, not only for the log.
	body := mp.waitFor(ctx, doc(g), "the second move, and the copy on shard 2 only", func(s int, b map[string]any) bool {
		m := moveOf(b)
		return s == 200 && m != nil && m["move_id"] == second && slices.Equal(copyShards(b), []int{2})
	})
	if m := moveOf(body); m["status"] != "moved" || m["log_shard"] != float64(3) || !slices.Equal(copyShards(body), []int{2}) || body["anomaly"] != nil {
		t.Fatalf("by id: %v, want one copy on shard 2, moved by %s (logged on shard 3), no anomaly", body, second)
	}

	// A lost move logged on shard 3 after the new copy: once the listing
	// has it, and its cutoff is past both of g's moves, g's are judged.
	lost := mp.insert(ctx, 3, 5, "lost after the copy", "body")
	mp.waitFor(ctx, doc(lost), "the document on shard 3", func(s int, b map[string]any) bool { return s == 200 })
	lostMove, err := mp.saga.Move(ctx, mp.shard(3), mp.shard(0), lost, 5, 6, loadgen.Lose)
	if err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(time.Second)
	body = mp.waitFor(ctx, "/v1/anomalies/moves", "the lost move listed, past g's moves", func(s int, b map[string]any) bool {
		cutoff, _ := time.Parse(time.RFC3339, fmt.Sprint(b["cutoff"]))
		return s == 200 && listedMoves(b)[lostMove] == "lost" && cutoff.After(past)
	})
	if l := listedMoves(body); len(l) != 1 {
		t.Fatalf("listing %v, want only %s (lost); %s and %s moved g, live on shard 2", body["anomalies"], lostMove, first, second)
	}
	mp.waitGauge("tributary_moves_lost", 1)
	rep := mp.runVerify(ctx)
	if !rep.Passed || rep.Moves == nil || rep.Moves.Lost != 1 || rep.Moves.Stuck != 0 {
		t.Fatalf("verify: passed %v, moves %+v, differences %+v", rep.Passed, rep.Moves, rep.Differences)
	}
}
