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
//     predicate covers, so the reader sweeps after the copy instead
//     (sweep.go, with the same version argument), as the resnapshot's
//     last phase: stored before it starts, so a restart sweeps again.
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
// Several at once: resnapshots of different tables of the shard run at
// the same time, one per table. Each switches to an epoch of its own, one
// switch at a time (each waits for the stream to pass its switch before
// the next is written), so epochs only grow: a resnapshot A in epoch E1
// while B switched to E2 > E1 still holds, for A's table, that its copy
// (E1<<48 | 0) loses to every change committed after A's switch (E1<<48 |
// LSN before B's, E2<<48 | LSN after), and A's snapshot end or sweep
// deletes only A's table's rows below E1<<48. A second resnapshot of a
// table whose resnapshot runs is refused: two copies of one table would
// need two epochs for one set of rows.
//
// A TRUNCATE of the table during its copy (or of one of its partitions,
// or a partition attached) starts it over in a new epoch: a chunk read
// before the truncate could reach ClickHouse after it, and live again
// there.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

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
	// PhaseSweeping: copied (with a predicate); the sweep deletes the
	// rows the shard no longer has (sweep.go). The resnapshot is not done
	// until it finished.
	PhaseSweeping = "sweeping"
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
	// Sweep is the sweep's progress (a resnapshot with a predicate, from
	// PhaseSweeping on).
	Sweep *SweepProgress `json:"sweep,omitempty"`
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
	if r.Sweep != nil {
		sw := *r.Sweep
		c.Sweep = &sw
	}
	if r.Plan != nil {
		p := copyState(snapshotState{Tables: []tableProgress{*r.Plan}}).Tables[0]
		c.Plan = &p
	}
	return &c
}

// resnapshots is the reader's resnapshot bookkeeping, shared by the stream
// goroutine (requests, the switches), the resnapshots' goroutines (the
// copies and sweeps) and every state save. Everything is under mu, but
// switching.
type resnapshots struct {
	mu sync.Mutex
	// active are the running resnapshots, at most one per table, in
	// request order; ended the last finished one of each table, oldest
	// first.
	active, ended []*Resnapshot
	// cancel stops a running copy, by id (a TRUNCATE of its table starts
	// it over); set by the resnapshot's goroutine while it copies.
	cancel map[string]context.CancelFunc
	// started are the ids whose goroutine runs (runResnapshots).
	started map[string]bool
	wake    chan struct{} // capacity 1: runResnapshots has work
	// switching serialises the epoch switches: one resnapshot at a time
	// writes its switch and waits for the stream to pass it, so that each
	// gets an epoch of its own.
	switching sync.Mutex
}

func (rs *resnapshots) signal() {
	select {
	case rs.wake <- struct{}{}:
	default:
	}
}

// find is the running resnapshot id (nil: none); call with mu held.
func (rs *resnapshots) find(id string) *Resnapshot {
	for _, a := range rs.active {
		if a.ID == id {
			return a
		}
	}
	return nil
}

// ofTable is the running resnapshot of table (nil: none); call with mu held.
func (rs *resnapshots) ofTable(table string) *Resnapshot {
	for _, a := range rs.active {
		if a.Table == table {
			return a
		}
	}
	return nil
}

// hasEnded: resnapshot id is the last ended of its table; call with mu held.
func (rs *resnapshots) hasEnded(id string) bool {
	for _, a := range rs.ended {
		if a.ID == id {
			return true
		}
	}
	return false
}

// end moves a from the running to the ended ones, in place of the last
// ended of its table; call with mu held.
func (rs *resnapshots) end(a *Resnapshot) {
	rs.active = slices.DeleteFunc(rs.active, func(x *Resnapshot) bool { return x.ID == a.ID })
	rs.ended = append(slices.DeleteFunc(rs.ended, func(x *Resnapshot) bool { return x.Table == a.Table }), a)
}

// get returns a copy of running resnapshot id (nil: not running).
func (rs *resnapshots) get(id string) *Resnapshot {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if a := rs.find(id); a != nil {
		return a.clone()
	}
	return nil
}

// lastEnded returns a copy of the last ended resnapshot of table.
func (rs *resnapshots) lastEnded(table string) *Resnapshot {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for _, a := range rs.ended {
		if a.Table == table {
			return a.clone()
		}
	}
	return nil
}

