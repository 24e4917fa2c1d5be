package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/api"
	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/loadgen"
	"github.com/tributary/tributary/internal/query"
	"github.com/tributary/tributary/internal/tables"
	"github.com/tributary/tributary/internal/verify"
)

// movesDDL is the per-test move log (the demo's document_moves).
const movesDDL = `CREATE TABLE %s (
	move_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	document_id bigint NOT NULL,
	from_workspace bigint NOT NULL,
	to_workspace bigint NOT NULL,
	from_shard int NOT NULL,
	to_shard int NOT NULL,
	state text NOT NULL DEFAULT 'started',
	started_at timestamptz NOT NULL DEFAULT now(),
	finished_at timestamptz
)`

// movesPipeline is a pipeline whose table config has a move log next to
// the documents table, with the API's registry at hand for the gauges.
type movesPipeline struct {
	*pipeline
	movesTable string
	reg        *prometheus.Registry
	saga       loadgen.Saga
	pools      map[int]*pgxpool.Pool
	// runCtx runs the components; stopReaders stops each shard's reader.
	runCtx      context.Context
	stopReaders map[int]context.CancelFunc
}

// moveLogSpec is the move log of a movesPipeline: its DDL (%s: the table
// name), the log's id layout, the moves section's fields other than the
// two table names, and what to do on the shards before the readers start
// (before their initial copy), if anything.
type moveLogSpec struct {
	ddl, idLayout, fields string
	before                func(ctx context.Context, mp *movesPipeline)
}

// demoMoveLog is the demo's move log: uuid move ids, a from-shard column.
var demoMoveLog = moveLogSpec{ddl: movesDDL, idLayout: "uuidv4", fields: `"document_column": "document_id",
	"from_shard_column": "from_shard", "to_shard_column": "to_shard",
	"from_workspace_column": "from_workspace", "to_workspace_column": "to_workspace",
	"state_column": "state", "in_progress_states": ["started", "copied"], "done_states": ["done"],
	"started_column": "started_at", "finished_column": "finished_at", "grace": "3s"`}

// newMovesPipeline is newPipeline plus the demo's move log: both tables
// are replicated and the `moves` section names them, with a grace of 3 s.
func newMovesPipeline(t *testing.T, shards []int) *movesPipeline {
	return newMovesPipelineWith(t, shards, demoMoveLog)
}

// newMovesPipelineWith is newMovesPipeline with the move log of spec.
func newMovesPipelineWith(t *testing.T, shards []int, spec moveLogSpec) *movesPipeline {
	p := setupPipeline(t, shards, nil, true) // readers and loader started below, with the new config
	mp := &movesPipeline{pipeline: p, movesTable: "moves_" + p.suffix, reg: prometheus.NewRegistry(), pools: map[int]*pgxpool.Pool{},
		stopReaders: map[int]context.CancelFunc{}}
	cfg, err := tables.Parse([]byte(fmt.Sprintf(`{"topic_prefix": "e2e_%s.", "tables": [
		{"name": %q, "id_column": "id", "id_layout": "seed000", "shard_key": "workspace_id"},
		{"name": %q, "id_column": "move_id", "id_layout": %q}],
		"moves": {"table": %[3]q, "documents_table": %[2]q, %[5]s}}`,
		p.suffix, p.table(), mp.movesTable, spec.idLayout, spec.fields)))
	if err != nil {
		t.Fatal(err)
	}
	p.tables = cfg
	mp.saga = loadgen.Saga{Documents: p.table(), Moves: mp.movesTable, IDColumn: "id", WorkspaceColumn: "workspace_id"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range shards {
		p.exec(ctx, s, fmt.Sprintf(spec.ddl, mp.movesTable))
		pool, err := pgxpool.New(ctx, p.stack.ShardDSNs[s])
		if err != nil {
			t.Fatal(err)
		}
		mp.pools[s] = pool
	}
	t.Cleanup(func() {
		// Runs before p.cleanup (cleanups run last registered first): stop
		// the readers and the loader before dropping their table.
		if p.cancel != nil {
			p.cancel()
		}
		p.wg.Wait()
		for _, pool := range mp.pools {
			pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+mp.movesTable) //nolint:errcheck
			pool.Close()
		}
	})
	if spec.before != nil {
		spec.before(ctx, mp)
	}
	p.api.Close()
	p.api = httptest.NewServer(api.New(api.Config{Tables: cfg, DocumentsTable: p.table(), QueryTimeout: 10 * time.Second},
		query.New(p.store.Conn(), p.chDB), p.log, mp.reg))
	runCtx, runCancel := context.WithCancel(context.Background())
	p.cancel, mp.runCtx = runCancel, runCtx
	for _, s := range shards {
		mp.startReader(s)
	}
	p.startLoader(runCtx, "l1")
	return mp
}

