package loader

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/ring"
	"github.com/tributary/tributary/internal/tables"
)

// Placement: with a ring map, every live row written is checked against the
// owner of its shard-key value. A row on a shard that does not own it is
// misplaced — the stale-router failure of docs/design/moves.md, a writer routing with a stale
// ring map — unless it is on the key's owner under the map's staged next
// map: then it is a planned arc move's copy (the arc-move rollout of docs/design/moves.md, step 2),
// counted apart and never alerted on. Writes are counted as they happen
// (tributary_misplaced_writes_total: the alert that fires within a
// minute), and the current number of misplaced live rows is read from
// ClickHouse periodically (tributary_misplaced_rows), through the
// _ownership table the loader keeps: the ring map materialised for every
// shard-key value seen, at the newest ring version; and _ownership_next,
// the staged map's owners of the keys it moves.
//
// The ring map file is read again every RingReloadInterval: operators
// publish a staged move, then the cutover, without restarting loaders. A
// map older than the one in force is refused (a stale copy of the file
// must not turn ownership back), as is a changed map under the same
// version.

// placement is the ownership state: the applier places rows, the watcher
// reloads the map; mu orders the two.
type placement struct {
	mu   sync.Mutex
	ring *ring.Map
	// refused is the last file content refused (logged and counted once).
	refused []byte
	// known maps a shard-key value to the ring version its ownership was
	// stored under; knownNext to the staged version its staged owner was.
	known, knownNext map[string]map[string]int64 // table -> key -> version
	// file is the last ring map file content read (reload compares it).
	file []byte
}

// arcMoveCopies says whether an id's live copies are one planned arc move:
// two copies of one shard-key value, on its owner under the ring in force
// and on its owner under the staged map.
func (l *Loader) arcMoveCopies(a chstore.Anomaly) bool {
	if len(a.Shards) != 2 || len(a.Keys) != 2 || a.Keys[0] != a.Keys[1] || a.Keys[0] == "" {
		return false
	}
	l.place.mu.Lock()
	defer l.place.mu.Unlock()
	rm := l.place.ring
	if rm == nil || rm.Next() == nil {
		return false
	}
	owner, staged := rm.OwnerString(a.Keys[0]), rm.Next().OwnerString(a.Keys[0])
	if owner == staged {
		return false
	}
	on := func(s int) bool { return int(a.Shards[0]) == s || int(a.Shards[1]) == s }
	return on(owner) && on(staged)
}

// moveStaged says whether the ring map in force stages a move.
func (l *Loader) moveStaged() bool {
	l.place.mu.Lock()
	defer l.place.mu.Unlock()
	return l.place.ring != nil && l.place.ring.Next() != nil
}

// loadPlacement reads the stored ownership and re-places every key stored
// under another ring version than ours: after a cutover, the first loader
// to run with the new map moves ownership for all keys at once.
func (l *Loader) loadPlacement(ctx context.Context) error {
	l.place.mu.Lock()
	defer l.place.mu.Unlock()
	l.place.known, l.place.knownNext = map[string]map[string]int64{}, map[string]map[string]int64{}
	if l.place.ring == nil {
		l.place.ring = l.cfg.Ring
	}
	if l.place.ring == nil {
		return nil
	}
	l.place.file, _ = json.Marshal(l.place.ring) //nolint:errcheck // a map always marshals
	l.m.ringVersion.Set(float64(l.place.ring.Version()))
	for _, tc := range l.cfg.Tables.Tables {
		if tc.ShardKey == "" {
			continue
		}
		if err := l.replace(ctx, tc.Name); err != nil {
			return err
		}
	}
	return nil
}

// replace stores, for every key of table known to ClickHouse, its owner
// under the ring in force (where stored under an older version) and its
// staged owner (where the staged map moves it). Called with mu held.
func (l *Loader) replace(ctx context.Context, table string) error {
	var stored map[string]int64
	err := l.retry(ctx, "read ownership "+table, func() error {
		var err error
		stored, err = l.store.OwnershipVersions(ctx, table)
		return err
	})
	if err != nil {
		return err
	}
	rm := l.place.ring
	var moved, staged []chstore.Ownership
	next := map[string]int64{}
	for key, v := range stored {
		if v < rm.Version() {
			moved = append(moved, l.owner(rm, table, key))
			stored[key] = rm.Version()
		}
		if o, ok := l.stagedOwner(table, key); ok {
			staged = append(staged, o)
			next[key] = o.RingVersion
		}
	}
	if err := l.retry(ctx, "write ownership "+table, func() error { return l.store.WriteOwnership(ctx, moved) }); err != nil {
		return err
	}
	if err := l.retry(ctx, "write staged ownership "+table, func() error { return l.store.WriteNextOwnership(ctx, staged) }); err != nil {
		return err
	}
	if len(moved) > 0 || len(staged) > 0 {
		l.log.Info("ownership placed under the ring map", slog.String("table", table),
			slog.Int("keys_moved", len(moved)), slog.Int64("ring_version", rm.Version()), slog.Int("keys_staged", len(staged)))
	}
	l.place.known[table], l.place.knownNext[table] = stored, next
	return nil
}

