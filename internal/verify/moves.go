package verify

import (
	"context"
	"log/slog"
)

// checkMoves compares the move log's ground truth with the API (see
// moves_compare.go). Without a move log configured it does nothing.
func (v *verifier) checkMoves(ctx context.Context, states []*tableState) (*MovesReport, []Difference, error) {
	m := v.cfg.Tables.Moves
	if m == nil {
		return nil, nil, nil
	}
	logT, _ := v.cfg.Tables.ByName(m.Table)
	var docs *tableState
	for _, ts := range states {
		if ts.t.Name == m.DocumentsTable {
			docs = ts
		}
	}
	if logT == nil || docs == nil {
		return nil, nil, nil // Validate refuses this
	}
	listed, cutoff, ok, err := v.api.moveAnomalies(ctx)
	if err != nil {
		return nil, nil, err
	}
	if !ok {
		return nil, []Difference{{Kind: KindMoveAnomaly, Table: m.DocumentsTable, Shard: -1, Source: "move log " + m.Table, API: "no_move_log",
			Detail: "the table config has a move log but the API serves none (is it started with the same --tables?)"}}, nil
	}
	// The API states the cutoff it used (whole seconds); the shards' times
	// are compared at the same precision, so the two agree exactly.
	truth, err := v.sourceMoves(ctx, m, logT, docs)
	if err != nil {
		return nil, nil, err
	}
	e := expectMoves(truth, m, cutoff)
	byKey := make(map[string]srcMove, len(truth.moves))
	for _, mv := range truth.moves {
		byKey[mv.key()] = mv
	}
	docIDCol := docs.t.IDColumn
	diffs, deletedLater, err := compareMoveAnomalies(m.DocumentsTable, e, byKey, truth.liveOn, listed, func(mv srcMove) (bool, error) {
		return v.ch.arrivedOn(ctx, m.DocumentsTable, docIDCol, mv.Doc, mv.To)
	})
	if err != nil {
		return nil, nil, err
	}
	for _, mv := range e.current {
		d, err := v.api.document(ctx, mv.Doc)
		if err != nil {
			return nil, nil, err
		}
		diffs = append(diffs, compareMoveView(m.DocumentsTable, mv, truth.liveOn[mv.Doc], d)...)
	}
	rep := &MovesReport{Table: m.DocumentsTable, Moves: len(truth.moves), InProgress: len(e.current), Stuck: len(e.stuck),
		Lost: len(e.lost) - deletedLater, ArrivedThenDeleted: deletedLater}
	v.log.Info("moves checked", slog.Int("moves", rep.Moves), slog.Int("in_progress", rep.InProgress),
		slog.Int("stuck", rep.Stuck), slog.Int("lost", rep.Lost), slog.Int("differences", len(diffs)))
	return rep, diffs, nil
}