// toStart marks the running resnapshots without a goroutine as started
// and returns their ids.
func (rs *resnapshots) toStart() []string {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var ids []string
	for _, a := range rs.active {
		if !rs.started[a.ID] {
			rs.started[a.ID] = true
			ids = append(ids, a.ID)
		}
	}
	return ids
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
	case rs.find(req.ID) != nil, rs.hasEnded(req.ID):
		rs.mu.Unlock()
		r.log.Info("resnapshot request seen again (the WAL replayed): nothing to do", attrs...)
		return nil
	case rs.ofTable(req.Table) != nil:
		running := rs.ofTable(req.Table).ID
		rs.mu.Unlock()
		r.m.resnapshots.WithLabelValues("refused").Inc()
		r.log.Warn("resnapshot request refused: a resnapshot of this table is running on this shard; ask again when it is done",
			append(attrs, slog.String("running", running))...)
		return nil
	case req.Where != "" && r.cfg.SweepStore == nil:
		// Recorded as failed, so that tributaryctl says why at once.
		a := &Resnapshot{ResnapshotRequest: req, Phase: PhaseFailed, Finished: time.Now().UTC(),
			Error: "refused: this reader has no ClickHouse to sweep with (cdc-reader --clickhouse-addr): a resnapshot with --where ends with a sweep that reads the loaders' database; configure it, or resnapshot every row"}
		rs.end(a)
		rs.mu.Unlock()
		r.m.resnapshots.WithLabelValues("refused").Inc()
		r.log.Warn("resnapshot request refused: a predicate needs a sweep, and this reader has no ClickHouse to sweep with (--clickhouse-addr)", attrs...)
		return r.storeState(ctx)
	}
	rs.active = append(rs.active, &Resnapshot{ResnapshotRequest: req, Phase: PhaseRequested})
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
	a := rs.find(string(content))
	if a == nil || a.Phase != PhaseRequested {
		rs.mu.Unlock()
		return nil // an earlier switch of this one, replayed, or an ended one's
	}
	if r.epoch == 1<<16-1 {
		a.Phase, a.Error, a.Finished = PhaseFailed, fmt.Sprintf("epoch %d is the last one: no epoch left to copy in", r.epoch), time.Now().UTC()
		rs.end(a)
		rs.mu.Unlock()
		r.m.resnapshots.WithLabelValues("failed").Inc()
		return r.storeState(ctx)
	}
	epoch := r.epoch + 1
	rs.mu.Unlock()
	// The epoch first, the phase after: switchEpoch lets the next
	// resnapshot switch once it sees the phase, and that one must read
	// this epoch to take the one after.
	r.epoch = epoch
	r.saveMu.Lock()
	r.state.epoch = epoch
	r.saveMu.Unlock()
	rs.mu.Lock()
	a.Phase, a.Epoch, a.SwitchAt = PhaseCopying, epoch, at
	rs.mu.Unlock()
	if err := r.storeState(ctx); err != nil {
		return fmt.Errorf("store resnapshot epoch switch: %w", err)
	}
	r.log.Info("resnapshot: epoch switched; changes committed from here on are of the new epoch",
		slog.String("id", a.ID), slog.String("table", a.Table), slog.Int("epoch", int(a.Epoch)), slog.String("at", at.String()))
	return nil
}

// resnapshotTruncated is called by the stream goroutine for a TRUNCATE of
// table: a copy of it in progress starts over in a new epoch.
func (r *Reader) resnapshotTruncated(table string) {
	rs := &r.resnap
	rs.mu.Lock()
	defer rs.mu.Unlock()
	a := rs.ofTable(table)
	if a == nil || a.Phase != PhaseCopying {
		return
	}
	a.Phase, a.Plan, a.Epoch, a.SwitchAt = PhaseRequested, nil, 0, 0
	a.Restarts++
	if cancel := rs.cancel[a.ID]; cancel != nil {
		cancel()
	}
	r.log.Warn("resnapshot: the table was truncated during its copy; starting the copy over in a new epoch",
		slog.String("id", a.ID), slog.String("table", table))
}

// runResnapshots is the resnapshots' supervisor: it runs each requested
// resnapshot in a goroutine of its own until it ends or ctx does, and
// waits for them. A failed resnapshot is recorded in the state
// (tributaryctl shows it), logged and counted; it does not stop the
// reader, whose streaming is unaffected by it.
func (r *Reader) runResnapshots(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.resnap.wake:
		}
		for _, id := range r.resnap.toStart() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.runResnapshot(ctx, id)
			}()
		}
	}
}

