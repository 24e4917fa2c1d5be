package verify

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/tributary/tributary/internal/envelope"
)

// pollEvery is how often GET /v1/shards is asked while waiting.
const pollEvery = 200 * time.Millisecond

// catchUp reads every shard's current WAL position, then waits (at most
// Config.Wait) until the API reports each shard complete at or past it.
// Not getting there is not an error: the positions say so, and the run
// reports the shard as lagging. Errors are failures to ask.
func (v *verifier) catchUp(ctx context.Context) ([]Position, error) {
	target, err := v.walPositions(ctx)
	if err != nil {
		return nil, err
	}
	v.log.Info("waiting for the API to reach the shards' WAL positions", slog.Duration("max", v.cfg.Wait))
	deadline := time.Now().Add(v.cfg.Wait)
	for first := true; ; first = false {
		got, err := v.api.shards(ctx)
		// An API that cannot be reached at all on the first ask (after
		// the client's retries) is a wrong --api, not a slow pipeline.
		var apiErr *APIError
		if err != nil && (ctx.Err() != nil || time.Now().After(deadline) || first && !errors.As(err, &apiErr)) {
			return nil, err
		}
		if err == nil {
			pos, reached := positions(target, got)
			if reached || time.Now().After(deadline) {
				return pos, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pollEvery):
		}
	}
}

// walPositions reads pg_current_wal_lsn() of every shard in parallel.
func (v *verifier) walPositions(ctx context.Context) (map[int]envelope.LSN, error) {
	lsns := make([]envelope.LSN, len(v.shards))
	g, gctx := errgroup.WithContext(ctx)
	for i, s := range v.shards {
		g.Go(func() (err error) {
			lsns[i], err = s.walLSN(gctx)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	out := make(map[int]envelope.LSN, len(v.shards))
	for i, s := range v.shards {
		out[s.id] = lsns[i]
	}
	return out, nil
}

// positions matches the API's shards with the targets, in target order by
// shard id, and reports whether every target is reached. Shards the API
// knows but that are not targets are ignored.
func positions(target map[int]envelope.LSN, api []apiShard) ([]Position, bool) {
	byShard := make(map[int]apiShard, len(api))
	for _, a := range api {
		byShard[a.Shard] = a
	}
	out := make([]Position, 0, len(target))
	all := true
	for shard, lsn := range target {
		p := Position{Shard: shard, SourceLSN: lsn.String()}
		if a, ok := byShard[shard]; ok {
			p.APILSN, p.Complete = a.CommitLSN.String(), a.Complete
			p.Reached = a.Complete && a.CommitLSN >= lsn
		}
		all = all && p.Reached
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Position) int { return a.Shard - b.Shard })
	return out, all
}