// startReader starts the reader of shard, which stopReader stops.
func (mp *movesPipeline) startReader(shard int) {
	ctx, cancel := context.WithCancel(mp.runCtx)
	mp.stopReaders[shard] = cancel
	mp.pipeline.startReader(ctx, shard)
}

// stopReader stops the reader of shard and waits until its slot is free.
func (mp *movesPipeline) stopReader(ctx context.Context, shard int) string {
	mp.stopReaders[shard]()
	return mp.waitSlotInactive(ctx, shard)
}

func (mp *movesPipeline) shard(id int) loadgen.Shard {
	return loadgen.Shard{ID: id, Pool: mp.pools[id]}
}

// get returns the status and JSON body of a GET on the test API.
func (mp *movesPipeline) get(ctx context.Context, path string) (int, map[string]any) {
	mp.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", mp.api.URL+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		mp.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		mp.t.Fatalf("GET %s: decode: %v", path, err)
	}
	return resp.StatusCode, body
}

// waitFor polls path until check accepts the answer.
func (mp *movesPipeline) waitFor(ctx context.Context, path, what string, check func(int, map[string]any) bool) map[string]any {
	mp.t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	var status int
	var body map[string]any
	for time.Now().Before(deadline) {
		if err := mp.failed(); err != nil {
			mp.t.Fatalf("waiting for %s: %v", what, err)
		}
		if status, body = mp.get(ctx, path); check(status, body) {
			return body
		}
		time.Sleep(150 * time.Millisecond)
	}
	mp.t.Fatalf("timed out waiting for %s: last %d %v", what, status, body)
	return nil
}

