package reader

// Resnapshot: one table of the shard (or its rows matching a predicate)
// copied again while the shard keeps streaming, the slot untouched.
//
// The request arrives through the shard's own WAL: tributaryctl writes a
// transactional logical message (ResnapshotRequestPrefix) and the stream
// sees it like any change. The reader stores it in its state before it
// handles anything after it, so a request the slot has been confirmed
// past is never lost.
//
// The method is the incremental snapshot of DBLog and Debezium (chunks
// read by primary key while the log is read, bracketed by a position in
// the WAL, and copies superseded by any change to the same key after that
// position), with the position being an epoch switch instead of a pair of
// low/high watermarks around each chunk. Why: the loader orders a row's
// versions by the LSN of each change's own record, not by the order it
// receives them, and a transaction that changed a key before a low
// watermark but commits after its high watermark carries an LSN below
// both. A per-chunk window would then let a copied row, versioned at the
// window, beat a later-committed change. With the switch:
//
//   - the reader writes a non-transactional message S into the WAL; the
//     stream stamps every transaction that commits after S (all of which
//     it sends after S: pgoutput sends transactions at commit) with the
//     next epoch E, and everything before S kept the epoch before;
//   - the copy starts after the stream passed S and after every
//     transaction committed before S is visible (waitVisible); every chunk
//     then sees every change committed before S;
//   - copied rows carry version E<<48 | 0 (envelope.RowVersion): they beat
//     every row ClickHouse holds from before (epoch < E, the wrong ones
//     included), and lose to every change committed after S (E<<48 | LSN),
//     whatever its record's LSN. A row changed after S ends as the stream
//     says; a row not changed after S is copied as it is — the
//     deduplication is the loader's version rule, the "window" is
//     everything after S;
//   - unchanged TOAST values of a streamed update are taken from the newest
//     stored version, which is the copy or a streamed change: both carry
//     the column;
//   - once every chunk is acknowledged, a snapshot-end record per partition
//     (epoch E) makes the loader delete the table's rows of this shard
//     whose version is below E<<48: neither copied again nor changed since
//     S, so no longer at the source (deleted before or during the copy,
//     or rows ClickHouse should never have had). With a predicate there is
//     no such record: the loader cannot tell which of its rows the
//     predicate covers, so tributaryctl sweeps after the copy instead
//     (internal/admin, sweep.go, with the same version argument).
//
// Resumable: the plan and each range's last acknowledged key are stored
// in the reader state (saved every second), as for the initial snapshot;
// a restart continues the copy in the same epoch. Stamping epoch E on a
// transaction committed before S (a restart that replays from before S
// with E already stored) is harmless: such a change is older than every
// chunk's read, so the copy holds its value or a later change does.
//
// The residual gap waitVisible leaves: a transaction whose commit record
// precedes S but whose commit is not yet in pg_xact when the copy starts
// (the committing backend between writing its commit record and setting
// its status, while the stream already decoded past S) would be invisible
// to the first chunks. That window is the few instructions between
// XLogFlush and TransactionIdCommitTree in PostgreSQL's commit, against a
// round trip through the walsender and the reader.
//
// One resnapshot per shard at a time; a TRUNCATE of the table during its
// copy (or of one of its partitions, or a partition attached) starts it
// over in a new epoch: a chunk read before the truncate could reach
// ClickHouse after it, and live again there.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/tables"
)

// ResnapshotRequestPrefix is the prefix of the logical message that asks
// the shard's reader for a resnapshot; its content is a ResnapshotRequest
// as JSON. Write it transactionally: pg_logical_emit_message(true, ...).
const ResnapshotRequestPrefix = "tributary.resnapshot.request"

// resnapshotSwitchPrefix marks the epoch switch of a resnapshot (content:
// the request id); written by the reader, non-transactionally.
const resnapshotSwitchPrefix = "tributary.resnapshot.switch"

