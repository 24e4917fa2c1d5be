package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/api"
	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/query"
	"github.com/tributary/tributary/internal/tables"
)

// TestByIDMoveCount: with the move log's index built, GET
// /v1/documents/{id} reads the copies and the index's count of the
// document's moves in one query, and the move log only when that count
// is not 0 or there is no copy. A moved document still shows its move (a
// count path that skipped it fails here); a document that never moved is
// answered without a move-log read (Queries.MoveLogReads); an index
// dropped under a running API falls back to the parallel read, same
// answers, no error.
func TestByIDMoveCount(t *testing.T) {
	f := newMoveIndexFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := f.store.Database()

	docs, err := f.store.EnsureTable(ctx, "documents", []string{"id"}, []envelope.Column{
		{Name: "id", Type: "bigint", OID: 20, Key: true}, {Name: "title", Type: "text", OID: 25}})
	if err != nil {
		t.Fatal(err)
	}
	version := uint64(1000)
	put := func(id int64, shard uint16, deleted bool) {
		t.Helper()
		version++
		idText, title := fmt.Sprint(id), fmt.Sprintf("doc %d", id)
		r := &chstore.Row{Shard: shard, Version: version, CommitLSN: version, CommitTS: time.Unix(1_780_000_000, 0).UTC(),
			Deleted: deleted, Values: map[string]*string{"id": &idText, "title": &title}}
		b := docs.NewBlock(1, time.Now())
		if err := b.Set(0, r); err != nil {
			t.Fatal(err)
		}
		if err := f.store.InsertBlock(ctx, b, []int{0}); err != nil {
			t.Fatal(err)
		}
	}
	// Doc 1 moved from shard 0 to 1 (done): a tombstone at 0, live at 1.
	// Doc 2 is mid-move: live on both. Doc 3 never moved, live at 0.
	// Doc 4 moved and is on neither shard. Doc 5 exists nowhere.
	moved, moving, lost := uuid.New(), uuid.New(), uuid.New()
	f.write(ctx, moved, 1, "done", 1)
	f.write(ctx, moving, 2, "copied", 2)
	f.write(ctx, lost, 4, "done", 4)
	put(1, 0, false)
	put(1, 1, false)
	put(1, 0, true)
	put(2, 0, false)
	put(2, 1, false)
	put(3, 0, false)
	if built, err := f.store.EnsureMoveIndex(ctx, f.moves.Index()); err != nil || !built {
		t.Fatalf("ensure the move index: built %v, %v", built, err)
	}

	cfg := &tables.Config{Tables: []tables.Table{*f.moves.Documents, *f.moves.Log}, Moves: f.moves.Moves}
	q := query.New(f.store.Conn(), db)
	srv := httptest.NewServer(api.New(api.Config{Tables: cfg, DocumentsTable: "documents", QueryTimeout: 15 * time.Second},
		q, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry()))
	defer srv.Close()

	type move struct {
		MoveID string `json:"move_id"`
		Status string `json:"status"`
	}
	type answer struct {
		Copies []struct {
			Shard int `json:"shard"`
		} `json:"copies"`
		Move   *move `json:"move"`
		Detail struct {
			Move *move `json:"move"`
		} `json:"detail"`
	}
	get := func(id int64) (int, answer) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/v1/documents/%d", srv.URL, id), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a answer
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
			t.Fatal(err)
		}
		if a.Move == nil {
			a.Move = a.Detail.Move
		}
		return resp.StatusCode, a
	}
	cases := []struct {
		name         string
		id           int64
		status       int
		shards       []int
		move, state  string
		moveLogReads int64
	}{
		{"moved, live at the target", 1, http.StatusOK, []int{1}, moved.String(), "moved", 1},
		{"mid-move, source shown", 2, http.StatusOK, []int{0}, moving.String(), "move in progress", 1},
		{"never moved", 3, http.StatusOK, []int{0}, "", "", 0},
		{"moved, on neither shard", 4, http.StatusNotFound, nil, lost.String(), "moved", 1},
		{"nowhere, no move", 5, http.StatusNotFound, nil, "", "", 1},
	}
	check := func(stage string, indexed bool) {
		t.Helper()
		for _, c := range cases {
			before := q.MoveLogReads()
			status, a := get(c.id)
			reads := q.MoveLogReads() - before
			var shards []int
			for _, cp := range a.Copies {
				shards = append(shards, cp.Shard)
			}
			move, state := "", ""
			if a.Move != nil {
				move, state = a.Move.MoveID, a.Move.Status
			}
			if status != c.status || fmt.Sprint(shards) != fmt.Sprint(c.shards) || move != c.move || state != c.state {
				t.Fatalf("%s, %s: %d copies on %v move %q %q; want %d %v %q %q",
					stage, c.name, status, shards, move, state, c.status, c.shards, c.move, c.state)
			}
			want := c.moveLogReads
			if !indexed {
				want = 1 // the parallel read: the log every time
			}
			if reads != want {
				t.Fatalf("%s, %s: %d move-log reads, want %d", stage, c.name, reads, want)
			}
		}
	}
	check("index built", true)

	// The index dropped under the running API (its state read as built
	// moments ago): the next read finds it gone and falls back to the
	// parallel read, with the same answers.
	ix := f.moves.Index()
	for _, name := range []string{ix.View(), ix.Table()} {
		if err := f.store.Conn().Exec(ctx, fmt.Sprintf("DROP TABLE %s.%s", chstore.Quote(db), chstore.Quote(name))); err != nil {
			t.Fatal(err)
		}
	}
	check("index dropped", false)
}