func (l *Loader) owner(rm *ring.Map, table, key string) chstore.Ownership {
	return chstore.Ownership{Table: table, Key: key, Owner: uint16(rm.OwnerString(key)), RingVersion: rm.Version()}
}

// stagedOwner is key's owner under the staged map, if there is one and it
// moves key. Called with mu held.
func (l *Loader) stagedOwner(table, key string) (chstore.Ownership, bool) {
	next := l.place.ring.Next()
	if next == nil {
		return chstore.Ownership{}, false
	}
	o := l.owner(next, table, key)
	return o, int(o.Owner) != l.place.ring.OwnerString(key)
}

// placeRow checks one written change. It returns the ownerships to store
// first: the key's owner if it has none under this ring version, and its
// staged owner likewise.
func (l *Loader) placeRow(tc *tables.Table, ev *envelope.Event) []placed {
	l.markRow(tc, ev)
	if tc.ShardKey == "" || ev.Op == envelope.OpDelete {
		return nil
	}
	v := ev.After[tc.ShardKey]
	if v == nil {
		return nil
	}
	l.place.mu.Lock()
	defer l.place.mu.Unlock()
	rm := l.place.ring
	if rm == nil {
		return nil
	}
	o := l.owner(rm, tc.Name, *v)
	staged, moving := l.stagedOwner(tc.Name, *v)
	switch {
	case int(o.Owner) == ev.Shard:
	case moving && int(staged.Owner) == ev.Shard:
		l.m.movingWrites.WithLabelValues(tc.Name, strconv.Itoa(ev.Shard)).Inc()
	default:
		l.m.misplacedWrites.WithLabelValues(tc.Name, strconv.Itoa(ev.Shard)).Inc()
	}
	var out []placed
	if remember(l.place.known, tc.Name, *v, o.RingVersion) {
		out = append(out, placed{o, false})
	}
	if moving && remember(l.place.knownNext, tc.Name, *v, staged.RingVersion) {
		out = append(out, placed{staged, true})
	}
	return out
}

// placed is an ownership to store: under the ring in force, or staged.
type placed struct {
	chstore.Ownership
	staged bool
}

// remember records that key of table is stored under version v, and says
// whether it was not yet.
func remember(known map[string]map[string]int64, table, key string, v int64) bool {
	k := known[table]
	if k == nil {
		k = map[string]int64{}
		known[table] = k
	}
	if k[key] >= v {
		return false
	}
	k[strings.Clone(key)] = v // not the whole record the value is a slice of
	return true
}

// writePlaced stores the ownerships placeRow returned for a batch of
// table, and its revenue marks, before the batch's rows. The three are
// independent of each other (each need only precede the rows), so the
// non-empty ones are written concurrently.
func (l *Loader) writePlaced(ctx context.Context, table string, ps []placed) error {
	var cur, next []chstore.Ownership
	for _, p := range ps {
		if p.staged {
			next = append(next, p.Ownership)
		} else {
			cur = append(cur, p.Ownership)
		}
	}
	var writes []func() error
	if l.marksPending(table) {
		writes = append(writes, func() error { return l.writeMarks(ctx, table) })
	}
	if len(cur) > 0 {
		writes = append(writes, func() error { return l.store.WriteOwnership(ctx, cur) })
	}
	if len(next) > 0 {
		writes = append(writes, func() error { return l.store.WriteNextOwnership(ctx, next) })
	}
	return all(writes)
}

// evaluateMisplaced refreshes tributary_misplaced_rows (and, while a move
// is staged, tributary_moving_rows) from ClickHouse.
func (l *Loader) evaluateMisplaced(ctx context.Context) error {
	l.place.mu.Lock()
	rm := l.place.ring
	l.place.mu.Unlock()
	if rm == nil {
		return nil
	}
	for _, tc := range l.cfg.Tables.Tables {
		if tc.ShardKey == "" {
			continue
		}
		t, err := l.store.Lookup(ctx, tc.Name, tc.Key())
		if err != nil {
			return err
		}
		if t == nil {
			continue // nothing written yet
		}
		counts, err := l.store.MisplacedCounts(ctx, t, tc.ShardKey)
		if err != nil {
			return err
		}
		setByShard(rm, counts, func(shard string, n float64) { l.m.misplacedRows.WithLabelValues(tc.Name, shard).Set(n) })
		moving := map[uint16]uint64{}
		if rm.Next() != nil {
			if moving, err = l.store.MovingCounts(ctx, t, tc.ShardKey); err != nil {
				return err
			}
		}
		setByShard(rm, moving, func(shard string, n float64) { l.m.movingRows.WithLabelValues(tc.Name, shard).Set(n) })
	}
	return nil
}

