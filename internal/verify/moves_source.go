package verify

// The move log's ground truth, from the shards (table config `moves`):
// every move from every shard's log, and on which shards each moved
// document is live now.

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/tributary/tributary/internal/tables"
)

// srcMove is one move as its source shard's log has it. A move is
// identified by (LogShard, ID): per-shard serial ids collide across shards.
type srcMove struct {
	ID, Doc  string
	From, To int
	State    string
	Started  time.Time
	Finished *time.Time
	LogShard int
}

// readMoves reads the move log of one shard.
func (s *shardSource) readMoves(ctx context.Context, m *tables.Moves, logT *tables.Table) ([]srcMove, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	finished := "NULL::timestamptz"
	if m.FinishedColumn != "" {
		finished = pgx.Identifier{m.FinishedColumn}.Sanitize()
	}
	// Without a from-shard column the source is the shard of the log row.
	from := fmt.Sprint(s.id)
	if m.FromShardColumn != "" {
		from = pgx.Identifier{m.FromShardColumn}.Sanitize()
	}
	q := fmt.Sprintf(`SELECT %s::text, %s::text, %s::int, %s::int, %s::text, %s::timestamptz, %s::timestamptz FROM %s`,
		pgx.Identifier{logT.IDColumn}.Sanitize(), pgx.Identifier{m.DocumentColumn}.Sanitize(),
		from, pgx.Identifier{m.ToShardColumn}.Sanitize(),
		pgx.Identifier{m.StateColumn}.Sanitize(), pgx.Identifier{m.StartedColumn}.Sanitize(), finished,
		pgx.Identifier{logT.Schema, logT.Name}.Sanitize())
	rows, err := s.pool.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("shard %d: move log: %w", s.id, err)
	}
	defer rows.Close()
	var out []srcMove
	for rows.Next() {
		mv := srcMove{LogShard: s.id}
		if err := rows.Scan(&mv.ID, &mv.Doc, &mv.From, &mv.To, &mv.State, &mv.Started, &mv.Finished); err != nil {
			return nil, fmt.Errorf("shard %d: move log: %w", s.id, err)
		}
		mv.Started = mv.Started.UTC()
		out = append(out, mv)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("shard %d: move log: %w", s.id, err)
	}
	return out, nil
}

// liveAmong returns which of ids (text) are live on the shard in st.
func (s *shardSource) liveAmong(ctx context.Context, st *sourceTable, idColumn string, ids []string) (map[string]bool, error) {
	live := map[string]bool{}
	for start := 0; start < len(ids); start += chunkIDs {
		chunk := ids[start:min(len(ids), start+chunkIDs)]
		if err := func() error {
			ctx, cancel := context.WithTimeout(ctx, s.timeout)
			defer cancel()
			// Cast to the id's own type so that the primary key is used.
			rows, err := s.pool.Query(ctx, fmt.Sprintf("SELECT %[1]s::text FROM %[2]s WHERE %[1]s = ANY($1::text[]::%[3]s[]) AND %[4]s",
				pgx.Identifier{idColumn}.Sanitize(), st.ident, st.idType, st.filter), chunk)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					return err
				}
				live[id] = true
			}
			return rows.Err()
		}(); err != nil {
			return nil, fmt.Errorf("shard %d: live moved documents: %w", s.id, err)
		}
	}
	return live, nil
}

// moveTruth is what the shards say about moves.
type moveTruth struct {
	moves []srcMove
	// liveOn: document id -> shards where it is live now.
	liveOn map[string][]int
}

// sourceMoves reads every shard's move log, then where each moved
// document is live, all shards in parallel.
func (v *verifier) sourceMoves(ctx context.Context, m *tables.Moves, logT *tables.Table, docs *tableState) (*moveTruth, error) {
	per := make([][]srcMove, len(v.shards))
	g, gctx := errgroup.WithContext(ctx)
	for i, s := range v.shards {
		g.Go(func() (err error) {
			per[i], err = s.readMoves(gctx, m, logT)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	truth := &moveTruth{liveOn: map[string][]int{}}
	seen := map[string]bool{}
	var docIDs []string
	for _, l := range per {
		for _, mv := range l {
			truth.moves = append(truth.moves, mv)
			if !seen[mv.Doc] {
				seen[mv.Doc] = true
				docIDs = append(docIDs, mv.Doc)
			}
		}
	}
	live := make([]map[string]bool, len(v.shards))
	g, gctx = errgroup.WithContext(ctx)
	for i, s := range v.shards {
		g.Go(func() (err error) {
			live[i], err = s.liveAmong(gctx, docs.shards[s.id].st, docs.t.IDColumn, docIDs)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	for i, s := range v.shards {
		for id := range live[i] {
			truth.liveOn[id] = append(truth.liveOn[id], s.id)
		}
	}
	return truth, nil
}

// arrivedOn reports whether ClickHouse has any row, live or a delete
// tombstone, of document id on shard: the document arrived there (and may
// have been deleted since). The shards cannot say this; it tells a lost
// document from one that arrived and was deleted later.
func (r *chReader) arrivedOn(ctx context.Context, table, idColumn, id string, shard int) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	sql := fmt.Sprintf("SELECT count() FROM %s.%s FINAL WHERE toString(%s) = ? AND _shard = ?",
		chQuote(r.db), chQuote(table), chQuote(idColumn))
	var n uint64
	err := r.conn.QueryRow(ctx, sql, id, uint16(shard)).Scan(&n)
	if notLoaded(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("clickhouse: rows of %s %s: %w", table, id, err)
	}
	return n > 0, nil
}