// gauge reads a move gauge of the documents table from the API's registry.
func (mp *movesPipeline) gauge(name string) (float64, bool) {
	mfs, err := mp.reg.Gather()
	if err != nil {
		mp.t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "table" && l.GetValue() == mp.table() {
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// waitGauge polls a move gauge until it is want (the API reuses a count
// for up to 15 s).
func (mp *movesPipeline) waitGauge(name string, want float64) {
	mp.t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	var got float64
	var ok bool
	for time.Now().Before(deadline) {
		if got, ok = mp.gauge(name); ok && got == want {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	mp.t.Fatalf("%s = %v (exported %v), want %v", name, got, ok, want)
}

// copyShards lists the shards of the copies in a by-id answer.
func copyShards(body map[string]any) []int {
	out := []int{}
	cs, _ := body["copies"].([]any)
	for _, c := range cs {
		out = append(out, int(c.(map[string]any)["shard"].(float64)))
	}
	return out
}

func moveOf(body map[string]any) map[string]any {
	m, _ := body["move"].(map[string]any)
	return m
}

func anomalyKind(body map[string]any) string {
	a, _ := body["anomaly"].(map[string]any)
	k, _ := a["kind"].(string)
	return k
}

// listedMoves returns move id -> kind from GET /v1/anomalies/moves.
func listedMoves(body map[string]any) map[string]string {
	out := map[string]string{}
	list, _ := body["anomalies"].([]any)
	for _, a := range list {
		m := a.(map[string]any)
		out[m["move_id"].(string)] = m["kind"].(string)
	}
	return out
}

// TestMoves: documents moved by the saga between two shards, through the
// whole pipeline with a move log — a completed move is one document
// throughout and no duplicate alert; a move left half-done is shown once
// as "move in progress", becomes a stuck-move anomaly past the grace period
// (by-id answer, listing, gauge) and clears when the recovery job finishes
// it; a move that deleted the source without copying is reported lost.
func TestMoves(t *testing.T) {
	t.Parallel()
	mp := newMovesPipeline(t, []int{0, 1})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	src, dst := mp.shard(0), mp.shard(1)
	doc := func(id int64) string { return "/v1/documents/" + strconv.FormatInt(id, 10) }

	// A completed move: only the target's copy, "moved", never a duplicate.
	completed := mp.insert(ctx, 0, 1, "completed move", "body")
	mp.waitFor(ctx, doc(completed), "the document at the source", func(s int, b map[string]any) bool { return s == 200 })
	completedMove, err := mp.saga.Move(ctx, src, dst, completed, 1, 2, loadgen.Complete)
	if err != nil {
		t.Fatal(err)
	}
	mp.waitFor(ctx, doc(completed), "the completed move", func(s int, b map[string]any) bool {
		m := moveOf(b)
		return s == 200 && slices.Equal(copyShards(b), []int{1}) && m != nil && m["status"] == "moved" && m["move_id"] == completedMove
	})

	// Half-done: copied to the target, the source row kept.
	half := mp.insert(ctx, 0, 3, "half-done move", "body")
	halfMove, err := mp.saga.Move(ctx, src, dst, half, 3, 4, loadgen.HalfDone)
	if err != nil {
		t.Fatal(err)
	}
	rawPath := fmt.Sprintf("/v1/tables/%s/rows/%d", mp.table(), half)
	mp.waitFor(ctx, rawPath, "both copies in the raw view", func(s int, b map[string]any) bool {
		return s == 200 && slices.Equal(copyShards(b), []int{0, 1}) && b["duplicate"] == true
	})
	// By id: the move log is loaded by now or soon; then one document.
	b := mp.waitFor(ctx, doc(half), "move in progress", func(s int, b map[string]any) bool {
		m := moveOf(b)
		return s == 200 && m != nil && m["state"] == "copied"
	})
	m := moveOf(b)
	if !slices.Equal(copyShards(b), []int{0}) || b["duplicate"] != false || m["status"] != "move in progress" ||
		m["move_id"] != halfMove || m["from_shard"] != float64(0) || m["to_shard"] != float64(1) || m["since"] == nil {
		t.Fatalf("during the move, by-id answer %v", b)
	}
	if hidden, _ := m["hidden_copies_on_shards"].([]any); len(hidden) != 1 || hidden[0] != float64(1) {
		t.Fatalf("hidden copies %v, want [1]", m["hidden_copies_on_shards"])
	}
	if (anomalyKind(b) == "stuck") != (m["past_grace"] == true) {
		t.Fatalf("anomaly %v inconsistent with past_grace %v", b["anomaly"], m["past_grace"])
	}
	b = mp.waitFor(ctx, doc(half), "stuck past grace", func(s int, b map[string]any) bool {
		return s == 200 && anomalyKind(b) == "stuck"
	})
	if !slices.Equal(copyShards(b), []int{0}) || b["duplicate"] != false || moveOf(b)["past_grace"] != true {
		t.Fatalf("stuck move, by-id answer %v", b)
	}

	// Lost: deleted at the source and marked done, never copied.
	lost := mp.insert(ctx, 0, 5, "lost in a move", "body")
	mp.waitFor(ctx, doc(lost), "the document at the source", func(s int, b map[string]any) bool { return s == 200 })
	lostMove, err := mp.saga.Move(ctx, src, dst, lost, 5, 6, loadgen.Lose)
	if err != nil {
		t.Fatal(err)
	}
	b = mp.waitFor(ctx, doc(lost), "lost document", func(s int, b map[string]any) bool {
		d, _ := b["detail"].(map[string]any)
		return s == 404 && d != nil && anomalyKind(d) == "lost"
	})
	// Deleted at the target after it arrived: gone, not lost (its move is
	// past the grace period by now: it finished before the lost one).
	mp.exec(ctx, 1, fmt.Sprintf("DELETE FROM %s WHERE id = $1", pgx.Identifier{mp.table()}.Sanitize()), completed)
	b = mp.waitFor(ctx, doc(completed), "the moved document deleted at its target", func(s int, b map[string]any) bool { return s == 404 })
	if d, _ := b["detail"].(map[string]any); d == nil || anomalyKind(d) != "" || moveOf(d)["status"] != "moved" {
		t.Fatalf("a moved document deleted at its target is reported as %v, want a 404 with the move and no anomaly", b["detail"])
	}

	// The listing has both, and nothing about the completed move.
	b = mp.waitFor(ctx, "/v1/anomalies/moves", "stuck and lost listed", func(s int, b map[string]any) bool {
		l := listedMoves(b)
		return s == 200 && l[halfMove] == "stuck" && l[lostMove] == "lost"
	})
	if _, ok := listedMoves(b)[completedMove]; ok || len(listedMoves(b)) != 2 {
		t.Fatalf("listing %v, want exactly the stuck and the lost move", b["anomalies"])
	}
	// Pages of one: two pages, then none.
	_, p1 := mp.get(ctx, "/v1/anomalies/moves?limit=1")
	next, _ := p1["next_cursor"].(string)
	if len(listedMoves(p1)) != 1 || next == "" {
		t.Fatalf("first page %v", p1)
	}
	_, p2 := mp.get(ctx, "/v1/anomalies/moves?limit=1&cursor="+url.QueryEscape(next))
	if len(listedMoves(p2)) != 1 || p2["next_cursor"] != nil {
		t.Fatalf("second page %v", p2)
	}
	for id := range listedMoves(p1) {
		if _, again := listedMoves(p2)[id]; again {
			t.Fatalf("move %s on both pages", id)
		}
	}
	if s, e := mp.get(ctx, "/v1/anomalies/moves?kind=stuck&cursor="+url.QueryEscape(next)); s != 400 || e["error"] != "bad_cursor" {
		t.Fatalf("cursor reused with another kind: %d %v", s, e)
	}
	if s, _ := mp.get(ctx, "/v1/anomalies/moves?kind=lost"); s != 200 {
		t.Fatalf("kind=lost: %d", s)
	}
	mp.waitGauge("tributary_moves_stuck", 1)
	mp.waitGauge("tributary_moves_lost", 1)

	// The loader's duplicate check: the stuck move's id alerts (it is live
	// on two shards), the completed move's never does.
	mp.waitAnomaly(ctx, half, "duplicate alert of the stuck move", func(a chstore.Anomaly, ok bool) bool { return ok && a.Alerted })
	got, err := mp.store.Anomalies(ctx, mp.table(), []string{strconv.FormatInt(completed, 10)}, false)
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := got[strconv.FormatInt(completed, 10)]; ok && a.Alerted {
		t.Fatalf("completed move alerted as a duplicate: %+v", a)
	}

	// The verifier's ground truth agrees: one document mid-move, shown
	// once; one stuck and one lost move, listed.
	rep := mp.runVerify(ctx)
	if !rep.Passed || rep.Moves == nil || rep.Moves.InProgress != 1 || rep.Moves.Stuck != 1 || rep.Moves.Lost != 1 {
		t.Fatalf("verify with a stuck and a lost move: passed %v, moves %+v, differences %+v", rep.Passed, rep.Moves, rep.Differences)
	}
	// A wrong move state in ClickHouse (the stuck move said done): the API
	// then shows the document twice and lists no stuck move; the verifier
	// reports both, and the log row's wrong value.
	mp.corruptMoveState(ctx, halfMove, "done")
	rep = mp.runVerify(ctx)
	if rep.Mismatches != (verify.Mismatches{WrongValue: 1, MoveShown: 1, MoveAnomaly: 1}) {
		t.Fatalf("after a wrong move state: mismatches %+v, differences %+v", rep.Mismatches, rep.Differences)
	}

	// The recovery job finishes the half-done move: target only, not stuck.
	if n, err := mp.saga.Resume(ctx, src, map[int]loadgen.Shard{1: dst}); err != nil || n != 1 {
		t.Fatalf("resume: %d moves, %v", n, err)
	}
	mp.waitFor(ctx, doc(half), "the resumed move", func(s int, b map[string]any) bool {
		return s == 200 && slices.Equal(copyShards(b), []int{1}) && moveOf(b)["status"] == "moved" && b["anomaly"] == nil
	})
	mp.waitFor(ctx, "/v1/anomalies/moves", "stuck cleared", func(s int, b map[string]any) bool {
		l := listedMoves(b)
		return s == 200 && len(l) == 1 && l[lostMove] == "lost"
	})
	mp.waitGauge("tributary_moves_stuck", 0)
	rep = mp.runVerify(ctx)
	if !rep.Passed || rep.Moves.InProgress != 0 || rep.Moves.Stuck != 0 || rep.Moves.Lost != 1 {
		t.Fatalf("verify after recovery: passed %v, moves %+v, differences %+v", rep.Passed, rep.Moves, rep.Differences)
	}
}

// corruptMoveState writes a newer version of a move-log row with another
// state straight into ClickHouse, bypassing the pipeline.
func (mp *movesPipeline) corruptMoveState(ctx context.Context, moveID, state string) {
	mp.t.Helper()
	cols := "move_id, document_id, from_workspace, to_workspace, from_shard, to_shard, state, started_at, _us_started_at, finished_at, _us_finished_at, _shard, _version, _deleted, _commit_lsn, _commit_ts, _loaded_at"
	sql := fmt.Sprintf("INSERT INTO `%[1]s`.`%[2]s` (%[3]s) SELECT move_id, document_id, from_workspace, to_workspace, from_shard, to_shard, ?, started_at, _us_started_at, finished_at, _us_finished_at, _shard, _version + 1, _deleted, _commit_lsn, _commit_ts, _loaded_at FROM `%[1]s`.`%[2]s` FINAL WHERE toString(move_id) = ?",
		mp.chDB, mp.movesTable, cols)
	if err := mp.store.Conn().Exec(ctx, sql, state, moveID); err != nil {
		mp.t.Fatalf("corrupt move %s: %v", moveID, err)
	}
}
