package loadgen

import (
	"context"
	"fmt"
	"math/rand/v2"
)

// legacyNote inserts a note into legacy_notes on the shard owning a random
// workspace, or edits one: ids come from each shard's own sequence.
func (g *Generator) legacyNote(ctx context.Context, rnd *rand.Rand) error {
	ws := g.workspace(rnd)
	shard := g.cfg.Ring.OwnerInt64(ws)
	var err error
	if rnd.IntN(4) == 0 {
		_, err = g.pools[shard].Exec(ctx, `UPDATE `+g.notesT+` SET note = note || ' (edited)'
			WHERE id = (SELECT max(id) FROM `+g.notesT+` WHERE workspace_id = $1)`, ws)
	} else {
		_, err = g.pools[shard].Exec(ctx, "INSERT INTO "+g.notesT+" (workspace_id, note) VALUES ($1, $2)",
			ws, fmt.Sprintf("note %d", rnd.IntN(1e6)))
	}
	if err != nil {
		return fmt.Errorf("shard %d %s: %w", shard, g.names.LegacyNotes, err)
	}
	g.Stats.LegacyNotes.Add(1)
	g.Stats.Rows.Add(1)
	return nil
}
