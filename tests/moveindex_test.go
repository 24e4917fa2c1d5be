package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/google/uuid"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/loadgen"
	"github.com/tributary/tributary/internal/query"
	"github.com/tributary/tributary/internal/tables"
)

// moveIndexFixture is a move log in its own database, written the way the
// loader writes it (chstore blocks from text values; a delete tombstone
// carries the move id only).
type moveIndexFixture struct {
	t       *testing.T
	store   *chstore.Store
	log     *chstore.Table
	moves   *query.MoveLog
	version uint64
}

func newMoveIndexFixture(t *testing.T) *moveIndexFixture {
	store, _ := scratchStore(t, "e2e_moveidx_")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	logT, err := store.EnsureTable(ctx, "document_moves", []string{"move_id"}, loadgen.MoveLogColumns)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := tables.Parse([]byte(`{"topic_prefix": "e2e.", "tables": [
		{"name": "documents", "id_column": "id", "id_layout": "seed000"},
		{"name": "document_moves", "id_column": "move_id", "id_layout": "uuidv4"}],
		"moves": {"table": "document_moves", "documents_table": "documents", "document_column": "document_id",
			"from_shard_column": "from_shard", "to_shard_column": "to_shard",
			"from_workspace_column": "from_workspace", "to_workspace_column": "to_workspace",
			"state_column": "state", "in_progress_states": ["started", "copied"], "done_states": ["done"],
			"started_column": "started_at", "finished_column": "finished_at"}}`))
	if err != nil {
		t.Fatal(err)
	}
	l, ok := query.MoveLogOf(cfg, "documents")
	if !ok {
		t.Fatal("no move log")
	}
	return &moveIndexFixture{t: t, store: store, log: logT, moves: l, version: 100}
}

// write inserts one version of move id: of doc in state at minute started
// (finished a second later when done), from shard 0 to 1; doc 0 writes a
// delete tombstone instead.
func (f *moveIndexFixture) write(ctx context.Context, id uuid.UUID, doc int64, state string, started int) {
	f.t.Helper()
	f.version++
	text := func(s string) *string { return &s }
	idText := id.String()
	r := &chstore.Row{Shard: 0, Version: f.version, CommitLSN: f.version, CommitTS: time.Unix(1_780_000_000, 0).UTC(),
		Values: map[string]*string{"move_id": &idText}}
	if doc == 0 {
		r.Deleted = true
	} else {
		at := time.Date(2026, 6, 1, 0, started, 0, 0, time.UTC)
		r.Values["document_id"] = text(fmt.Sprint(doc))
		r.Values["from_workspace"], r.Values["to_workspace"] = text("4"), text("5")
		r.Values["from_shard"], r.Values["to_shard"] = text("0"), text("1")
		r.Values["state"] = &state
		r.Values["started_at"] = text(at.Format("2006-01-02 15:04:05+00"))
		if state == "done" {
			r.Values["finished_at"] = text(at.Add(time.Second).Format("2006-01-02 15:04:05+00"))
		}
	}
	b := f.log.NewBlock(1, time.Now())
	if err := b.Set(0, r); err != nil {
		f.t.Fatal(err)
	}
	if err := f.store.InsertBlock(ctx, b, []int{0}); err != nil {
		f.t.Fatal(err)
	}
}

// newest reads doc's newest move with plan sql, as "<move id> <state>" or
// "none".
func (f *moveIndexFixture) newest(ctx context.Context, sql string, doc int64) string {
	f.t.Helper()
	rows, err := f.store.Conn().Query(clickhouse.Context(ctx, clickhouse.WithSettings(query.LatestMoveSettings())), sql, doc)
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	if !rows.Next() {
		return "none"
	}
	var m query.Move
	var logShard, from, to int64
	var started, finished uint32
	if err := rows.Scan(&m.MoveID, &logShard, &m.DocumentID, &from, &to, &m.FromWorkspace, &m.ToWorkspace, &m.State, &started, &finished); err != nil {
		f.t.Fatal(err)
	}
	return m.MoveID + " " + m.State
}

// latest is what the API's read (query.LatestMove) answers.
func (f *moveIndexFixture) latest(ctx context.Context, doc int64) string {
	f.t.Helper()
	m, err := query.New(f.store.Conn(), f.store.Database()).LatestMove(ctx, f.moves, doc)
	if err != nil {
		f.t.Fatal(err)
	}
	if m == nil {
		return "none"
	}
	return m.MoveID + " " + m.State
}

