package loader

// The hook that keeps the move log's by-document index (chstore's
// byid_index.go) built: at start for a log that already exists (an
// existing deployment gets its index backfilled), and after the log's
// table is ensured in a batch, before the batch's rows are inserted (a
// new deployment's log is created by its first batch). Until the index is
// built the API reads the log itself, so a failure here costs speed, never
// exactness; it is retried like any ClickHouse write.

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/tables"
)

// moveIndexes remembers whether this process has ensured the index.
type moveIndexes struct {
	mu   sync.Mutex
	done bool
}

// moveIndex is the configured move log's index, if there is a move log.
func (l *Loader) moveIndex() (chstore.MoveIndex, bool) { return moveIndexOf(l.cfg.Tables) }

// moveIndexOf is the move log's index of c, if c has a move log.
func moveIndexOf(c *tables.Config) (chstore.MoveIndex, bool) {
	m := c.Moves
	if m == nil {
		return chstore.MoveIndex{}, false
	}
	t, ok := c.ByName(m.Table)
	if !ok {
		return chstore.MoveIndex{}, false
	}
	return chstore.MoveIndex{Log: t.Name, LogID: t.IDColumn, Document: m.DocumentColumn}, true
}

// ensureMoveIndex builds the index of the move log table name (t: its
// layout, nil when the batch did not ensure it), once per process.
func (l *Loader) ensureMoveIndex(ctx context.Context, name string, t *chstore.Table) error {
	m, ok := l.moveIndex()
	if !ok || m.Log != name || t == nil {
		return nil
	}
	l.moveIdx.mu.Lock()
	defer l.moveIdx.mu.Unlock()
	if l.moveIdx.done {
		return nil
	}
	err := l.retry(ctx, "ensure move index "+name, func() error {
		built, err := l.store.EnsureMoveIndex(ctx, m)
		if built {
			l.log.Info("move log index built", slog.String("table", m.Table()), slog.String("log", m.Log))
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("ensure move index of %s: %w", name, err)
	}
	l.moveIdx.done = true
	return nil
}

// ensureMoveIndexAtStart builds the index of a move log that already
// exists. A failure is logged: the first batch of the log tries again.
func (l *Loader) ensureMoveIndexAtStart(ctx context.Context) {
	m, ok := l.moveIndex()
	if !ok {
		return
	}
	t, err := l.store.Lookup(ctx, m.Log, []string{m.LogID})
	if err == nil && t != nil {
		err = l.ensureMoveIndex(ctx, m.Log, t)
	}
	if err != nil {
		l.log.Warn("move log index not ensured at start; the log's next batch retries", slog.String("log", m.Log), slog.Any("err", err))
	}
}
