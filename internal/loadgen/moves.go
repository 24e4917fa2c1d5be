package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/jackc/pgx/v5"
)

// move moves a random known document to a workspace owned by another shard
// with the saga; the outcome (complete, half-done, lost) is drawn from the
// configured shares. A moved document is known on its target afterwards; a
// half-done or lost one is not touched again, so it stays as it was left.
func (g *Generator) move(ctx context.Context, rnd *rand.Rand) error {
	from := g.cfg.Ring.OwnerInt64(g.workspace(rnd))
	doc, ok := g.pick(g.docs, from, rnd, true)
	if !ok {
		return nil
	}
	var fromWS int64
	err := g.pools[from].QueryRow(ctx, "SELECT workspace_id FROM "+g.docsT+" WHERE id = $1", doc).Scan(&fromWS)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // deleted meanwhile
	}
	if err != nil {
		return fmt.Errorf("shard %d move: %w", from, err)
	}
	toWS, to, ok := g.otherShardWorkspace(rnd, from)
	if !ok {
		g.add(g.docs, from, doc)
		return nil // one shard only: nowhere to move to
	}
	how := Complete
	switch r := rnd.Float64(); {
	case r < g.cfg.LoseShare:
		how = Lose
	case r < g.cfg.LoseShare+g.cfg.HalfDoneShare:
		how = HalfDone
	}
	src, dst := Shard{ID: from, Pool: g.pools[from]}, Shard{ID: to, Pool: g.pools[to]}
	if _, err := g.saga.Move(ctx, src, dst, doc, fromWS, toWS, how); err != nil {
		return fmt.Errorf("move %d from shard %d to %d: %w", doc, from, to, err)
	}
	switch how {
	case Complete:
		g.add(g.docs, to, doc)
		g.Stats.MovesDone.Add(1)
	case HalfDone:
		g.Stats.MovesHalfDone.Add(1)
	case Lose:
		g.Stats.MovesLost.Add(1)
	}
	return nil
}

// otherShardWorkspace draws workspaces until one is owned by a shard other
// than from (a few tries: with several shards most draws are).
func (g *Generator) otherShardWorkspace(rnd *rand.Rand, from int) (int64, int, bool) {
	for range 20 {
		ws := int64(1 + rnd.IntN(max(1, g.cfg.Workspaces)))
		if to := g.cfg.Ring.OwnerInt64(ws); to != from {
			return ws, to, true
		}
	}
	return 0, 0, false
}