// setByShard sets a per-shard gauge for every shard of the ring (and of its
// staged map), zero where counts has none, and for shards counts names that
// the maps do not.
func setByShard(rm *ring.Map, counts map[uint16]uint64, set func(shard string, n float64)) {
	shards := rm.Shards()
	if n := rm.Next(); n != nil {
		shards = append(shards, n.Shards()...)
	}
	done := map[uint16]bool{}
	for _, sh := range shards {
		id := uint16(sh.ID)
		if !done[id] {
			set(strconv.Itoa(sh.ID), float64(counts[id]))
			done[id] = true
		}
	}
	for sh, n := range counts {
		if !done[sh] {
			set(strconv.Itoa(int(sh)), float64(n))
		}
	}
}

// watchMisplaced runs evaluateMisplaced every MisplacedInterval, and
// reloads the ring map file every RingReloadInterval, on one goroutine
// (a reload zeroes the gauges an evaluation sets).
func (l *Loader) watchMisplaced(ctx context.Context) error {
	if l.cfg.Ring == nil {
		return nil
	}
	evaluate := time.NewTicker(l.cfg.MisplacedInterval)
	defer evaluate.Stop()
	var reload <-chan time.Time
	if l.cfg.RingPath != "" {
		every := l.cfg.RingReloadInterval
		if every <= 0 {
			every = 5 * time.Second
		}
		t := time.NewTicker(every)
		defer t.Stop()
		reload = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-reload:
			err := l.reloadRing(ctx)
			if err != nil && ctx.Err() == nil {
				l.m.ringReloads.WithLabelValues("refused").Inc()
				err = fmt.Errorf("ring map file %s: %w", l.cfg.RingPath, err)
			}
			l.roundDone(ctx, monitorRingReload, err, slog.LevelError, "ring map not reloaded; the map in force stays")
		case <-evaluate.C:
			l.roundDone(ctx, monitorMisplaced, l.evaluateMisplaced(ctx), slog.LevelWarn, "misplaced-row evaluation failed")
		}
	}
}

// reloadRing reads the ring map file and, if it holds a newer map (or a
// newly staged one), makes it the map in force and places every known key
// under it. Rows are not placed meanwhile (mu is held).
func (l *Loader) reloadRing(ctx context.Context) error {
	rm, data, err := loadCanonical(l.cfg.RingPath)
	if err != nil {
		return err
	}
	l.place.mu.Lock()
	defer l.place.mu.Unlock()
	if bytes.Equal(data, l.place.file) || bytes.Equal(data, l.place.refused) {
		return nil
	}
	if err := newerRing(l.place.ring, rm); err != nil {
		l.place.refused = data
		return err
	}
	l.place.file = data
	if sameRing(l.place.ring, rm) {
		return nil // the same map, written again
	}
	prev := l.place.ring
	l.place.ring = rm
	for _, tc := range l.cfg.Tables.Tables {
		if tc.ShardKey == "" {
			continue
		}
		if err := l.replace(ctx, tc.Name); err != nil {
			// Keys placed under the new map stay so (the newest version
			// wins in ClickHouse); the next reload finishes the rest.
			l.place.ring, l.place.file = prev, nil
			return err
		}
	}
	// Set once every known key is placed: the version gauge says the
	// ownership in ClickHouse follows this map.
	l.m.ringVersion.Set(float64(rm.Version()))
	l.m.zeroPlacement(l.cfg.Tables, rm)
	l.m.ringReloads.WithLabelValues("applied").Inc()
	l.log.Info("ring map reloaded", slog.Int64("ring_version", rm.Version()), slog.Bool("staged_move", rm.Next() != nil))
	return nil
}

// newerRing refuses a map that would take ownership back: an older
// version, or another map under the version in force.
func newerRing(cur, rm *ring.Map) error {
	switch {
	case rm.Version() < cur.Version():
		return fmt.Errorf("ring map version %d is older than version %d in force", rm.Version(), cur.Version())
	case rm.Version() == cur.Version() && ring.Diff(cur, rm) != 0:
		return fmt.Errorf("ring map version %d changed without a new version number", rm.Version())
	case rm.Version() == cur.Version() && cur.Next() != nil && (rm.Next() == nil || rm.Next().Version() < cur.Next().Version()):
		return fmt.Errorf("ring map version %d drops or downgrades its staged version %d; publish a new version instead", rm.Version(), cur.Next().Version())
	}
	return nil
}

// sameRing says whether two maps route and stage alike.
func sameRing(a, b *ring.Map) bool {
	same := func(x, y *ring.Map) bool { return x.Version() == y.Version() && ring.Diff(x, y) == 0 }
	if !same(a, b) || (a.Next() == nil) != (b.Next() == nil) {
		return false
	}
	return a.Next() == nil || same(a.Next(), b.Next())
}

// loadCanonical reads the ring map file, and its canonical form: a rewrite
// with other white space is not a change.
func loadCanonical(path string) (*ring.Map, []byte, error) {
	m, err := ring.Load(path)
	if err != nil {
		return nil, nil, err
	}
	data, err := json.Marshal(m)
	return m, data, err
}
