package verify

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/tributary/tributary/internal/progress"
	"github.com/tributary/tributary/internal/tables"
)

const (
	// chunkIDs is how many ids are read from the shards in one query each.
	chunkIDs = 500
	// maxExtraIDs bounds, per table and shard, the ClickHouse ids with no
	// source row that are checked one by one after a count mismatch.
	maxExtraIDs = 10000
	// progressEvery is how often a long comparison logs progress.
	progressEvery = 5 * time.Second
)

// Run checks the pipeline once: source shards against the API (and
// ClickHouse counts). An error means the check could not be done — bad
// configuration, a shard, ClickHouse or the API unreachable or answering
// nonsense; what differs is in the Report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	v, err := open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer v.close()
	return v.run(ctx)
}

// verifier holds the connections of one run. Everything is owned by the
// goroutine calling run; the errgroups it starts only read v and write
// their own result slots.
type verifier struct {
	cfg    Config
	log    *slog.Logger
	shards []*shardSource // by ascending shard id
	ch     *chReader
	api    *apiClient
}

func open(ctx context.Context, cfg Config) (*verifier, error) {
	v := &verifier{cfg: cfg, log: cfg.Log}
	if v.log == nil {
		v.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	shards := slices.Clone(cfg.Shards)
	slices.SortFunc(shards, func(a, b Shard) int { return a.ID - b.ID })
	v.shards = make([]*shardSource, len(shards))
	g, gctx := errgroup.WithContext(ctx)
	for i, s := range shards {
		g.Go(func() (err error) {
			v.shards[i], err = openShard(gctx, s, cfg.ShardTimeout)
			return err
		})
	}
	err := g.Wait()
	if err == nil {
		v.ch, err = openClickHouse(ctx, cfg.ClickHouse, cfg.ShardTimeout)
	}
	if err != nil {
		v.close()
		return nil, err
	}
	if v.api, err = newAPIClient(cfg, cfg.ShardTimeout); err != nil {
		v.close()
		return nil, err
	}
	return v, nil
}

func (v *verifier) close() {
	for _, s := range v.shards {
		if s != nil {
			s.close()
		}
	}
	if v.ch != nil {
		v.ch.close() //nolint:errcheck // read-only connections
	}
}

// shardTable is one table on one shard, as read at the start.
type shardTable struct {
	st    *sourceTable
	count int64
	// ids are the source's ids (or a sample), then the extra ones: ids
	// ClickHouse has for the shard that the source does not.
	ids     []string
	extra   int
	sampled bool
	chCount int64
	checked int
	viaAPI  int
}

// tableState is one configured table over all shards.
type tableState struct {
	t      *tables.Table
	shards map[int]*shardTable
	// diffs are the id differences (kinds other than count and lagging).
	diffs []Difference
	// counts are the count mismatches, by shard.
	counts map[int]Difference
}

func (v *verifier) run(ctx context.Context) (*Report, error) {
	start := time.Now()
	rep := &Report{Started: start.UTC(), API: v.cfg.APIURL}

	v.log.Info("reading the shards", slog.Int("shards", len(v.shards)), slog.Int("tables", len(v.cfg.Tables.Tables)))
	states, err := v.scatter(ctx)
	if err != nil {
		return nil, err
	}
	positions, err := v.catchUp(ctx)
	if err != nil {
		return nil, err
	}
	for _, ts := range states {
		if err := v.checkClickHouse(ctx, ts); err != nil {
			return nil, err
		}
		if err := v.checkTable(ctx, ts); err != nil {
			return nil, err
		}
	}
	movesRep, moveDiffs, err := v.checkMoves(ctx, states)
	if err != nil {
		return nil, err
	}
	revRep, revDiffs, err := v.checkRevenue(ctx)
	if err != nil {
		return nil, err
	}

	// A difference may be a change still in flight: wait for fresh
	// positions and check each one once more.
	pending := len(moveDiffs) + len(revDiffs)
	for _, ts := range states {
		pending += len(ts.diffs) + len(ts.counts)
	}
	if pending > 0 {
		v.log.Info("re-checking differences after waiting again", slog.Int("differences", pending))
		if positions, err = v.catchUp(ctx); err != nil {
			return nil, err
		}
		for _, ts := range states {
			n, err := v.recheck(ctx, ts)
			if err != nil {
				return nil, err
			}
			rep.Rechecked += n
		}
		if len(moveDiffs) > 0 {
			rep.Rechecked += len(moveDiffs)
			if movesRep, moveDiffs, err = v.checkMoves(ctx, states); err != nil {
				return nil, err
			}
		}
		if len(revDiffs) > 0 {
			rep.Rechecked += len(revDiffs)
			if revRep, revDiffs, err = v.checkRevenue(ctx); err != nil {
				return nil, err
			}
		}
	}

	rep.Moves, rep.Revenue = movesRep, revRep
	v.fill(rep, states, positions, append(moveDiffs, revDiffs...))
	rep.TookSeconds = time.Since(start).Seconds()
	return rep, nil
}

// fill writes the outcome into rep: what was checked, the positions, and
// the differences (lagging shards, count mismatches, then by table and id).
func (v *verifier) fill(rep *Report, states []*tableState, positions []Position, moveDiffs []Difference) {
	var all []Difference
	for _, p := range positions {
		if !p.Reached {
			all = append(all, Difference{Kind: KindLagging, Shard: p.Shard, Source: p.SourceLSN, API: orDash(p.APILSN),
				Detail: fmt.Sprintf("the API did not reach the shard's WAL position within %s (complete=%t)", v.cfg.Wait, p.Complete)})
		}
	}
	for _, ts := range states {
		tr := TableReport{Table: ts.t.Name}
		for _, s := range v.shards {
			sh := ts.shards[s.id]
			tr.Shards = append(tr.Shards, ShardReport{Shard: s.id, SourceRows: sh.count, ClickHouseRows: sh.chCount,
				Checked: sh.checked, ViaAPI: sh.viaAPI, Sampled: sh.sampled})
		}
		rep.Tables = append(rep.Tables, tr)
		shards := make([]int, 0, len(ts.counts))
		for s := range ts.counts {
			shards = append(shards, s)
		}
		slices.Sort(shards)
		for _, s := range shards {
			all = append(all, ts.counts[s])
		}
		all = append(all, ts.diffs...)
	}
	all = append(all, moveDiffs...)
	for _, d := range all {
		rep.Mismatches.add(d.Kind)
	}
	rep.Differences = all[:min(len(all), v.cfg.MaxDifferences)]
	if rep.Differences == nil {
		rep.Differences = []Difference{}
	}
	rep.Positions = positions
	rep.Passed = rep.Mismatches.Total() == 0
}

// scatter reads, from every shard in parallel, each table's columns, live
// row count and ids (or a sample).
func (v *verifier) scatter(ctx context.Context) ([]*tableState, error) {
	cfgTables := v.cfg.Tables.Tables
	per := make([][]*shardTable, len(v.shards)) // [shard index][table index]
	g, gctx := errgroup.WithContext(ctx)
	for i, s := range v.shards {
		g.Go(func() error {
			for ti := range cfgTables {
				st, err := s.table(gctx, &cfgTables[ti])
				if err != nil {
					return err
				}
				n, err := s.count(gctx, st)
				if err != nil {
					return err
				}
				ids, sampled, err := s.ids(gctx, st, n, v.cfg.Sample)
				if err != nil {
					return err
				}
				per[i] = append(per[i], &shardTable{st: st, count: n, ids: ids, sampled: sampled})
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	states := make([]*tableState, len(cfgTables))
	for ti := range cfgTables {
		ts := &tableState{t: &cfgTables[ti], shards: map[int]*shardTable{}, counts: map[int]Difference{}}
		for i, s := range v.shards {
			ts.shards[s.id] = per[i][ti]
			v.log.Info("source read", slog.String("table", ts.t.Name), slog.Int("shard", s.id),
				slog.Int64("rows", per[i][ti].count), slog.Int("ids", len(per[i][ti].ids)), slog.Bool("sampled", per[i][ti].sampled))
		}
		states[ti] = ts
	}
	return states, nil
}

// checkClickHouse compares live row counts per shard with ClickHouse, and
// for every shard whose ids were all read (no sampling) lists the shard's
// ClickHouse ids: those no source row has are added to the ids to check,
// so that each is reported as extra — even when a missing row on the same
// shard makes the counts agree.
func (v *verifier) checkClickHouse(ctx context.Context, ts *tableState) error {
	chCounts, err := v.ch.counts(ctx, ts.t.Name)
	if err != nil {
		return err
	}
	for _, s := range v.shards {
		sh := ts.shards[s.id]
		sh.chCount = chCounts[s.id]
		if sh.chCount != sh.count {
			ts.counts[s.id] = countDiff(ts.t.Name, s.id, sh.count, sh.chCount, "")
		}
		if sh.sampled || sh.chCount == 0 {
			continue // sampled: an id absent from the sample proves nothing
		}
		chIDs, err := v.ch.ids(ctx, ts.t.Name, ts.t.Key(), s.id, int(sh.count)+maxExtraIDs)
		if err != nil {
			return err
		}
		known := make(map[string]bool, len(sh.ids))
		for _, id := range sh.ids {
			known[id] = true
		}
		extra := 0
		for _, id := range chIDs {
			if !known[id] && extra < maxExtraIDs {
				sh.ids = append(sh.ids, id) // checked like any id: this shard has no such live row
				sh.extra++
				extra++
			}
		}
		if extra > 0 {
			v.log.Info("ids in ClickHouse that the shard does not have", slog.String("table", ts.t.Name),
				slog.Int("shard", s.id), slog.Int("ids", extra))
		}
	}
	for s, n := range chCounts {
		if _, ok := ts.shards[s]; !ok {
			ts.counts[s] = countDiff(ts.t.Name, s, 0, n, "a shard not given to the verifier")
		}
	}
	return nil
}

func countDiff(table string, shard int, src, ch int64, detail string) Difference {
	if detail == "" {
		detail = "live rows at the source vs in ClickHouse (FINAL, _deleted = 0)"
	}
	return Difference{Kind: KindCountMismatch, Table: table, Shard: shard,
		Source: fmt.Sprint(src), API: fmt.Sprint(ch), Detail: detail}
}

// checkTable compares every id read from any shard: a random
// Config.APISample of each shard's ids (and every id ClickHouse has that
// the shard does not) through the API, the others with ClickHouse's rows
// read in bulk (when the ids are integers).
func (v *verifier) checkTable(ctx context.Context, ts *tableState) error {
	viaAPI := func(string) bool { return true }
	if v.cfg.APISample > 0 && !ts.t.Composite() { // a composite key is read through the API only
		bulk, err := v.ch.bulkIDType(ctx, ts.t.Name, ts.t.IDColumn)
		if err != nil {
			return err
		}
		if bulk {
			api := map[string]bool{}
			for _, s := range v.shards {
				sh := ts.shards[s.id]
				own := sh.ids[:len(sh.ids)-sh.extra]
				for _, i := range rand.Perm(len(own))[:min(len(own), v.cfg.APISample)] {
					api[own[i]] = true
				}
				for _, id := range sh.ids[len(own):] {
					api[id] = true
				}
			}
			viaAPI = func(id string) bool { return api[id] }
		}
	}
	seen := map[string]bool{}
	var ids []string
	for _, s := range v.shards {
		for _, id := range ts.shards[s.id].ids {
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	slices.SortFunc(ids, compareIDText)
	v.log.Info("comparing", slog.String("table", ts.t.Name), slog.Int("ids", len(ids)))
	diffs, checked, err := v.checkIDs(ctx, ts, ids, viaAPI, true)
	if err != nil {
		return err
	}
	ts.diffs = diffs
	for s, n := range checked {
		if sh := ts.shards[s]; sh != nil {
			sh.checked += n.rows
			sh.viaAPI += n.viaAPI
		}
	}
	return nil
}

// compareIDText orders decimal ids numerically (shorter first) and uuids
// lexically.
func compareIDText(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// checked counts the source rows of one shard that were compared, and
// how many of them through the API.
type checked struct{ rows, viaAPI int }

// checkIDs compares the copies of every id with the id's live rows on
// every shard, read fresh per chunk: the API's copies where viaAPI says
// so (up to Config.Concurrency requests in flight), else the copies read
// from ClickHouse in one query per chunk. It returns the differences and,
// by shard, how many source rows were compared.
func (v *verifier) checkIDs(ctx context.Context, ts *tableState, ids []string, viaAPI func(string) bool, progress bool) ([]Difference, map[int]checked, error) {
	var diffs []Difference
	counts := map[int]checked{}
	start, last, shown := time.Now(), time.Now(), time.Time{}
	apiDone := 0
	for from := 0; from < len(ids); from += chunkIDs {
		chunk := ids[from:min(from+chunkIDs, len(ids))]
		var bulkIDs []string
		for _, id := range chunk {
			if !viaAPI(id) {
				bulkIDs = append(bulkIDs, id)
			}
		}
		var src map[int]map[string]*sourceRow
		var bulk map[string][]apiCopy
		g, gctx := errgroup.WithContext(ctx)
		g.Go(func() (err error) {
			src, err = v.sourceRows(gctx, ts, chunk)
			return err
		})
		g.Go(func() (err error) {
			bulk, err = v.ch.copies(gctx, ts.t.Name, ts.t.IDColumn, bulkIDs)
			return err
		})
		if err := g.Wait(); err != nil {
			return nil, nil, err
		}
		live := func(id string) map[int]*sourceRow {
			out := map[int]*sourceRow{}
			for shard, rows := range src {
				if r := rows[id]; r != nil {
					out[shard] = r
				}
			}
			return out
		}
		results := make([][]Difference, len(chunk))
		g, gctx = errgroup.WithContext(ctx)
		g.SetLimit(v.cfg.Concurrency)
		for i, id := range chunk {
			if !viaAPI(id) {
				results[i] = compareID(ts.t.Name, id, live(id), bulk[id])
				continue
			}
			apiDone++
			g.Go(func() error {
				copies, err := v.api.row(gctx, ts.t.Name, id)
				if err != nil {
					return fmt.Errorf("table %s id %s: %w", ts.t.Name, id, err)
				}
				results[i] = compareID(ts.t.Name, id, live(id), copies)
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return nil, nil, err
		}
		for _, r := range results {
			diffs = append(diffs, r...)
		}
		for shard, rows := range src {
			c := counts[shard]
			c.rows += len(rows)
			for id := range rows {
				if viaAPI(id) {
					c.viaAPI++
				}
			}
			counts[shard] = c
		}
		done := from + len(chunk)
		if show := v.cfg.ShowProgress; progress && show != nil && (time.Since(shown) >= time.Second || done == len(ids)) {
			shown = time.Now()
			show("verify "+ts.t.Name, progressStatus(ts.t.Name, done, len(ids), start), done == len(ids))
		}
		if progress && time.Since(last) >= progressEvery {
			last = time.Now()
			v.log.Info("progress", slog.String("table", ts.t.Name), slog.Int("ids_checked", done),
				slog.Int("ids", len(ids)), slog.Int("via_api", apiDone), slog.Int("differences", len(diffs)),
				slog.Float64("ids_per_s", float64(done)/time.Since(start).Seconds()))
		}
	}
	return diffs, counts, nil
}

// progressStatus is the comparison of table's ids as a progress status.
func progressStatus(table string, done, total int, start time.Time) progress.Status {
	s := progress.Status{Label: "verify " + table, Done: int64(done), Total: int64(total)}
	if secs := time.Since(start).Seconds(); secs > 0 {
		s.Rate = float64(done) / secs
	}
	return s
}

// sourceRows reads the rows with the given ids from every shard in
// parallel: by shard, by id.
func (v *verifier) sourceRows(ctx context.Context, ts *tableState, ids []string) (map[int]map[string]*sourceRow, error) {
	got := make([]map[string]*sourceRow, len(v.shards))
	g, gctx := errgroup.WithContext(ctx)
	for i, s := range v.shards {
		g.Go(func() (err error) {
			got[i], err = s.rows(gctx, ts.shards[s.id].st, ids)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	out := make(map[int]map[string]*sourceRow, len(v.shards))
	for i, s := range v.shards {
		out[s.id] = got[i]
	}
	return out, nil
}

// recheck checks the table's differing ids (through the API) and count
// mismatches again and keeps only what still differs. It returns how many it re-checked.
func (v *verifier) recheck(ctx context.Context, ts *tableState) (int, error) {
	seen := map[string]bool{}
	var ids []string
	for _, d := range ts.diffs {
		if !seen[d.ID] {
			seen[d.ID] = true
			ids = append(ids, d.ID)
		}
	}
	diffs, _, err := v.checkIDs(ctx, ts, ids, func(string) bool { return true }, false)
	if err != nil {
		return 0, err
	}
	ts.diffs = diffs
	n := len(ids)
	if len(ts.counts) == 0 {
		return n, nil
	}
	chCounts, err := v.ch.counts(ctx, ts.t.Name)
	if err != nil {
		return 0, err
	}
	for shard := range ts.counts {
		n++
		sh := ts.shards[shard]
		if sh == nil { // a shard not given to the verifier
			if chCounts[shard] == 0 {
				delete(ts.counts, shard)
			} else {
				ts.counts[shard] = countDiff(ts.t.Name, shard, 0, chCounts[shard], "a shard not given to the verifier")
			}
			continue
		}
		src, err := v.shardByID(shard).count(ctx, sh.st)
		if err != nil {
			return 0, err
		}
		sh.count, sh.chCount = src, chCounts[shard]
		if src == sh.chCount {
			delete(ts.counts, shard)
		} else {
			ts.counts[shard] = countDiff(ts.t.Name, shard, src, sh.chCount, "")
		}
	}
	return n, nil
}

func (v *verifier) shardByID(id int) *shardSource {
	for _, s := range v.shards {
		if s.id == id {
			return s
		}
	}
	return nil
}