// Phases of a resnapshot.
const (
	// PhaseRequested: accepted and stored; the epoch switch is not yet
	// seen by the stream.
	PhaseRequested = "requested"
	// PhaseCopying: the stream switched epoch; chunks are being copied.
	PhaseCopying = "copying"
	// PhaseDone and PhaseFailed end it.
	PhaseDone   = "done"
	PhaseFailed = "failed"
)

// ResnapshotRequest is what tributaryctl asks for.
type ResnapshotRequest struct {
	// ID names the request: a request seen twice (a replay of the WAL) is
	// one resnapshot.
	ID    string `json:"id"`
	Table string `json:"table"`
	// Where is a PostgreSQL boolean expression over the table's columns
	// (empty: every row).
	Where     string    `json:"where,omitempty"`
	Requested time.Time `json:"requested"`
}

// Resnapshot is a resnapshot's stored state and progress.
type Resnapshot struct {
	ResnapshotRequest
	Phase string `json:"phase"`
	// Epoch is the epoch the copy is stamped with; SwitchAt the WAL
	// position of its switch message.
	Epoch    uint16       `json:"epoch,omitempty"`
	SwitchAt envelope.LSN `json:"switch_at,omitempty"`
	// Plan is the table's chunk plan and progress (nil until planned).
	Plan     *tableProgress `json:"plan,omitempty"`
	Started  time.Time      `json:"started,omitzero"`
	Finished time.Time      `json:"finished,omitzero"`
	Error    string         `json:"error,omitempty"`
	// Restarts counts starts over (a TRUNCATE during the copy).
	Restarts int `json:"restarts,omitempty"`
}

// Rows is how many rows the copy has produced and Kafka acknowledged.
func (r *Resnapshot) Rows() int64 {
	if r.Plan == nil {
		return 0
	}
	return tableRows(r.Plan)
}

// Estimate is the rows the copy expects (0: unknown).
func (r *Resnapshot) Estimate() int64 {
	if r.Plan == nil {
		return 0
	}
	return r.Plan.Estimate
}

func (r *Resnapshot) clone() *Resnapshot {
	c := *r
	if r.Plan != nil {
		p := copyState(snapshotState{Tables: []tableProgress{*r.Plan}}).Tables[0]
		c.Plan = &p
	}
	return &c
}

// resnapshots is the reader's resnapshot bookkeeping, shared by the stream
// goroutine (requests, the switch), the resnapshot goroutine (the copy)
// and every state save. Everything is under mu.
type resnapshots struct {
	mu     sync.Mutex
	active *Resnapshot // nil: none running
	last   *Resnapshot // the last one finished
	// cancel stops the running copy (a TRUNCATE of its table starts it
	// over); set by the resnapshot goroutine while it copies.
	cancel context.CancelFunc
	wake   chan struct{} // capacity 1: the resnapshot goroutine has work
}

func (rs *resnapshots) signal() {
	select {
	case rs.wake <- struct{}{}:
	default:
	}
}

// get returns a copy of the running resnapshot (nil: none).
func (rs *resnapshots) get() *Resnapshot {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.active == nil {
		return nil
	}
	return rs.active.clone()
}

