package tables

import (
	"strings"
	"testing"
	"time"
)

const movesTablesJSON = `"tables": [
	{"name": "documents", "id_column": "id", "id_layout": "seed000"},
	{"name": "document_moves", "id_column": "move_id", "id_layout": "uuidv4"}]`

const movesOK = `"table": "document_moves", "documents_table": "documents", "document_column": "document_id",
	"from_shard_column": "from_shard", "to_shard_column": "to_shard", "state_column": "state",
	"in_progress_states": ["started", "copied"], "done_states": ["done"], "started_column": "started_at"`

func TestMovesValidation(t *testing.T) {
	cases := []struct {
		name  string
		moves string
		want  string // substring of the error; empty: valid
		grace time.Duration
	}{
		{"valid, default grace", movesOK, "", DefaultMoveGrace},
		{"valid with grace and optional columns", movesOK + `, "grace": "90s", "finished_column": "finished_at",
			"from_workspace_column": "from_workspace", "to_workspace_column": "to_workspace"`, "", 90 * time.Second},
		{"unknown log table", strings.Replace(movesOK, `"table": "document_moves"`, `"table": "moves"`, 1),
			`moves: table "moves" is not a configured table`, 0},
		{"unknown documents table", strings.Replace(movesOK, `"documents_table": "documents"`, `"documents_table": "docs"`, 1),
			`moves: documents_table "docs" is not a configured table`, 0},
		{"log is the documents table", strings.Replace(movesOK, `"table": "document_moves"`, `"table": "documents"`, 1),
			"the move log is a table of its own", 0},
		{"no from_shard_column: the log row's shard is the source", strings.Replace(movesOK, `"from_shard_column": "from_shard", `, "", 1), "", DefaultMoveGrace},
		{"missing state column", strings.Replace(movesOK, `"state_column": "state",`, "", 1),
			`moves: state_column is required: set it to the move log's column holding the move's state`, 0},
		{"missing document column", strings.Replace(movesOK, `"document_column": "document_id",`, "", 1),
			`moves: document_column is required: set it to the move log's column holding the moved row's id`, 0},
		{"missing to_shard column", strings.Replace(movesOK, `"to_shard_column": "to_shard",`, "", 1),
			`moves: to_shard_column is required`, 0},
		{"missing log table", strings.Replace(movesOK, `"table": "document_moves",`, "", 1),
			`moves: table is required: set it to the name of a table configured under "tables"`, 0},
		{"one column for two fields", strings.Replace(movesOK, `"from_shard"`, `"to_shard"`, 1),
			`moves: from_shard_column "to_shard" is also to_shard_column; each names a column of its own`, 0},
		{"the log's id as the document column", strings.Replace(movesOK, `"document_id"`, `"move_id"`, 1),
			`moves: document_column "move_id" is also the log's id_column`, 0},
		{"one workspace column only", movesOK + `, "from_workspace_column": "from_workspace"`,
			"moves: from_workspace_column and to_workspace_column go together; set both or neither", 0},
		{"state twice in one list", strings.Replace(movesOK, `["done"]`, `["done", "done"]`, 1),
			`moves: done_states lists state "done" twice; list it once`, 0},
		{"bad column", strings.Replace(movesOK, `"to_shard",`, `"to shard",`, 1),
			`moves: to_shard_column "to shard" is not a plain identifier`, 0},
		{"no in-progress states", strings.Replace(movesOK, `["started", "copied"]`, `[]`, 1),
			"moves: in_progress_states is required", 0},
		{"no done states", strings.Replace(movesOK, `["done"]`, `[]`, 1), "moves: done_states is required", 0},
		{"state in both lists", strings.Replace(movesOK, `["done"]`, `["done", "copied"]`, 1),
			`moves: state "copied" is both in progress and done`, 0},
		{"empty state", strings.Replace(movesOK, `["done"]`, `[""]`, 1), `moves: done_states: state "" must be 1 to 64 bytes`, 0},
		{"bad grace", movesOK + `, "grace": "soon"`, `moves: grace "soon" is not a positive duration`, 0},
		{"negative grace", movesOK + `, "grace": "-1s"`, `moves: grace "-1s" is not a positive duration`, 0},
		{"unknown field", movesOK + `, "grace_seconds": 5`, `unknown field "grace_seconds"`, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Parse([]byte(`{` + movesTablesJSON + `, "moves": {` + c.moves + `}}`))
			if c.want != "" {
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("error %v, want one containing %q", err, c.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			m, ok := cfg.MovesOf("documents")
			if !ok || m.GraceDuration() != c.grace {
				t.Fatalf("MovesOf(documents) = %+v, %v; want grace %s", m, ok, c.grace)
			}
			if _, ok := cfg.MovesOf("document_moves"); ok {
				t.Fatal("MovesOf(document_moves) found a move log for the log itself")
			}
			if !m.InProgress("copied") || m.InProgress("done") || !m.Done("done") || m.Done("failed") {
				t.Fatal("state classification is wrong")
			}
		})
	}
}

// TestDemoTablesHaveMoves: the demo's published config names its move log.
func TestDemoTablesHaveMoves(t *testing.T) {
	cfg, err := Load("../../deploy/local/tables.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cfg.MovesOf("documents"); !ok {
		t.Fatal("deploy/local/tables.json has no moves section for documents")
	}
}