// TestMoveIndex: the move log's index by document, built over an existing
// log (the backfill) and kept by its view, gives every document the same
// newest move as the scan of the log — tombstoned moves included — and
// the API reads it once it is built; rebuilding (a crash before "built",
// a dropped view) is idempotent.
func TestMoveIndex(t *testing.T) {
	f := newMoveIndexFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := f.store.Database()
	scan, indexed := query.PlanLatestMove(db, f.moves), query.PlanLatestMoveIndexed(db, f.moves)
	ix := f.moves.Index()

	a, b, c, d := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	// Before the index: doc 1 moved (A, done); doc 2's move B was deleted
	// (its tombstone has no document); doc 3's move C is in progress.
	f.write(ctx, a, 1, "started", 1)
	f.write(ctx, b, 2, "started", 2)
	f.write(ctx, a, 1, "done", 1)
	f.write(ctx, b, 0, "", 0)
	f.write(ctx, c, 3, "started", 3)
	docs := []int64{1, 2, 3, 4}
	want := map[int64]string{1: a.String() + " done", 2: "none", 3: c.String() + " started", 4: "none"}
	for _, doc := range docs {
		if got := f.newest(ctx, scan, doc); got != want[doc] {
			t.Fatalf("scan, doc %d: %s, want %s", doc, got, want[doc])
		}
		if got := f.latest(ctx, doc); got != want[doc] {
			t.Fatalf("API before the index, doc %d: %s, want %s", doc, got, want[doc])
		}
	}

	built, err := f.store.EnsureMoveIndex(ctx, ix)
	if err != nil || !built {
		t.Fatalf("first ensure: built %v, %v", built, err)
	}
	if built, err := f.store.EnsureMoveIndex(ctx, ix); err != nil || built {
		t.Fatalf("second ensure: built %v (want false: already built), %v", built, err)
	}
	var n uint64
	if err := f.store.Conn().QueryRow(ctx, fmt.Sprintf("SELECT count() FROM %s.%s", chstore.Quote(db), chstore.Quote(ix.Table()))).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 4 { // the four log rows naming a document; not the tombstone
		t.Fatalf("index holds %d rows after the backfill, want 4", n)
	}
	check := func(stage string) {
		t.Helper()
		for _, doc := range docs {
			if got := f.newest(ctx, indexed, doc); got != want[doc] {
				t.Fatalf("%s: index, doc %d: %s, want %s", stage, doc, got, want[doc])
			}
			if got := f.newest(ctx, scan, doc); got != want[doc] {
				t.Fatalf("%s: scan, doc %d: %s, want %s", stage, doc, got, want[doc])
			}
			if got := f.latest(ctx, doc); got != want[doc] {
				t.Fatalf("%s: API, doc %d: %s, want %s", stage, doc, got, want[doc])
			}
		}
	}
	check("backfilled")

	// After: through the view. Doc 1 moves again (D, newer), C finishes,
	// then D is deleted: doc 1's newest is A again.
	f.write(ctx, d, 1, "started", 10)
	f.write(ctx, c, 3, "done", 3)
	want[1], want[3] = d.String()+" started", c.String()+" done"
	check("new moves")
	f.write(ctx, d, 0, "", 0)
	want[1] = a.String() + " done"
	check("tombstone")

	// The API reads the index once it is built: an index row of doc 99
	// that the log does not have (written here by hand) shows in its
	// answer, and not in the scan's.
	if err := f.store.Conn().Exec(ctx, fmt.Sprintf("INSERT INTO %s.%s (document, move, _shard) SELECT 99, toUUID('%s'), 0",
		chstore.Quote(db), chstore.Quote(ix.Table()), c)); err != nil {
		t.Fatal(err)
	}
	if got, scanned := f.latest(ctx, 99), f.newest(ctx, scan, 99); got != want[3] || scanned != "none" {
		t.Fatalf("doc 99 with a planted index row: API %s (want %s: read through the index), scan %s", got, want[3], scanned)
	}

	// Not built (a crash between "not built" and "built"): the API scans
	// the log; the next ensure rebuilds, idempotently.
	mark := fmt.Sprintf("INSERT INTO %s.%s (name, built, version, updated_at) SELECT '%s', 0, %d, now()",
		chstore.Quote(db), chstore.IndexStateTable, ix.Table(), time.Now().UnixNano())
	if err := f.store.Conn().Exec(ctx, mark); err != nil {
		t.Fatal(err)
	}
	if got := f.latest(ctx, 99); got != "none" {
		t.Fatalf("doc 99, index not built: API %s, want none (the scan)", got)
	}
	if built, err := f.store.EnsureMoveIndex(ctx, ix); err != nil || !built {
		t.Fatalf("ensure after a crash: built %v, %v", built, err)
	}
	check("rebuilt")

	// A dropped view: not built until ensured again, and moves written
	// meanwhile are in the index after the rebuild (its backfill).
	if err := f.store.Conn().Exec(ctx, fmt.Sprintf("DROP TABLE %s.%s", chstore.Quote(db), chstore.Quote(ix.View()))); err != nil {
		t.Fatal(err)
	}
	e := uuid.New()
	f.write(ctx, e, 2, "started", 20)
	want[2] = e.String() + " started"
	if got := f.newest(ctx, indexed, 2); got != "none" {
		t.Fatalf("doc 2 without the view: index read %s, want none (nothing reaches the index)", got)
	}
	if got := f.latest(ctx, 2); got != want[2] {
		t.Fatalf("doc 2 without the view: API %s, want %s (not built: the scan)", got, want[2])
	}
	if built, err := f.store.EnsureMoveIndex(ctx, ix); err != nil || !built {
		t.Fatalf("ensure after the view was dropped: built %v, %v", built, err)
	}
	check("view restored")
}
