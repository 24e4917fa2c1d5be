package tables

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Moves says which replicated table is the move log of a saga that moves
// rows of another table (the documents) between shards: start the move on
// the source shard's log, copy the row to the target shard, delete it at
// the source, finish the move. With it, the API shows a row that is being
// moved once (GET /v1/documents/{id}), and lists moves that stay half-done
// past Grace and rows that the log says moved but that arrived nowhere
// (GET /v1/anomalies/moves). Every name is configuration: nothing about the
// demo's document_moves is assumed.
//
// The log row of a move lives on the source shard and its id is the log
// table's id_column (the move id). A move is identified by the shard its
// log row lives on and that id: per-shard serial move ids that collide
// across shards are normal.
type Moves struct {
	// Table is the move log, a configured table.
	Table string `json:"table"`
	// DocumentsTable is the table whose rows move, a configured table.
	DocumentsTable string `json:"documents_table"`
	// DocumentColumn holds the moved row's id (same type as the documents
	// table's id column).
	DocumentColumn string `json:"document_column"`
	// ToShardColumn holds the target shard number (an integer, the shard
	// numbers the readers use). FromShardColumn, optional, holds the
	// source's; without it the source is the shard the log row lives on.
	FromShardColumn string `json:"from_shard_column,omitempty"`
	ToShardColumn   string `json:"to_shard_column"`
	// FromWorkspaceColumn and ToWorkspaceColumn are shown when set.
	FromWorkspaceColumn string `json:"from_workspace_column,omitempty"`
	ToWorkspaceColumn   string `json:"to_workspace_column,omitempty"`
	// StateColumn holds the move's state; InProgressStates are the states of
	// a move under way (e.g. started, copied), DoneStates those of a
	// finished move (the source row is gone). Other states (e.g. failed)
	// are neither: the row is shown as it is.
	StateColumn      string   `json:"state_column"`
	InProgressStates []string `json:"in_progress_states"`
	DoneStates       []string `json:"done_states"`
	// StartedColumn is when the move started, FinishedColumn (optional,
	// nullable) when it finished; timestamps at the source.
	StartedColumn  string `json:"started_column"`
	FinishedColumn string `json:"finished_column,omitempty"`
	// Grace is how long a move may stay in progress, and how long a
	// finished move's row may take to appear at the target, before either is
	// an anomaly, e.g. "2m". Default 1m.
	Grace string `json:"grace,omitempty"`

	grace time.Duration
}

// DefaultMoveGrace is the grace period of a Moves section that sets none.
const DefaultMoveGrace = time.Minute

// GraceDuration is the parsed Grace (valid after Validate).
func (m *Moves) GraceDuration() time.Duration { return m.grace }

// moveColumn is one column field of the moves section: its JSON name,
// its value, whether it may be left out, and what it holds (for errors).
type moveColumn struct {
	field, value string
	optional     bool
	holds        string
}

// columns lists m's column fields.
func (m *Moves) columns() []moveColumn {
	return []moveColumn{
		{"document_column", m.DocumentColumn, false, "the moved row's id"},
		{"to_shard_column", m.ToShardColumn, false, "the target shard number"},
		{"state_column", m.StateColumn, false, "the move's state"},
		{"started_column", m.StartedColumn, false, "when the move started"},
		{"from_shard_column", m.FromShardColumn, true, "the source shard number; leave it out when the log row lives on the source shard"},
		{"finished_column", m.FinishedColumn, true, "when the move finished"},
		{"from_workspace_column", m.FromWorkspaceColumn, true, "the source workspace"},
		{"to_workspace_column", m.ToWorkspaceColumn, true, "the target workspace"},
	}
}

