package reader

// The initial snapshot: chunked, parallel, resumable, without a consistent
// snapshot and without a Kafka transaction.
//
// Why a copy that is not consistent is still exact. Every envelope carries
// a version (its change's LSN) and the loader keeps, per row (id, shard),
// the highest version; snapshot rows carry version 0, so any streamed change
// of a row wins over any copy of it. The slot is created first, at its
// consistent point C, and streaming starts at C once the copy is done, so
// every change committed after C reaches Kafka with its own LSN. Take any
// row and the source's state at the end, F:
//
//   - last changed before C: it never changes during the copy, so whichever
//     chunk covers its key sees it, with its final value (chunks cover the
//     whole key space: each range (lo, hi] is paged by "key > last copied"
//     in key order until a chunk comes back short);
//   - changed after C: its last change is streamed with an LSN > 0 and wins
//     over whatever (possibly older, possibly newer) copy a chunk took; a
//     delete's tombstone wins the same way; an update that changes the key
//     is streamed as a delete of the old id and an insert of the new one;
//   - a TRUNCATE after C is streamed after every snapshot record (streaming
//     starts after the copy), and the loader tombstones the shard's rows
//     older than it, copies included; rows inserted after it are streamed.
//   - unchanged TOAST values of a streamed update are taken from the newest
//     stored version: if that is a copy, no streamed change set the column
//     between C and that update, or a later one sets it and supersedes.
//
// One gap in that argument, and its fix: "committed before C" means the
// commit record precedes C in the WAL, while a chunk's snapshot sees a
// transaction only once it left the proc array, which happens after its
// commit record is written (with synchronous replication, possibly long
// after). A chunk could then miss a transaction the slot will not stream.
// So after creating the slot, the reader imports the slot's exported
// snapshot, notes which transactions it counts as finished, and waits until
// none of them is still running in a fresh snapshot (waitCommitted). Every
// chunk snapshot after that sees everything before C.
//
// Intermediate states: while the stream is between C and the end of the
// copy E (the WAL insert position after the last chunk), ClickHouse may
// show a row copied at a later state than the stream has reached. So no
// watermark is published below E: a shard is called complete at a
// position only when its data is the source's state at that position.
//
// At-least-once without a transaction: records go through the idempotent
// acks=all producer; a range's progress (the last key copied) is stored in
// the reader-state topic only after Kafka acknowledged that chunk and every
// earlier chunk of the range. A restart continues each range after its
// stored key; chunks produced but not recorded are copied again (the
// loader drops or overwrites equal versions, and a copy that differs from
// the earlier one belongs to a row changed after C, which the stream
// fixes). The slot is not touched during the copy: replication starts only
// afterwards, so it is never confirmed past C before the copy is complete,
// and an unfinished snapshot resumes only if the slot is still at C.
//
// Tables without a primary key or replica identity index (REPLICA IDENTITY
// FULL) have no key to page by: they are copied in ranges of heap blocks,
// resumable the same way (snapshot_ctid.go).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/tributary/tributary/internal/decode"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/rowkey"
	"github.com/tributary/tributary/internal/tables"
)

// ErrSnapshotIncomplete is returned when the copy ended without every range
// done (a bug, or the source changed under it in a way it cannot follow).
var ErrSnapshotIncomplete = errors.New("snapshot incomplete")