// resnapshotRequested handles a request read from the WAL (stream
// goroutine). A bad or refused request is logged and counted, never an
// error of the stream: tributaryctl checks before it asks, and a request
// refused here stays refused on every replay.
func (r *Reader) resnapshotRequested(ctx context.Context, at envelope.LSN, content []byte) error {
	var req ResnapshotRequest
	if err := json.Unmarshal(content, &req); err != nil || req.ID == "" || req.Table == "" {
		r.m.resnapshots.WithLabelValues("refused").Inc()
		r.log.Warn("resnapshot request refused: not a valid request (want JSON with id and table)", slog.String("at", at.String()))
		return nil
	}
	attrs := []any{slog.String("id", req.ID), slog.String("table", req.Table), slog.String("where", req.Where), slog.String("at", at.String())}
	if _, ok := r.cfg.Tables.ByName(req.Table); !ok {
		r.m.resnapshots.WithLabelValues("refused").Inc()
		r.log.Warn("resnapshot request refused: this reader has no such table (check the table config)", attrs...)
		return nil
	}
	rs := &r.resnap
	rs.mu.Lock()
	switch {
	case rs.active != nil && rs.active.ID == req.ID, rs.last != nil && rs.last.ID == req.ID:
		rs.mu.Unlock()
		r.log.Info("resnapshot request seen again (the WAL replayed): nothing to do", attrs...)
		return nil
	case rs.active != nil:
		running := rs.active.Table
		rs.mu.Unlock()
		r.m.resnapshots.WithLabelValues("refused").Inc()
		r.log.Warn("resnapshot request refused: another resnapshot of this shard is running; ask again when it is done",
			append(attrs, slog.String("running_table", running))...)
		return nil
	}
	rs.active = &Resnapshot{ResnapshotRequest: req, Phase: PhaseRequested}
	rs.mu.Unlock()
	if err := r.storeState(ctx); err != nil {
		return fmt.Errorf("store resnapshot request: %w", err)
	}
	r.log.Info("resnapshot requested", attrs...)
	rs.signal()
	return nil
}

// resnapshotSwitch handles the epoch switch message (stream goroutine):
// every transaction after it is stamped with the next epoch. The new epoch
// is stored before anything after the switch is handled, so the slot is
// never confirmed past the switch with the old epoch stored.
func (r *Reader) resnapshotSwitch(ctx context.Context, at envelope.LSN, content []byte) error {
	rs := &r.resnap
	rs.mu.Lock()
	a := rs.active
	if a == nil || a.ID != string(content) || a.Phase != PhaseRequested {
		rs.mu.Unlock()
		return nil // an earlier switch of this one, replayed, or another's
	}
	if r.epoch == 1<<16-1 {
		a.Phase, a.Error, a.Finished = PhaseFailed, fmt.Sprintf("epoch %d is the last one: no epoch left to copy in", r.epoch), time.Now().UTC()
		rs.last, rs.active = a, nil
		rs.mu.Unlock()
		r.m.resnapshots.WithLabelValues("failed").Inc()
		return r.storeState(ctx)
	}
	a.Phase, a.Epoch, a.SwitchAt = PhaseCopying, r.epoch+1, at
	rs.mu.Unlock()
	r.epoch = a.Epoch
	r.saveMu.Lock()
	r.state.epoch = a.Epoch
	r.saveMu.Unlock()
	if err := r.storeState(ctx); err != nil {
		return fmt.Errorf("store resnapshot epoch switch: %w", err)
	}
	r.log.Info("resnapshot: epoch switched; changes committed from here on are of the new epoch",
		slog.String("id", a.ID), slog.String("table", a.Table), slog.Int("epoch", int(a.Epoch)), slog.String("at", at.String()))
	rs.signal()
	return nil
}

// resnapshotTruncated is called by the stream goroutine for a TRUNCATE of
// table: a copy of it in progress starts over in a new epoch.
func (r *Reader) resnapshotTruncated(table string) {
	rs := &r.resnap
	rs.mu.Lock()
	defer rs.mu.Unlock()
	a := rs.active
	if a == nil || a.Table != table || a.Phase != PhaseCopying {
		return
	}
	a.Phase, a.Plan, a.Epoch, a.SwitchAt = PhaseRequested, nil, 0, 0
	a.Restarts++
	if rs.cancel != nil {
		rs.cancel()
	}
	r.log.Warn("resnapshot: the table was truncated during its copy; starting the copy over in a new epoch",
		slog.String("id", a.ID), slog.String("table", table))
}