// runResnapshot runs resnapshot id until it ends (or ctx does), starting
// its copy over when a truncate asks for it.
func (r *Reader) runResnapshot(ctx context.Context, id string) {
	defer func() {
		r.resnap.mu.Lock()
		delete(r.resnap.started, id)
		r.resnap.mu.Unlock()
	}()
	for {
		err := r.resnapshot(ctx, id)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, errResnapshotRestart):
			continue
		case err != nil:
			a := r.resnap.get(id)
			r.finishResnapshot(ctx, id, PhaseFailed, err)
			if a != nil {
				r.log.Error("resnapshot failed; streaming goes on (see the runbook, \"One table on one shard is wrong\")",
					slog.String("id", id), slog.String("table", a.Table), slog.Any("err", err))
			}
		}
		return
	}
}

// errResnapshotRestart: the copy was stopped to start over.
var errResnapshotRestart = errors.New("resnapshot starts over")

// finishResnapshot ends running resnapshot id with phase, stores it.
func (r *Reader) finishResnapshot(ctx context.Context, id, phase string, cause error) {
	rs := &r.resnap
	rs.mu.Lock()
	if a := rs.find(id); a != nil {
		a.Phase, a.Finished = phase, time.Now().UTC()
		if cause != nil {
			a.Error = cause.Error()
		}
		r.m.resnapshotActive.WithLabelValues(a.Table).Set(0)
		r.m.resnapshotSweepPending.WithLabelValues(a.Table).Set(0)
		rs.end(a)
	}
	rs.mu.Unlock()
	r.m.resnapshots.WithLabelValues(phase).Inc()
	if err := r.storeState(ctx); err != nil && ctx.Err() == nil {
		r.log.Warn("saving reader state failed", slog.Any("err", err))
	}
}