// querier is what column and key lookups need.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// snapshotColumns reads a table's columns as the envelope describes them,
// with their types named as the stream names them (decode.Relations.Type):
// built-in types by format_type, the others resolved through the catalogue.
func snapshotColumns(ctx context.Context, conn querier, t tables.Table) ([]envelope.Column, error) {
	rows, err := conn.Query(ctx, `
		SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.atttypid::int8, a.atttypmod,
		       COALESCE(a.attnum = ANY(i.indkey), false)
		FROM pg_attribute a
		JOIN pg_class c ON c.oid = a.attrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary
		WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY a.attnum`, t.Schema, t.Name)
	if err != nil {
		return nil, fmt.Errorf("columns of %s: %w", t.Name, err)
	}
	defer rows.Close()
	var cols []envelope.Column
	var mods []int32
	for rows.Next() {
		var c envelope.Column
		var oid int64
		var typmod int32
		if err := rows.Scan(&c.Name, &c.Type, &oid, &typmod, &c.Key); err != nil {
			return nil, fmt.Errorf("columns of %s: %w", t.Name, err)
		}
		c.OID = uint32(oid)
		if !t.Replicates(c.Name) {
			continue // not in the publication's column list (replicate.go)
		}
		cols = append(cols, c)
		mods = append(mods, typmod)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("columns of %s: %w", t.Name, err)
	}
	rows.Close()
	for i := range cols {
		if _, builtin := decode.TypeName(cols[i].OID, mods[i]); builtin {
			continue
		}
		ct, err := catalogType(ctx, conn, cols[i].OID, mods[i])
		if err != nil {
			return nil, fmt.Errorf("columns of %s: column %s: %w", t.Name, cols[i].Name, err)
		}
		cols[i].Type, cols[i].Enum = ct.Name, ct.Enum
	}
	return cols, nil
}

// createAndSnapshot creates the slot, waits until every transaction it
// counts as committed is visible, stores the plan and copies the tables.
// It returns the slot's consistent point, where streaming starts.
func (r *Reader) createAndSnapshot(ctx context.Context, repl *pgconn.PgConn, conn *pgx.Conn) (envelope.LSN, error) {
	// No consistent point stored: a crash before the plan is stored drops
	// and recreates the slot.
	if err := r.state.save(ctx, readerState{Slot: r.cfg.Slot, Shard: r.cfg.Shard}); err != nil {
		return 0, err
	}
	res, err := createSlot(ctx, repl, r.cfg.Slot)
	if err != nil {
		return 0, err
	}
	snapName := res.SnapshotName
	cp, err := envelope.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return 0, err
	}
	r.log.Info("slot created; taking initial snapshot", slog.String("slot", r.cfg.Slot),
		slog.String("consistent_point", cp.String()), slog.String("snapshot", snapName))
	if err := waitCommitted(ctx, conn, snapName, r.log); err != nil {
		return 0, err
	}
	plan, err := r.planSnapshot(ctx, conn, nil)
	if err != nil {
		return 0, err
	}
	st := readerState{Slot: r.cfg.Slot, Shard: r.cfg.Shard, ConsistentPoint: cp, Snapshot: &plan}
	if err := r.state.save(ctx, st); err != nil {
		return 0, err
	}
	r.tracker = r.newTracker(cp)
	if err := r.copySnapshot(ctx, conn, &st); err != nil {
		return 0, fmt.Errorf("initial snapshot: %w", err)
	}
	return cp, nil
}

// waitCommitted waits until no transaction that the slot's exported
// snapshot counts as finished still shows as running in a fresh snapshot
// (see the top of this file). It must run before the replication
// connection is used again: the exported snapshot lives until then.
// Requires PostgreSQL 13 (pg_current_snapshot).
func waitCommitted(ctx context.Context, conn *pgx.Conn, snapName string, log *slog.Logger) error {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("import slot snapshot: %w", err)
	}
	var exported string
	_, err = tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+strings.ReplaceAll(snapName, "'", "")+"'")
	if err == nil {
		err = tx.QueryRow(ctx, "SELECT pg_current_snapshot()::text").Scan(&exported)
	}
	tx.Rollback(ctx) //nolint:errcheck // read-only
	if err != nil {
		return fmt.Errorf("import slot snapshot %s: %w", snapName, err)
	}
	xmin, xmax, xip, err := splitSnapshot(exported)
	if err != nil {
		return fmt.Errorf("import slot snapshot %s: %w", snapName, err)
	}
	return waitXids(ctx, log, "snapshot waits for transactions that committed before the slot's consistent point but are not visible yet (synchronous replication?)",
		func(ctx context.Context) ([]string, error) {
			var running []string
			err := conn.QueryRow(ctx, `SELECT COALESCE(array_agg(x::text), '{}')
				FROM pg_snapshot_xip(pg_current_snapshot()) x
				WHERE x < $1::text::xid8 OR (x < $2::text::xid8 AND x::text <> ALL ($3::text[]))`,
				xmin, xmax, xip).Scan(&running)
			if err != nil {
				return nil, fmt.Errorf("check transactions committed before the slot: %w", err)
			}
			return running, nil
		})
}