// runResnapshots is the resnapshot goroutine: it runs the requested
// resnapshot, one at a time, until ctx ends. A failed resnapshot is
// recorded in the state (tributaryctl shows it), logged and counted; it
// does not stop the reader, whose streaming is unaffected by it.
func (r *Reader) runResnapshots(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.resnap.wake:
		}
		a := r.resnap.get()
		if a == nil {
			continue
		}
		err := r.resnapshot(ctx, a.ID)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errResnapshotRestart) {
			r.resnap.signal()
			continue
		}
		if err != nil {
			r.finishResnapshot(ctx, PhaseFailed, err)
			r.log.Error("resnapshot failed; streaming goes on (see the runbook, \"One table on one shard is wrong\")",
				slog.String("id", a.ID), slog.String("table", a.Table), slog.Any("err", err))
		}
	}
}

// errResnapshotRestart: the copy was stopped to start over.
var errResnapshotRestart = errors.New("resnapshot starts over")

// finishResnapshot ends the running resnapshot with phase, stores it.
func (r *Reader) finishResnapshot(ctx context.Context, phase string, cause error) {
	rs := &r.resnap
	rs.mu.Lock()
	if a := rs.active; a != nil {
		a.Phase, a.Finished = phase, time.Now().UTC()
		if cause != nil {
			a.Error = cause.Error()
		}
		r.m.resnapshotActive.WithLabelValues(a.Table).Set(0)
		rs.last, rs.active = a, nil
	}
	rs.mu.Unlock()
	r.m.resnapshots.WithLabelValues(phase).Inc()
	if err := r.storeState(ctx); err != nil && ctx.Err() == nil {
		r.log.Warn("saving reader state failed", slog.Any("err", err))
	}
}