// validate checks m against the configured tables and parses Grace. Every
// error names the field and says what to set.
func (m *Moves) validate(c *Config) error {
	var errs []error
	for _, ref := range []struct{ what, v string }{{"table", m.Table}, {"documents_table", m.DocumentsTable}} {
		switch _, ok := c.ByName(ref.v); {
		case ref.v == "":
			errs = append(errs, fmt.Errorf("moves: %s is required: set it to the name of a table configured under \"tables\"", ref.what))
		case !ok:
			errs = append(errs, fmt.Errorf("moves: %s %q is not a configured table; add it under \"tables\" or fix the name", ref.what, ref.v))
		}
	}
	if m.Table != "" && m.Table == m.DocumentsTable {
		errs = append(errs, fmt.Errorf("moves: table and documents_table are both %q; the move log is a table of its own", m.Table))
	}
	for _, ref := range []struct{ what, v string }{{"table", m.Table}, {"documents_table", m.DocumentsTable}} {
		if t, ok := c.ByName(ref.v); ok && t.Composite() {
			errs = append(errs, fmt.Errorf("moves: %s %q is identified by several columns %s, and a move names one row by one id: moves work only with tables of one id_column",
				ref.what, ref.v, t.KeyForm()))
		}
	}
	used := map[string]string{} // column -> the field that names it
	if logT, ok := c.ByName(m.Table); ok {
		used[logT.IDColumn] = "the log's id_column"
	}
	for _, col := range m.columns() {
		switch {
		case col.value == "" && col.optional:
			continue
		case col.value == "":
			errs = append(errs, fmt.Errorf("moves: %s is required: set it to the move log's column holding %s", col.field, col.holds))
			continue
		case !identifier.MatchString(col.value):
			errs = append(errs, fmt.Errorf("moves: %s %q is not a plain identifier (letters, digits and _, not starting with a digit); set it to the move log's column holding %s",
				col.field, col.value, col.holds))
			continue
		}
		if prev, dup := used[col.value]; dup {
			errs = append(errs, fmt.Errorf("moves: %s %q is also %s; each names a column of its own", col.field, col.value, prev))
			continue
		}
		used[col.value] = col.field
	}
	if (m.FromWorkspaceColumn == "") != (m.ToWorkspaceColumn == "") {
		errs = append(errs, errors.New("moves: from_workspace_column and to_workspace_column go together; set both or neither"))
	}
	errs = append(errs, m.validateStates()...)
	m.grace = DefaultMoveGrace
	if m.Grace != "" {
		d, err := time.ParseDuration(m.Grace)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("moves: grace %q is not a positive duration such as \"2m\"", m.Grace))
		}
		m.grace = d
	}
	return errors.Join(errs...)
}

// validateStates checks the two state lists: non-empty, short, each state
// listed once.
func (m *Moves) validateStates() []error {
	var errs []error
	if len(m.InProgressStates) == 0 {
		errs = append(errs, errors.New("moves: in_progress_states is required: list the states of a move under way (e.g. [\"started\", \"copied\"])"))
	}
	if len(m.DoneStates) == 0 {
		errs = append(errs, errors.New("moves: done_states is required: list the states of a finished move (e.g. [\"done\"])"))
	}
	seen := map[string]string{}
	for _, l := range []struct {
		field  string
		states []string
	}{{"in_progress_states", m.InProgressStates}, {"done_states", m.DoneStates}} {
		for _, st := range l.states {
			if st == "" || len(st) > 64 {
				errs = append(errs, fmt.Errorf("moves: %s: state %q must be 1 to 64 bytes", l.field, st))
				continue
			}
			switch prev, dup := seen[st]; {
			case dup && prev == l.field:
				errs = append(errs, fmt.Errorf("moves: %s lists state %q twice; list it once", l.field, st))
			case dup:
				errs = append(errs, fmt.Errorf("moves: state %q is both in progress and done (in %s and %s); a state is one or the other", st, prev, l.field))
			}
			seen[st] = l.field
		}
	}
	return errs
}

// InProgress reports whether state is a state of a move under way.
func (m *Moves) InProgress(state string) bool { return slices.Contains(m.InProgressStates, state) }

// TiedMove is what orders two moves of one document that started at the
// same time.
type TiedMove struct {
	InProgress bool
	// LogShard is the shard whose move log holds the move, ID its move id.
	LogShard int
	ID       string
}

// NewerTied says whether a is newer than b, two moves of one document
// started at the same time: a move in progress first, then the higher log
// shard, then the longer and then the greater move id. The API orders
// ties so (internal/query/movetie.go), and the verifier expects them so.
func NewerTied(a, b TiedMove) bool {
	if a.InProgress != b.InProgress {
		return a.InProgress
	}
	if a.LogShard != b.LogShard {
		return a.LogShard > b.LogShard
	}
	if len(a.ID) != len(b.ID) {
		return len(a.ID) > len(b.ID)
	}
	return a.ID > b.ID
}

// Done reports whether state is a state of a finished move.
func (m *Moves) Done(state string) bool { return slices.Contains(m.DoneStates, state) }

// MovesOf returns the move configuration if documents is its documents
// table.
func (c *Config) MovesOf(documents string) (*Moves, bool) {
	if c.Moves == nil || c.Moves.DocumentsTable != documents {
		return nil, false
	}
	return c.Moves, true
}