// splitSnapshot splits a snapshot in pg_snapshot's text form,
// xmin:xmax:xip,... It is parsed here rather than cast back to
// pg_snapshot: a slot's exported snapshot can print an xmin above its
// xmax (seen with slots created at once on one server), which
// pg_snapshot's input refuses. The snapshot counts a transaction x as
// finished when x < xmin, or x < xmax and x is not in xip (PostgreSQL's
// XidInMVCCSnapshot), which holds for such a snapshot too.
func splitSnapshot(text string) (xmin, xmax string, xip []string, err error) {
	parts := strings.Split(text, ":")
	if len(parts) != 3 {
		return "", "", nil, fmt.Errorf("snapshot %q is not xmin:xmax:xip", text)
	}
	xip = []string{}
	if parts[2] != "" {
		xip = strings.Split(parts[2], ",")
	}
	for _, x := range append([]string{parts[0], parts[1]}, xip...) {
		if _, err := strconv.ParseUint(x, 10, 64); err != nil {
			return "", "", nil, fmt.Errorf("snapshot %q: bad transaction id %q", text, x)
		}
	}
	return parts[0], parts[1], xip, nil
}

// waitXids polls running (every 50 ms) until it returns no transaction,
// logging waiting with the ones left every 10 s.
func waitXids(ctx context.Context, log *slog.Logger, waiting string, running func(context.Context) ([]string, error)) error {
	start := time.Now()
	nextLog := start.Add(10 * time.Second)
	for {
		xids, err := running(ctx)
		if err != nil {
			return err
		}
		if len(xids) == 0 {
			return nil
		}
		if time.Now().After(nextLog) {
			log.Warn(waiting, slog.Any("xids", xids), slog.Duration("waited", time.Since(start)))
			nextLog = time.Now().Add(10 * time.Second)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// planSnapshot makes the plan for every configured table, keeping the
// stored plan (and progress) of tables whose key is unchanged.
func (r *Reader) planSnapshot(ctx context.Context, conn *pgx.Conn, prev *snapshotState) (snapshotState, error) {
	st := snapshotState{Started: time.Now().UTC()}
	if prev != nil {
		st.Started = prev.Started
	}
	for _, t := range r.cfg.Tables.Tables {
		key, err := tableKey(ctx, conn, t)
		if err != nil {
			return st, err
		}
		var filenode uint32
		var blocks int64
		if len(key) == 0 {
			if filenode, blocks, err = relFile(ctx, conn, t); err != nil {
				return st, err
			}
		}
		if prev != nil {
			if i := findTable(prev, t); i >= 0 {
				if p := prev.Tables[i]; r.keepPlan(p, key, filenode) {
					st.Tables = append(st.Tables, p)
					continue
				}
			}
		}
		tp, err := planTable(ctx, conn, t, key, r.cfg.SnapshotRangesPerTable, r.cfg.SnapshotChunkRows)
		if err != nil {
			return st, err
		}
		if len(key) == 0 && filenode == 0 {
			r.log.Warn("snapshot: partitioned table without a primary key or replica identity index; it is copied in one chunk, not resumable within the table",
				slog.String("table", t.Name))
		} else if len(key) == 0 {
			planCtid(&tp, filenode, blocks, r.cfg.SnapshotRangesPerTable, r.cfg.SnapshotChunkRows)
			r.log.Info("snapshot: table has no primary key or replica identity index; it is copied by ctid (heap block) ranges",
				slog.String("table", t.Name), slog.Int64("blocks", blocks), slog.Int("ranges", len(tp.Ranges)),
				slog.Int64("chunk_blocks", tp.ChunkBlocks))
		}
		st.Tables = append(st.Tables, tp)
	}
	return st, nil
}

// keepPlan reports whether a stored table plan still applies: same key
// and, for a ctid plan, same file. Otherwise the table is copied from the
// start (its earlier rows are harmless duplicates).
func (r *Reader) keepPlan(p tableProgress, key []keyColumn, filenode uint32) bool {
	switch {
	case !slices.Equal(p.Key, keyNames(key)):
		r.log.Warn("snapshot: the table's key changed since the copy began; copying it from the start",
			slog.String("table", p.Name), slog.Any("was", p.Key), slog.Any("now", keyNames(key)))
		return false
	case len(key) > 0:
		return true
	case filenode == 0: // no storage (partitioned): one chunk
		return !p.Ctid
	case !p.Ctid:
		r.log.Warn("snapshot: keyless table planned as one chunk by an earlier version; copying it again by ctid ranges",
			slog.String("table", p.Name))
		return false
	case p.Filenode != filenode:
		r.log.Warn("snapshot: the table was rewritten since its copy began (VACUUM FULL, CLUSTER, TRUNCATE or a rewriting ALTER TABLE); copying it from the start",
			slog.String("table", p.Name), slog.Any("file_was", p.Filenode), slog.Any("file_now", filenode))
		return false
	}
	return true
}

func findTable(st *snapshotState, t tables.Table) int {
	for i, p := range st.Tables {
		if p.Schema == t.Schema && p.Name == t.Name {
			return i
		}
	}
	return -1
}

// snapTable is what the workers need about one table.
type snapTable struct {
	t     tables.Table
	sel   selection // what a chunk reads: the replicated columns and rows
	cols  []envelope.Column
	key   []keyColumn
	keyAt []int // column of each key column in a SELECT * row
	idAt  []int // column of each id column (tables.Table.Key) in a SELECT * row
	// epoch is stamped on the copied rows: the reader's for the initial
	// snapshot, the resnapshot's own for a resnapshot.
	epoch uint16
}

// id is the key text (internal/rowkey) of a SELECT * row: vals as read
// (nil for NULL), strs their text. ok is false when an id column is NULL.
func (st *snapTable) id(vals [][]byte, strs []string) (id string, ok bool) {
	if len(st.idAt) == 1 {
		return strs[st.idAt[0]], vals[st.idAt[0]] != nil
	}
	parts := make([]string, len(st.idAt))
	for i, at := range st.idAt {
		if vals[at] == nil {
			return "", false
		}
		parts[i] = strs[at]
	}
	return rowkey.Encode(parts), true
}

// copySnapshot copies every range of st.Snapshot not yet done, then stores
// the snapshot as done. st.ConsistentPoint is the slot's. A keyless table
// rewritten during its copy is planned and copied again, a few times at
// most (a table rewritten without pause fails the snapshot loudly).
func (r *Reader) copySnapshot(ctx context.Context, conn *pgx.Conn, st *readerState) error {
	const attempts = 5
	for i := 1; ; i++ {
		err := r.copySnapshotOnce(ctx, conn, st)
		if !errors.Is(err, errTableRewritten) || i == attempts {
			return err
		}
		r.log.Warn("snapshot: a table was rewritten during its copy; planning it again", slog.Any("err", err))
	}
}

// copySnapshotOnce is one attempt of copySnapshot: plan, copy the ranges
// not done, then either keep the acknowledged progress (on failure) or
// store the snapshot as done.
func (r *Reader) copySnapshotOnce(ctx context.Context, conn *pgx.Conn, st *readerState) error {
	plan, err := r.planSnapshot(ctx, conn, st.Snapshot)
	if err != nil {
		return err
	}
	st.Snapshot = &plan
	tabs, err := r.snapTables(ctx, conn)
	if err != nil {
		return err
	}
	prog := r.snapshotProgress(plan)
	before := totalsOf(&plan)
	r.log.Info("snapshot copying", slog.String("consistent_point", st.ConsistentPoint.String()),
		slog.Int("tables", before.tables), slog.Int("ranges", before.ranges), slog.Int("ranges_done", before.rangesDone),
		slog.Int64("rows_done", before.rows), slog.Int64("estimated_rows", before.estimate),
		slog.Int("workers", r.cfg.SnapshotWorkers), slog.Int("chunk_rows", r.cfg.SnapshotChunkRows))

	start := time.Now()
	saveCtx, stopSaving := context.WithCancel(ctx)
	saved := make(chan struct{})
	go func() {
		defer close(saved)
		r.snapshotSaver(saveCtx, st, prog, before, start)
	}()
	err = r.copyRanges(ctx, &plan, tabs, prog, st.ConsistentPoint)
	if err == nil {
		err = r.snapshotAcked(ctx, prog)
	}
	stopSaving()
	<-saved // no progress save may land after the final state
	if err != nil {
		r.keepSnapshotProgress(ctx, st, prog)
		return err
	}
	return r.finishSnapshot(ctx, conn, st, prog, before, start)
}

// snapTables looks up every configured table for the copy, in the
// configuration's order (planSnapshot keeps it).
func (r *Reader) snapTables(ctx context.Context, conn *pgx.Conn) ([]snapTable, error) {
	tabs := make([]snapTable, len(r.cfg.Tables.Tables))
	for i, t := range r.cfg.Tables.Tables {
		var err error
		if tabs[i], err = r.snapTable(ctx, conn, t); err != nil {
			return nil, err
		}
		tabs[i].epoch = r.epoch
	}
	return tabs, nil
}

// snapshotProgress tracks plan's acknowledged chunks in the snapshot
// metrics, starting them at what plan has done already.
func (r *Reader) snapshotProgress(plan snapshotState) *snapProgress {
	prog := newSnapProgress(plan, func(ti int, rows int64, tp *tableProgress) {
		name := plan.Tables[ti].Name
		r.m.snapshotRows.WithLabelValues(name).Add(float64(rows))
		r.m.snapshotChunks.WithLabelValues(name).Inc()
		r.m.snapshotProgress.WithLabelValues(name).Set(progressRatio(tp))
	})
	for _, tp := range plan.Tables {
		r.m.snapshotEstimated.WithLabelValues(tp.Name).Set(float64(tp.Estimate))
		r.m.snapshotProgress.WithLabelValues(tp.Name).Set(progressRatio(&tp))
	}
	return prog
}

// snapWork is one range of one table to copy.
type snapWork struct{ table, rng int }

// copyRanges copies every range of plan not done yet, on
// SnapshotWorkers connections of their own, each taking the next range
// when it finished one. cp is the slot's consistent point.
func (r *Reader) copyRanges(ctx context.Context, plan *snapshotState, tabs []snapTable, prog *snapProgress, cp envelope.LSN) error {
	var queue []snapWork
	for ti, tp := range plan.Tables {
		for ri, rg := range tp.Ranges {
			if !rg.Done {
				queue = append(queue, snapWork{ti, ri})
			}
		}
	}
	return copyQueue(ctx, r, queue, "snapshot", "", func(gctx context.Context, wc *pgx.Conn, enc *envelope.Encoder, pace *pacer, wk snapWork) error {
		return r.copyWork(gctx, ctx, wc, enc, pace, prog, plan, tabs, wk, cp)
	})
}

// copyQueue copies queue's items on up to SnapshotWorkers connections of
// their own, each item by copy under one shared pacer; setup (when not
// empty) runs first on each connection, and what names them in errors. The
// first error ends every worker.
func copyQueue[T any](ctx context.Context, r *Reader, queue []T, what, setup string,
	copy func(gctx context.Context, wc *pgx.Conn, enc *envelope.Encoder, pace *pacer, item T) error) error {
	var mu sync.Mutex
	next := 0
	take := func() (T, bool) {
		mu.Lock()
		defer mu.Unlock()
		var none T
		if next >= len(queue) {
			return none, false
		}
		next++
		return queue[next-1], true
	}
	pace := newPacer(r.cfg.SnapshotMaxRowsPerSecond)
	g, gctx := errgroup.WithContext(ctx)
	for w := 0; w < min(r.cfg.SnapshotWorkers, len(queue)); w++ {
		g.Go(func() error {
			wc, err := pgx.Connect(gctx, r.cfg.DSN)
			if err != nil {
				return fmt.Errorf("%s connection: %w", what, err)
			}
			defer wc.Close(context.WithoutCancel(gctx))
			if setup != "" {
				if _, err := wc.Exec(gctx, setup); err != nil {
					return fmt.Errorf("%s connection: %w", what, err)
				}
			}
			var enc envelope.Encoder
			for {
				item, ok := take()
				if !ok {
					return nil
				}
				if err := copy(gctx, wc, &enc, pace, item); err != nil {
					return err
				}
			}
		})
	}
	return g.Wait()
}

// copyWork copies one range, by key or, for a keyless table, by block
// (see copyRange for ctx and pctx).
func (r *Reader) copyWork(ctx, pctx context.Context, conn *pgx.Conn, enc *envelope.Encoder, pace *pacer, prog *snapProgress,
	plan *snapshotState, tabs []snapTable, wk snapWork, cp envelope.LSN) error {
	tp := &plan.Tables[wk.table]
	rg := tp.Ranges[wk.rng]
	if tp.Ctid {
		return r.copyCtidRange(ctx, pctx, conn, enc, pace, prog, &tabs[wk.table], tp, wk.table, wk.rng, rg, cp)
	}
	return r.copyRange(ctx, pctx, conn, enc, pace, prog, &tabs[wk.table], wk.table, wk.rng, rg, cp)
}

// snapshotAcked waits for Kafka's answers to every record handed over and
// says whether any failed.
func (r *Reader) snapshotAcked(ctx context.Context, prog *snapProgress) error {
	if err := r.producer.Flush(ctx); err != nil {
		return fmt.Errorf("snapshot flush: %w", err)
	}
	if err := prog.failure(); err != nil {
		return fmt.Errorf("snapshot produce: %w", err)
	}
	return nil
}

// keepSnapshotProgress stores what Kafka acknowledged of a failed copy, so
// that the restart continues there.
func (r *Reader) keepSnapshotProgress(ctx context.Context, st *readerState, prog *snapProgress) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	final, _ := prog.state()
	st.Snapshot = &final
	if err := r.state.save(sctx, *st); err != nil {
		r.log.Warn("saving snapshot progress failed", slog.Any("err", err))
	}
}

// finishSnapshot checks that every range was copied, ends the epoch and
// stores the snapshot as done with the position where its copy ended (no
// watermark below it). before is what was done when this run started.
func (r *Reader) finishSnapshot(ctx context.Context, conn *pgx.Conn, st *readerState, prog *snapProgress, before snapTotals, start time.Time) error {
	final, _ := prog.state()
	tot := totalsOf(&final)
	if tot.rangesDone != tot.ranges {
		return fmt.Errorf("%w: %d of %d ranges done", ErrSnapshotIncomplete, tot.rangesDone, tot.ranges)
	}
	var endText string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&endText); err != nil {
		return fmt.Errorf("snapshot end position: %w", err)
	}
	end, err := envelope.ParseLSN(endText)
	if err != nil {
		return err
	}
	if err := r.endEpoch(ctx, st.ConsistentPoint); err != nil {
		return err
	}
	done := readerState{Slot: r.cfg.Slot, Shard: r.cfg.Shard, SnapshotDone: true, Confirmed: st.ConsistentPoint,
		ConsistentPoint: st.ConsistentPoint, SnapshotEnd: end}
	if err := r.state.save(ctx, done); err != nil {
		return err
	}
	*st = done
	r.snapCP, r.snapEnd = st.ConsistentPoint, end
	took := time.Since(start)
	r.log.Info("snapshot complete", slog.Int64("rows", tot.rows), slog.Int64("rows_this_run", tot.rows-before.rows),
		slog.Int64("chunks", tot.chunks), slog.Duration("took", took),
		slog.Float64("rows_per_s", float64(tot.rows-before.rows)/took.Seconds()),
		slog.String("end", end.String()))
	return nil
}

// snapTable looks up a table's columns and key and where they are in a
// SELECT * row.
func (r *Reader) snapTable(ctx context.Context, conn *pgx.Conn, t tables.Table) (snapTable, error) {
	st := snapTable{t: t}
	var err error
	if st.cols, err = snapshotColumns(ctx, conn, t); err != nil {
		return st, err
	}
	if st.key, err = tableKey(ctx, conn, t); err != nil {
		return st, err
	}
	st.sel = tableSelection(t, st.cols)
	for _, id := range t.Key() {
		at := slices.IndexFunc(st.cols, func(c envelope.Column) bool { return c.Name == id })
		if at < 0 {
			return st, fmt.Errorf("snapshot %s: no id column %q", t.Name, id)
		}
		st.idAt = append(st.idAt, at)
	}
	for _, k := range st.key {
		at := slices.IndexFunc(st.cols, func(c envelope.Column) bool { return c.Name == k.Name })
		if at < 0 {
			return st, fmt.Errorf("snapshot %s: key column %q is not among its columns", t.Name, k.Name)
		}
		st.keyAt = append(st.keyAt, at)
	}
	return st, nil
}

// copyRange copies one range, chunk by chunk, from its stored position.
// Each chunk is one statement (its own snapshot); its records are handed
// to the producer as they are read, and the chunk is recorded when Kafka
// acknowledged them all (snapProgress).
//
// Records are produced with pctx, not ctx: ctx (the workers' group) ends
// when the last worker returns, while records may still be buffered.
func (r *Reader) copyRange(ctx, pctx context.Context, conn *pgx.Conn, enc *envelope.Encoder, pace *pacer, prog *snapProgress,
	tab *snapTable, ti, ri int, rg rangeProgress, cp envelope.LSN) error {
	t := tab.t
	limit := r.cfg.SnapshotChunkRows
	img := newRowImage(tab)
	for {
		if err := pace.wait(ctx, limit); err != nil {
			return err
		}
		if err := prog.failure(); err != nil {
			return fmt.Errorf("snapshot produce: %w", err)
		}
		q, args := chunkQuery(tab.sel, tab.key, &rg, limit)
		c := prog.open(ti, ri)
		acked := r.chunkAcked(prog, c)
		now := time.Now().UTC()
		res := conn.PgConn().ExecParams(ctx, q, args, nil, nil, []int16{0})
		var n int64
		var lastNull bool // a key column of the last row was NULL
		for res.NextRow() {
			vals := res.Values()
			if err := r.produceSnapRow(pctx, enc, img, tab, vals, now, cp, acked); err != nil {
				res.Close()
				return err
			}
			lastNull = false
			for _, at := range tab.keyAt {
				lastNull = lastNull || vals[at] == nil
			}
			n++
		}
		var lastKey []string
		if n > 0 && len(tab.key) > 0 {
			if lastNull {
				res.Close()
				return fmt.Errorf("snapshot %s: NULL in a key column of %v", t.Name, keyNames(tab.key))
			}
			lastKey = make([]string, len(tab.keyAt))
			for i, at := range tab.keyAt {
				lastKey[i] = img.strs[at]
			}
		}
		if _, err := res.Close(); err != nil {
			return fmt.Errorf("snapshot %s: %w", t.Name, err) // c stays unsealed: nothing after it is recorded
		}
		final := len(tab.key) == 0 || n < int64(limit)
		prog.seal(c, n, lastKey, final)
		if final {
			return nil
		}
		rg.After = lastKey
	}
}

// snapshotSaver stores the acknowledged progress every second and logs it
// every SnapshotProgressInterval, until ctx ends.
func (r *Reader) snapshotSaver(ctx context.Context, st *readerState, prog *snapProgress, before snapTotals, start time.Time) {
	show := r.progressShower(fmt.Sprintf("shard %d snapshot", r.cfg.Shard), prog, before.rows, start)
	defer show(true)
	save := time.NewTicker(time.Second)
	defer save.Stop()
	report := time.NewTicker(r.cfg.SnapshotProgressInterval)
	defer report.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-save.C:
			show(false)
			cur, changed := prog.state()
			if !changed {
				continue
			}
			s := *st
			s.Snapshot = &cur
			// Not cancelled with ctx: once the saver returns, no save of
			// its own may still be on its way to Kafka (the final state
			// must be the last record).
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			err := r.state.save(sctx, s)
			cancel()
			if err != nil {
				r.log.Warn("saving snapshot progress failed", slog.Any("err", err))
			}
		case <-report.C:
			tot := prog.totals()
			elapsed := time.Since(start)
			rate := float64(tot.rows-before.rows) / elapsed.Seconds()
			attrs := []any{slog.Int64("rows", tot.rows), slog.Int64("rows_this_run", tot.rows-before.rows),
				slog.Float64("rows_per_s", float64(int64(rate*10))/10), slog.Int64("estimated_rows", tot.estimate),
				slog.Int64("chunks", tot.chunks), slog.String("tables_done", fmt.Sprintf("%d/%d", tot.tablesDone, tot.tables)),
				slog.String("ranges_done", fmt.Sprintf("%d/%d", tot.rangesDone, tot.ranges)), slog.Duration("elapsed", elapsed.Round(time.Second))}
			if left, ok := eta(tot.rows, tot.estimate, rate); ok {
				attrs = append(attrs, slog.Duration("eta", left.Round(time.Second)))
			}
			r.log.Info("snapshot progress", attrs...)
		}
	}
}

