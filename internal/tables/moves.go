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
// table's id_column (the move id).
type Moves struct {
	// Table is the move log, a configured table.
	Table string `json:"table"`
	// DocumentsTable is the table whose rows move, a configured table.
	DocumentsTable string `json:"documents_table"`
	// DocumentColumn holds the moved row's id (same type as the documents
	// table's id column).
	DocumentColumn string `json:"document_column"`
	// FromShardColumn and ToShardColumn hold the source and target shard
	// numbers (integers, the shard numbers the readers use).
	FromShardColumn string `json:"from_shard_column"`
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

// validate checks m against the configured tables and parses Grace.
func (m *Moves) validate(c *Config) error {
	var errs []error
	for _, ref := range []struct{ what, v string }{{"table", m.Table}, {"documents_table", m.DocumentsTable}} {
		if _, ok := c.ByName(ref.v); !ok {
			errs = append(errs, fmt.Errorf("moves: %s %q is not a configured table", ref.what, ref.v))
		}
	}
	if m.Table != "" && m.Table == m.DocumentsTable {
		errs = append(errs, fmt.Errorf("moves: table and documents_table are both %q; the move log is a table of its own", m.Table))
	}
	cols := []struct {
		what, v  string
		optional bool
	}{
		{"document_column", m.DocumentColumn, false}, {"from_shard_column", m.FromShardColumn, false},
		{"to_shard_column", m.ToShardColumn, false}, {"state_column", m.StateColumn, false},
		{"started_column", m.StartedColumn, false}, {"finished_column", m.FinishedColumn, true},
		{"from_workspace_column", m.FromWorkspaceColumn, true}, {"to_workspace_column", m.ToWorkspaceColumn, true},
	}
	for _, col := range cols {
		if col.v == "" && col.optional {
			continue
		}
		if !identifier.MatchString(col.v) {
			errs = append(errs, fmt.Errorf("moves: %s %q is not a plain identifier", col.what, col.v))
		}
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

// validateStates checks the two state lists: non-empty, short, disjoint.
func (m *Moves) validateStates() []error {
	var errs []error
	if len(m.InProgressStates) == 0 {
		errs = append(errs, errors.New("moves: in_progress_states is required (e.g. [\"started\", \"copied\"])"))
	}
	if len(m.DoneStates) == 0 {
		errs = append(errs, errors.New("moves: done_states is required (e.g. [\"done\"])"))
	}
	for _, st := range append(slices.Clone(m.InProgressStates), m.DoneStates...) {
		if st == "" || len(st) > 64 {
			errs = append(errs, fmt.Errorf("moves: state %q must be 1 to 64 bytes", st))
		}
	}
	for _, st := range m.InProgressStates {
		if slices.Contains(m.DoneStates, st) {
			errs = append(errs, fmt.Errorf("moves: state %q is both in progress and done", st))
		}
	}
	return errs
}

// InProgress reports whether state is a state of a move under way.
func (m *Moves) InProgress(state string) bool { return slices.Contains(m.InProgressStates, state) }

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