// resnapshot runs (or continues) resnapshot id: the switch, the copy, and
// the snapshot end or (with a predicate) the sweep.
func (r *Reader) resnapshot(ctx context.Context, id string) error {
	conn, err := pgx.Connect(ctx, r.cfg.DSN)
	if err != nil {
		return fmt.Errorf("resnapshot connection: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	a := r.resnap.get(id)
	if a == nil {
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
	if a.Phase == PhaseCopying {
		if err := r.copyPhase(ctx, conn, t, a); err != nil {
			return err
		}
	}
	if a.Where != "" {
		if err := r.sweepPhase(ctx, t, id); err != nil {
			return err
		}
	}
	r.finishResnapshot(ctx, id, PhaseDone, nil)
	done := r.resnap.lastEnded(t.Name)
	r.log.Info("resnapshot complete", slog.String("id", id), slog.String("table", t.Name), slog.Int64("rows", done.Rows()),
		slog.Int("epoch", int(done.Epoch)), slog.Duration("took", done.Finished.Sub(done.Started).Round(time.Millisecond)))
	return nil
}

// copyPhase plans a's copy (or resumes it from its stored progress),
// copies it and, without a predicate, sends its snapshot end.
func (r *Reader) copyPhase(ctx context.Context, conn *pgx.Conn, t tables.Table, a *Resnapshot) error {
	id := a.ID
	if a.Plan == nil {
		if err := waitVisible(ctx, conn, r.log); err != nil {
			return err
		}
		plan, err := resnapshotPlan(ctx, conn, t, a.Where, r.cfg.SnapshotRangesPerTable, r.cfg.SnapshotChunkRows)
		if err != nil {
			return err
		}
		r.resnap.mu.Lock()
		cur := r.resnap.find(id)
		if cur == nil || cur.Phase != PhaseCopying {
			r.resnap.mu.Unlock()
			return errResnapshotRestart
		}
		cur.Plan, cur.Started = &plan, time.Now().UTC()
		r.resnap.mu.Unlock()
		if err := r.storeState(ctx); err != nil {
			return err
		}
		if a = r.resnap.get(id); a == nil {
			return errResnapshotRestart
		}
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
		return r.resnapshotEnd(ctx, t, a)
	}
	// The sweep is stored as due before it starts: from here on a
	// restart sweeps, whoever asked and whether or not they still wait.
	r.resnap.mu.Lock()
	if cur := r.resnap.find(id); cur != nil && cur.Phase == PhaseCopying {
		cur.Phase, cur.Sweep = PhaseSweeping, &SweepProgress{}
	}
	r.resnap.mu.Unlock()
	return r.storeState(ctx)
}

// sweepRetry bounds the wait between two sweep attempts.
const sweepRetry = 30 * time.Second

// sweepPhase runs resnapshot id's sweep until one attempt finishes,
// storing its progress; a failed attempt (ClickHouse or the shard
// unreachable, a paused table's wait cut short) is logged, stored and
// retried after a backoff, since the resnapshot is exact only once swept.
func (r *Reader) sweepPhase(ctx context.Context, t tables.Table, id string) error {
	if r.cfg.SweepStore == nil {
		return errors.New("this reader has no ClickHouse to sweep with (cdc-reader --clickhouse-addr), and the resnapshot's predicate needs its sweep: start it with one and resnapshot again")
	}
	r.m.resnapshotSweepPending.WithLabelValues(t.Name).Set(1)
	wait := time.Second
	for {
		err := r.sweepOnce(ctx, t, id)
		if err == nil || ctx.Err() != nil || errors.Is(err, errResnapshotRestart) {
			return err
		}
		r.updateSweep(ctx, id, func(p *SweepProgress) { p.Error = err.Error() })
		r.log.Warn("resnapshot sweep failed; trying again", slog.String("id", id), slog.String("table", t.Name),
			slog.Duration("in", wait), slog.Any("err", err))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, sweepRetry)
	}
}

// sweepOnce is one attempt at resnapshot id's sweep, on connections of
// its own.
func (r *Reader) sweepOnce(ctx context.Context, t tables.Table, id string) error {
	a := r.resnap.get(id)
	if a == nil || a.Phase != PhaseSweeping {
		return errResnapshotRestart
	}
	store, err := r.cfg.SweepStore(ctx)
	if err != nil {
		return fmt.Errorf("open ClickHouse for the sweep: %w", err)
	}
	defer store.Close()
	conn, err := pgx.Connect(ctx, r.cfg.DSN)
	if err != nil {
		return fmt.Errorf("sweep connection: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	attempt := 1
	if a.Sweep != nil {
		attempt = a.Sweep.Attempts + 1
	}
	r.updateSweep(ctx, id, func(p *SweepProgress) { *p = SweepProgress{Attempts: attempt} })
	r.log.Info("resnapshot sweeping: deleting the rows the shard no longer has", slog.String("id", id), slog.String("table", t.Name),
		slog.Int("epoch", int(a.Epoch)), slog.Int("attempt", attempt))
	sw := Sweep{Table: t, Shard: r.cfg.Shard, Epoch: a.Epoch, SwitchAt: a.SwitchAt, Partitions: r.parts[t.Topic], Batch: r.cfg.SweepBatch}
	last, waiting := time.Now(), false
	res, err := sw.Run(ctx, store, conn, r.producer, func(p SweepProgress) {
		if time.Since(last) >= time.Second || p.Waiting != waiting {
			last, waiting = time.Now(), p.Waiting
			r.updateSweep(ctx, id, func(sp *SweepProgress) { sp.Checked, sp.Deleted, sp.Waiting = p.Checked, p.Deleted, p.Waiting })
		}
	})
	if err != nil {
		return err
	}
	r.resnap.mu.Lock()
	if cur := r.resnap.find(id); cur != nil {
		cur.Sweep = &SweepProgress{Checked: res.Checked, Deleted: res.Deleted, Attempts: attempt}
	}
	r.resnap.mu.Unlock()
	r.log.Info("resnapshot sweep done: rows the shard no longer has are deleted", slog.String("id", id),
		slog.String("table", t.Name), slog.Int("epoch", int(a.Epoch)), slog.Int64("checked", res.Checked), slog.Int64("deleted", res.Deleted))
	return nil
}

// updateSweep changes resnapshot id's sweep progress with f and stores it.
func (r *Reader) updateSweep(ctx context.Context, id string, f func(*SweepProgress)) {
	r.resnap.mu.Lock()
	cur := r.resnap.find(id)
	if cur != nil {
		if cur.Sweep == nil {
			cur.Sweep = &SweepProgress{}
		}
		f(cur.Sweep)
	}
	r.resnap.mu.Unlock()
	if cur == nil {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := r.storeState(sctx); err != nil {
		r.log.Warn("saving resnapshot sweep progress failed", slog.Any("err", err))
	}
}

// switchEpoch records the next epoch on the publication, writes the switch
// message and waits until the stream passed it, one resnapshot at a time.
// Written again after a restart, the stream switches at whichever comes
// first.
func (r *Reader) switchEpoch(ctx context.Context, conn *pgx.Conn, a *Resnapshot) (*Resnapshot, error) {
	r.resnap.switching.Lock()
	defer r.resnap.switching.Unlock()
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
		cur := r.resnap.get(a.ID)
		if cur == nil {
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
	if len(pending) == 0 {
		return nil
	}
	return waitXids(ctx, log, "resnapshot waits for transactions that committed before its switch but are not visible yet (synchronous replication?)",
		func(ctx context.Context) ([]string, error) {
			var left []string
			err := conn.QueryRow(ctx, `SELECT COALESCE(array_agg(x::text), '{}') FROM pg_snapshot_xip(pg_current_snapshot()) x
				WHERE x::text = ANY($1)`, pending).Scan(&left)
			if err != nil {
				return nil, fmt.Errorf("resnapshot: transactions committed before the switch: %w", err)
			}
			return left, nil
		})
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
		delete(r.resnap.cancel, a.ID)
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
	if cur := r.resnap.find(a.ID); cur == nil || cur.Phase != PhaseCopying {
		return false
	}
	r.resnap.cancel[a.ID] = cancel
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
	return copyQueue(copyCtx, r, queue, "resnapshot", "SET default_transaction_read_only = on",
		func(gctx context.Context, wc *pgx.Conn, enc *envelope.Encoder, pace *pacer, ri int) error {
			return r.copyRange(gctx, ctx, wc, enc, pace, prog, tab, 0, ri, a.Plan.Ranges[ri], a.SwitchAt)
		})
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
	if a := r.resnap.find(id); a != nil && a.Phase == PhaseCopying {
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
	recs, err := r.appendSnapshotEnds(nil, t, a.SwitchAt, a.Epoch, time.Now().UTC())
	if err != nil {
		return err
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
	st.Sweeps = r.cfg.SweepStore != nil
	r.resnap.mu.Lock()
	for _, a := range r.resnap.active {
		st.Resnapshots = append(st.Resnapshots, a.clone())
	}
	for _, a := range r.resnap.ended {
		st.EndedResnapshots = append(st.EndedResnapshots, a.clone())
	}
	r.resnap.mu.Unlock()
	// The fields of readers that ran one at a time, for their tools.
	if n := len(st.Resnapshots); n > 0 {
		st.Resnapshot = st.Resnapshots[n-1]
	}
	if n := len(st.EndedResnapshots); n > 0 {
		st.LastResnapshot = st.EndedResnapshots[n-1]
	}
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
	// Running are the running resnapshots (one per table at most), in
	// request order; Ended the last finished of each table, oldest first.
	Running, Ended []*Resnapshot
	// Active is the newest running resnapshot (nil: none); Last the
	// newest finished.
	Active, Last *Resnapshot
	// Sweeps: the reader can sweep (it has ClickHouse), so it takes
	// resnapshots with a predicate.
	Sweeps bool
}

// Find returns resnapshot id as stored, and whether it is running (nil:
// neither running nor the last ended of its table).
func (s ResnapshotStatus) Find(id string) (a *Resnapshot, running bool) {
	for _, a := range s.Running {
		if a.ID == id {
			return a, true
		}
	}
	for _, a := range s.Ended {
		if a.ID == id {
			return a, false
		}
	}
	return nil, false
}

// RunningOf is the running resnapshot of table (nil: none).
func (s ResnapshotStatus) RunningOf(table string) *Resnapshot {
	for _, a := range s.Running {
		if a.Table == table {
			return a
		}
	}
	return nil
}

// resnapshotsOf are st's running and ended resnapshots, from the fields of
// readers that ran one at a time when the lists are absent.
func resnapshotsOf(st *readerState) (running, ended []*Resnapshot) {
	running, ended = st.Resnapshots, st.EndedResnapshots
	if len(running) == 0 && st.Resnapshot != nil {
		running = []*Resnapshot{st.Resnapshot}
	}
	if len(ended) == 0 && st.LastResnapshot != nil {
		ended = []*Resnapshot{st.LastResnapshot}
	}
	return running, ended
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
	out := ResnapshotStatus{Found: true, Epoch: st.own.Epoch, UpdatedAt: st.own.UpdatedAt, Sweeps: st.own.Sweeps}
	out.Running, out.Ended = resnapshotsOf(st.own)
	if n := len(out.Running); n > 0 {
		out.Active = out.Running[n-1]
	}
	if n := len(out.Ended); n > 0 {
		out.Last = out.Ended[n-1]
	}
	return out, nil
}