// pacer spaces chunks so that the copy reads at most rate rows/s (0: no
// limit), to spare a busy shard.
type pacer struct {
	mu   sync.Mutex
	rate float64
	next time.Time
}

func newPacer(rowsPerSecond int) *pacer {
	return &pacer{rate: float64(rowsPerSecond)}
}

// wait reserves n rows and sleeps until their turn.
func (p *pacer) wait(ctx context.Context, n int) error {
	if p.rate <= 0 {
		return nil
	}
	p.mu.Lock()
	now := time.Now()
	if p.next.Before(now) {
		p.next = now
	}
	at := p.next
	p.next = p.next.Add(time.Duration(float64(n) / p.rate * float64(time.Second)))
	p.mu.Unlock()
	if d := time.Until(at); d > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
		}
	}
	return nil
}

// appendSnapshotEnds appends to recs t's snapshot-end records of epoch at
// lsn, one per partition of its topic.
func (r *Reader) appendSnapshotEnds(recs []*kgo.Record, t tables.Table, lsn envelope.LSN, epoch uint16, now time.Time) ([]*kgo.Record, error) {
	n := r.parts[t.Topic]
	for p := int32(0); p < n; p++ {
		b, err := envelope.Encode(&envelope.Event{
			Kind: envelope.KindChange, Shard: r.cfg.Shard, Schema: t.Schema, Table: t.Name, Op: envelope.OpSnapshotEnd,
			CommitLSN: lsn, CommitTime: now, Partitions: n, Epoch: epoch,
		})
		if err != nil {
			return nil, err
		}
		recs = append(recs, &kgo.Record{Topic: t.Topic, Partition: p, Value: b})
	}
	return recs, nil
}

// endEpoch closes a copy taken again (epoch > 0): one snapshot-end record
// per partition of every table topic, acknowledged before the snapshot is
// recorded as done (a crash before that repeats it, harmlessly). Each
// partition's loader then deletes the rows of this shard it holds from
// earlier epochs that the copy did not contain again.
func (r *Reader) endEpoch(ctx context.Context, cp envelope.LSN) error {
	if r.epoch == 0 {
		return nil
	}
	var recs []*kgo.Record
	now := time.Now().UTC()
	for _, t := range r.cfg.Tables.Tables {
		var err error
		if recs, err = r.appendSnapshotEnds(recs, t, cp, r.epoch, now); err != nil {
			return err
		}
	}
	if err := r.producer.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("snapshot end records: %w", err)
	}
	r.log.Info("snapshot end sent: rows of earlier epochs the copy did not contain will be deleted",
		slog.Int("epoch", int(r.epoch)), slog.Int("records", len(recs)))
	return nil
}