// resnapshot runs (or continues) resnapshot id.
func (r *Reader) resnapshot(ctx context.Context, id string) error {
	conn, err := pgx.Connect(ctx, r.cfg.DSN)
	if err != nil {
		return fmt.Errorf("resnapshot connection: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	a := r.resnap.get()
	if a == nil || a.ID != id {
		return nil
	}
	tp, ok := r.cfg.Tables.ByName(a.Table)
	if !ok {
		return fmt.Errorf("table %s is not configured", a.Table)
	}
	t := *tp
	r.m.resnapshotActive.WithLabelValues(a.Table).Set(1)
	if a.Phase == PhaseRequested {
		if a, err = r.switchEpoch(ctx, conn, a); err != nil {
			return err
		}
	}
	if a.Plan == nil {
		if err := waitVisible(ctx, conn, r.log); err != nil {
			return err
		}
		plan, err := resnapshotPlan(ctx, conn, t, a.Where, r.cfg.SnapshotRangesPerTable, r.cfg.SnapshotChunkRows)
		if err != nil {
			return err
		}
		r.resnap.mu.Lock()
		if r.resnap.active == nil || r.resnap.active.ID != id || r.resnap.active.Phase != PhaseCopying {
			r.resnap.mu.Unlock()
			return errResnapshotRestart
		}
		r.resnap.active.Plan, r.resnap.active.Started = &plan, time.Now().UTC()
		r.resnap.mu.Unlock()
		if err := r.storeState(ctx); err != nil {
			return err
		}
		a = r.resnap.get()
		r.log.Info("resnapshot copying", slog.String("id", id), slog.String("table", t.Name), slog.String("where", a.Where),
			slog.Int("epoch", int(a.Epoch)), slog.Int("ranges", len(plan.Ranges)), slog.Int64("estimated_rows", plan.Estimate))
	} else {
		r.m.snapshotResumes.Inc()
		r.log.Info("resnapshot: resuming the copy from its stored progress", slog.String("id", id), slog.String("table", t.Name),
			slog.Int("epoch", int(a.Epoch)), slog.Int64("rows", a.Rows()))
	}
	if err := r.copyResnapshot(ctx, conn, t, a); err != nil {
		return err
	}
	if a.Where == "" {
		if err := r.resnapshotEnd(ctx, t, a); err != nil {
			return err
		}
	}
	r.finishResnapshot(ctx, PhaseDone, nil)
	done := r.resnap.last
	r.log.Info("resnapshot complete", slog.String("id", id), slog.String("table", t.Name), slog.Int64("rows", done.Rows()),
		slog.Int("epoch", int(a.Epoch)), slog.Duration("took", time.Since(a.Started).Round(time.Millisecond)))
	return nil
}

// switchEpoch records the next epoch on the publication, writes the switch
// message and waits until the stream passed it. Written again after a
// restart, the stream switches at whichever comes first.
func (r *Reader) switchEpoch(ctx context.Context, conn *pgx.Conn, a *Resnapshot) (*Resnapshot, error) {
	r.saveMu.Lock()
	next := r.state.epoch + 1
	r.saveMu.Unlock()
	mark, err := readEpochMark(ctx, conn, r.cfg.Publication)
	if err != nil {
		return nil, err
	}
	if next == 0 {
		return nil, errors.New("no epoch left to copy in")
	}
	recordEpoch(ctx, conn, r.cfg.Publication, next, mark, r.log)
	var at string
	if err := conn.QueryRow(ctx, "SELECT pg_logical_emit_message(false, $1, $2)::text", resnapshotSwitchPrefix, a.ID).Scan(&at); err != nil {
		return nil, fmt.Errorf("write the resnapshot's epoch switch: %w", err)
	}
	r.log.Info("resnapshot: epoch switch written; waiting for the stream to reach it", slog.String("id", a.ID), slog.String("at", at))
	for {
		cur := r.resnap.get()
		if cur == nil || cur.ID != a.ID {
			return nil, errResnapshotRestart
		}
		if cur.Phase == PhaseCopying {
			return cur, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitVisible waits until every transaction that had committed (pg_xact)
// but was still shown as running when it was called is visible: with the
// stream past the switch, that covers the transactions committed before it
// (see the top of this file). Synchronous replication can delay them.
func waitVisible(ctx context.Context, conn *pgx.Conn, log *slog.Logger) error {
	var pending []string
	err := conn.QueryRow(ctx, `SELECT COALESCE(array_agg(x::text), '{}') FROM pg_snapshot_xip(pg_current_snapshot()) x
		WHERE pg_xact_status(x) = 'committed'`).Scan(&pending)
	if err != nil {
		return fmt.Errorf("resnapshot: transactions committed before the switch: %w", err)
	}
	start := time.Now()
	nextLog := start.Add(10 * time.Second)
	for len(pending) > 0 {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*)::int FROM pg_snapshot_xip(pg_current_snapshot()) x WHERE x::text = ANY($1)`, pending).Scan(&n)
		if err != nil {
			return fmt.Errorf("resnapshot: transactions committed before the switch: %w", err)
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(nextLog) {
			log.Warn("resnapshot waits for transactions that committed before its switch but are not visible yet (synchronous replication?)",
				slog.Any("xids", pending), slog.Duration("waited", time.Since(start)))
			nextLog = time.Now().Add(10 * time.Second)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// resnapshotPlan plans the copy of t's rows matching where. The estimate
// is PostgreSQL's for the predicate when there is one.
func resnapshotPlan(ctx context.Context, conn *pgx.Conn, t tables.Table, where string, maxRanges, chunkRows int) (tableProgress, error) {
	key, err := tableKey(ctx, conn, t)
	if err != nil {
		return tableProgress{}, err
	}
	if len(key) == 0 {
		return tableProgress{}, fmt.Errorf("table %s has no primary key or replica identity index: a resnapshot pages by key (copy a keyless table again with a new slot, docs/runbook.md)", t.Name)
	}
	tp, err := planTable(ctx, conn, t, key, maxRanges, chunkRows)
	if err != nil {
		return tp, err
	}
	if where != "" {
		var plan []struct {
			Plan struct {
				Rows float64 `json:"Plan Rows"`
			} `json:"Plan"`
		}
		var out []byte
		q := "EXPLAIN (FORMAT JSON) SELECT 1 FROM " + pgx.Identifier{t.Schema, t.Name}.Sanitize() + " WHERE (" + where + ")"
		if err := conn.QueryRow(ctx, q, pgx.QueryExecModeExec).Scan(&out); err != nil {
			return tp, fmt.Errorf("resnapshot of %s: the predicate %q: %w", t.Name, where, err)
		}
		if json.Unmarshal(out, &plan) == nil && len(plan) == 1 {
			tp.Estimate = int64(plan[0].Plan.Rows)
		}
	}
	return tp, nil
}

// copyResnapshot copies the ranges of a's plan not yet done, storing the
// acknowledged progress every second, until every chunk is acknowledged.
func (r *Reader) copyResnapshot(ctx context.Context, conn *pgx.Conn, t tables.Table, a *Resnapshot) error {
	tab, err := r.resnapshotTable(ctx, conn, t, a)
	if err != nil {
		return err
	}
	copyCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if !r.registerResnapshotCancel(a, cancel) {
		return errResnapshotRestart
	}
	defer func() {
		r.resnap.mu.Lock()
		r.resnap.cancel = nil
		r.resnap.mu.Unlock()
	}()

	r.m.snapshotEstimated.WithLabelValues(t.Name).Set(float64(a.Plan.Estimate))
	r.m.snapshotProgress.WithLabelValues(t.Name).Set(progressRatio(a.Plan)) // the copy's, not the last one's
	prog := newSnapProgress(snapshotState{Tables: []tableProgress{*a.Plan}}, func(_ int, rows int64, tp *tableProgress) {
		r.m.snapshotRows.WithLabelValues(t.Name).Add(float64(rows))
		r.m.snapshotChunks.WithLabelValues(t.Name).Inc()
		r.m.snapshotProgress.WithLabelValues(t.Name).Set(progressRatio(tp))
	})
	saverCtx, stopSaver := context.WithCancel(ctx)
	saved := make(chan struct{})
	go func() {
		defer close(saved)
		r.resnapshotSaver(saverCtx, a, prog)
	}()
	err = r.copyResnapshotRanges(copyCtx, ctx, &tab, a, prog)
	if err == nil {
		err = waitAcked(ctx, prog)
	}
	stopSaver()
	<-saved
	r.saveResnapshotProgress(ctx, a.ID, prog) // what was acknowledged, also after a failure
	if err != nil && copyCtx.Err() != nil && ctx.Err() == nil {
		return errResnapshotRestart // cancelled by resnapshotTruncated
	}
	return err
}

// resnapshotTable is t as resnapshot a copies it: in a's epoch, and
// restricted to a's predicate (beside the table's own row filter).
func (r *Reader) resnapshotTable(ctx context.Context, conn *pgx.Conn, t tables.Table, a *Resnapshot) (snapTable, error) {
	tab, err := r.snapTable(ctx, conn, t)
	if err != nil {
		return tab, err
	}
	tab.epoch = a.Epoch
	if a.Where != "" {
		w := "(" + a.Where + ")"
		if tab.sel.filter != "" {
			w = tab.sel.filter + " AND " + w
		}
		tab.sel.filter = w
	}
	return tab, nil
}

// registerResnapshotCancel makes cancel the way to stop a's copy (a
// truncate of the table restarts it), if a is still the running
// resnapshot and copying; false if it is not.
func (r *Reader) registerResnapshotCancel(a *Resnapshot, cancel context.CancelFunc) bool {
	r.resnap.mu.Lock()
	defer r.resnap.mu.Unlock()
	if r.resnap.active == nil || r.resnap.active.ID != a.ID || r.resnap.active.Phase != PhaseCopying {
		return false
	}
	r.resnap.cancel = cancel
	return true
}

// copyResnapshotRanges copies the ranges of a's plan not yet done, with
// up to SnapshotWorkers connections, each read-only: the predicate came
// from the WAL, and whatever it calls, the copy writes nothing.
// Cancelling copyCtx stops the copy; ctx is the reader's, for
// acknowledgements.
func (r *Reader) copyResnapshotRanges(copyCtx, ctx context.Context, tab *snapTable, a *Resnapshot, prog *snapProgress) error {
	var queue []int
	for ri, rg := range a.Plan.Ranges {
		if !rg.Done {
			queue = append(queue, ri)
		}
	}
	var mu sync.Mutex
	take := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if len(queue) == 0 {
			return 0, false
		}
		ri := queue[0]
		queue = queue[1:]
		return ri, true
	}
	pace := newPacer(r.cfg.SnapshotMaxRowsPerSecond)
	g, gctx := errgroup.WithContext(copyCtx)
	for w := 0; w < min(r.cfg.SnapshotWorkers, len(queue)); w++ {
		g.Go(func() error {
			wc, err := pgx.Connect(gctx, r.cfg.DSN)
			if err != nil {
				return fmt.Errorf("resnapshot connection: %w", err)
			}
			defer wc.Close(context.WithoutCancel(gctx))
			if _, err := wc.Exec(gctx, "SET default_transaction_read_only = on"); err != nil {
				return fmt.Errorf("resnapshot connection: %w", err)
			}
			var enc envelope.Encoder
			for {
				ri, ok := take()
				if !ok {
					return nil
				}
				if err := r.copyRange(gctx, ctx, wc, &enc, pace, prog, tab, 0, ri, a.Plan.Ranges[ri], a.SwitchAt); err != nil {
					return err
				}
			}
		})
	}
	return g.Wait()
}

// waitAcked waits until Kafka acknowledged every chunk of prog (the
// producer also carries the stream's records, so Flush could wait for
// ever on a busy shard).
func waitAcked(ctx context.Context, prog *snapProgress) error {
	for {
		if err := prog.failure(); err != nil {
			return fmt.Errorf("resnapshot produce: %w", err)
		}
		if tot := prog.totals(); tot.rangesDone == tot.ranges {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// resnapshotSaver stores the acknowledged progress every second and logs
// it (rows, rate, estimate, ETA) every SnapshotProgressInterval.
func (r *Reader) resnapshotSaver(ctx context.Context, a *Resnapshot, prog *snapProgress) {
	save := time.NewTicker(time.Second)
	defer save.Stop()
	report := time.NewTicker(r.cfg.SnapshotProgressInterval)
	defer report.Stop()
	start, before := time.Now(), a.Rows()
	show := r.progressShower(fmt.Sprintf("shard %d resnapshot %s", r.cfg.Shard, a.Table), prog, before, start)
	defer show(true)
	for {
		select {
		case <-ctx.Done():
			return
		case <-save.C:
			show(false)
			r.saveResnapshotProgress(ctx, a.ID, prog)
		case <-report.C:
			tot := prog.totals()
			rate := float64(tot.rows-before) / time.Since(start).Seconds()
			attrs := []any{slog.String("id", a.ID), slog.String("table", a.Table), slog.Int64("rows", tot.rows),
				slog.Float64("rows_per_s", float64(int64(rate*10))/10), slog.Int64("estimated_rows", tot.estimate),
				slog.String("ranges_done", fmt.Sprintf("%d/%d", tot.rangesDone, tot.ranges))}
			if left, ok := eta(tot.rows, tot.estimate, rate); ok {
				attrs = append(attrs, slog.Duration("eta", left.Round(time.Second)))
			}
			r.log.Info("resnapshot progress", attrs...)
		}
	}
}

// saveResnapshotProgress stores prog's acknowledged progress as the
// running resnapshot's plan, if it moved.
func (r *Reader) saveResnapshotProgress(ctx context.Context, id string, prog *snapProgress) {
	cur, changed := prog.state()
	if !changed {
		return
	}
	r.resnap.mu.Lock()
	if a := r.resnap.active; a != nil && a.ID == id && a.Phase == PhaseCopying {
		a.Plan = &cur.Tables[0]
	}
	r.resnap.mu.Unlock()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := r.storeState(sctx); err != nil {
		r.log.Warn("saving resnapshot progress failed", slog.Any("err", err))
	}
}

// resnapshotEnd sends the table's snapshot-end records of a's epoch, one
// per partition, and waits for Kafka: each partition's loader then deletes
// the rows of this shard and table below the epoch (see the top of this
// file). A crash before the resnapshot is stored as done sends them again,
// harmlessly.
func (r *Reader) resnapshotEnd(ctx context.Context, t tables.Table, a *Resnapshot) error {
	n := r.parts[t.Topic]
	recs := make([]*kgo.Record, 0, n)
	now := time.Now().UTC()
	for p := int32(0); p < n; p++ {
		b, err := envelope.Encode(&envelope.Event{
			Kind: envelope.KindChange, Shard: r.cfg.Shard, Schema: t.Schema, Table: t.Name, Op: envelope.OpSnapshotEnd,
			CommitLSN: a.SwitchAt, CommitTime: now, Partitions: n, Epoch: a.Epoch,
		})
		if err != nil {
			return err
		}
		recs = append(recs, &kgo.Record{Topic: t.Topic, Partition: p, Value: b})
	}
	if err := r.producer.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("resnapshot end records: %w", err)
	}
	r.log.Info("resnapshot end sent: rows of the table the copy did not contain will be deleted",
		slog.String("table", t.Name), slog.Int("epoch", int(a.Epoch)), slog.Int("records", len(recs)))
	return nil
}

// storeState saves the reader state now: the position last reported to
// the server and the resnapshots. Saves are serialised and each takes the
// newest values, so the last record in the topic is the newest state.
func (r *Reader) storeState(ctx context.Context) error {
	r.saveMu.Lock()
	defer r.saveMu.Unlock()
	st := readerState{Slot: r.cfg.Slot, Shard: r.cfg.Shard, SnapshotDone: true, Confirmed: envelope.LSN(r.reported.Load()),
		ConsistentPoint: r.snapCP, SnapshotEnd: r.snapEnd}
	r.resnap.mu.Lock()
	if r.resnap.active != nil {
		st.Resnapshot = r.resnap.active.clone()
	}
	if r.resnap.last != nil {
		st.LastResnapshot = r.resnap.last.clone()
	}
	r.resnap.mu.Unlock()
	return r.state.save(ctx, st)
}

// ResnapshotStatus is what the state topic says about a reader's
// resnapshots.
type ResnapshotStatus struct {
	// Found: the reader has stored state (it ran at least once).
	Found bool
	// Epoch is the reader's current snapshot epoch.
	Epoch     uint16
	UpdatedAt time.Time
	// Active is the running resnapshot (nil: none); Last the last finished.
	Active, Last *Resnapshot
}

// ReadResnapshotStatus reads the reader state of the slot of the shard
// with PostgreSQL system identifier systemID and database from topic.
// opts are the Kafka client's security options (internal/kafkaconn).
func ReadResnapshotStatus(ctx context.Context, cl *kgo.Client, brokers []string, opts []kgo.Opt, topic, systemID, database, slot string) (ResnapshotStatus, error) {
	s := &stateStore{cl: cl, topic: topic, id: shardIdentity{SystemID: systemID, Database: database, Slot: slot}}
	st, err := s.load(ctx, brokers, opts)
	if err != nil {
		return ResnapshotStatus{}, err
	}
	if st.own == nil {
		return ResnapshotStatus{}, nil
	}
	return ResnapshotStatus{Found: true, Epoch: st.own.Epoch, UpdatedAt: st.own.UpdatedAt,
		Active: st.own.Resnapshot, Last: st.own.LastResnapshot}, nil
}
