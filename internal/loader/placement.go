package loader

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/tables"
)

// Placement: with a ring map, every live row written is checked against the
// owner of its shard-key value. A row on a shard that does not own it is
// misplaced — the 2 a.m. failure of seed 003, a writer routing with a stale
// ring map. Writes are counted as they happen
// (tributary_misplaced_writes_total: the alert that fires within a
// minute), and the current number of misplaced live rows is read from
// ClickHouse periodically (tributary_misplaced_rows), through the
// _ownership table the loader keeps: the ring map materialised for every
// shard-key value seen, at the newest ring version.

// placement is the per-table ownership state, owned by the applier.
type placement struct {
	// known maps a shard-key value to the ring version its ownership was
	// stored under.
	known map[string]map[string]int64 // table -> key -> ring version
}

// loadPlacement reads the stored ownership and re-places every key stored
// under another ring version than ours: after a cutover, the first loader
// to run with the new map moves ownership for all keys at once.
func (l *Loader) loadPlacement(ctx context.Context) error {
	l.place = placement{known: map[string]map[string]int64{}}
	if l.cfg.Ring == nil {
		return nil
	}
	for _, tc := range l.cfg.Tables.Tables {
		if tc.ShardKey == "" {
			continue
		}
		var stored map[string]int64
		err := l.retry(ctx, "read ownership "+tc.Name, func() error {
			var err error
			stored, err = l.store.OwnershipVersions(ctx, tc.Name)
			return err
		})
		if err != nil {
			return err
		}
		var moved []chstore.Ownership
		for key, v := range stored {
			if v < l.cfg.Ring.Version() {
				moved = append(moved, l.owner(tc.Name, key))
				stored[key] = l.cfg.Ring.Version()
			}
		}
		if err := l.retry(ctx, "write ownership "+tc.Name, func() error { return l.store.WriteOwnership(ctx, moved) }); err != nil {
			return err
		}
		if len(moved) > 0 {
			l.log.Info("ownership re-placed under the new ring map", slog.String("table", tc.Name),
				slog.Int("keys", len(moved)), slog.Int64("ring_version", l.cfg.Ring.Version()))
		}
		l.place.known[tc.Name] = stored
	}
	return nil
}

func (l *Loader) owner(table, key string) chstore.Ownership {
	return chstore.Ownership{Table: table, Key: key, Owner: uint16(l.cfg.Ring.OwnerString(key)), RingVersion: l.cfg.Ring.Version()}
}

// placeRow checks one written change. It returns the ownership to store
// first if the row's shard-key value has none under this ring version.
func (l *Loader) placeRow(tc *tables.Table, ev *envelope.Event) (chstore.Ownership, bool) {
	if l.cfg.Ring == nil || tc.ShardKey == "" || ev.Op == envelope.OpDelete {
		return chstore.Ownership{}, false
	}
	v := ev.After[tc.ShardKey]
	if v == nil {
		return chstore.Ownership{}, false
	}
	o := l.owner(tc.Name, *v)
	if int(o.Owner) != ev.Shard {
		l.m.misplacedWrites.WithLabelValues(tc.Name, strconv.Itoa(ev.Shard)).Inc()
	}
	known := l.place.known[tc.Name]
	if known == nil {
		known = map[string]int64{}
		l.place.known[tc.Name] = known
	}
	if known[*v] >= o.RingVersion {
		return chstore.Ownership{}, false
	}
	known[strings.Clone(*v)] = o.RingVersion // not the whole record the value is a slice of
	return o, true
}

// evaluateMisplaced refreshes tributary_misplaced_rows from ClickHouse.
func (l *Loader) evaluateMisplaced(ctx context.Context) error {
	if l.cfg.Ring == nil {
		return nil
	}
	for _, tc := range l.cfg.Tables.Tables {
		if tc.ShardKey == "" {
			continue
		}
		t, err := l.store.Lookup(ctx, tc.Name, tc.IDColumn)
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
		for _, sh := range l.cfg.Ring.Shards() {
			l.m.misplacedRows.WithLabelValues(tc.Name, strconv.Itoa(sh.ID)).Set(float64(counts[uint16(sh.ID)]))
			delete(counts, uint16(sh.ID))
		}
		for sh, n := range counts { // shards the ring map does not list
			l.m.misplacedRows.WithLabelValues(tc.Name, strconv.Itoa(int(sh))).Set(float64(n))
		}
	}
	return nil
}

// watchMisplaced runs evaluateMisplaced every MisplacedInterval.
func (l *Loader) watchMisplaced(ctx context.Context) {
	if l.cfg.Ring == nil {
		return
	}
	t := time.NewTicker(l.cfg.MisplacedInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := l.evaluateMisplaced(ctx); err != nil && ctx.Err() == nil {
			l.log.Warn("misplaced-row evaluation failed", slog.Any("err", err))
		}
	}
}
