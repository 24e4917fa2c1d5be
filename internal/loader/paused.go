package loader

// Operator pauses (tributaryctl pause and resume). A paused table is held
// like a stopped one (stopped.go): its topic is paused, nothing of it is
// committed or watermarked, and its stop record tells the API, which
// leaves it out of the fleet's freshness and says why. Its changes wait in
// Kafka: the readers keep streaming the table, so their slots stay
// confirmed and the shards' WAL bounded. A pause may last as long as the
// topic's retention keeps what the loaders have not committed.
//
// Resuming seeks the table's partitions back to their committed offsets
// (records polled before the pause took hold were skipped) and fetches
// again, so every change is applied in order. The poller does it before
// the first poll of a batch and marks that batch: the applier ends the
// pause when that batch comes, so a batch polled before the resume still
// skips the table, and no record is applied out of order.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/chstore"
)

// pauseInterval is how often the loader reads the pause records.
const pauseInterval = 2 * time.Second

// pausedError is a table's stop reason while an operator pauses it.
type pausedError struct {
	p chstore.Pause
	// resuming: the poller has been asked to resume it.
	resuming bool
}

func (e *pausedError) Error() string {
	return fmt.Sprintf("paused by %s at %s (tributaryctl resume --table %s to continue): %s",
		e.p.By, e.p.At.UTC().Format(time.RFC3339), e.p.Table, e.p.Reason)
}

// readPauses reads the newest pause record of every table (every
// pauseInterval, monitors.go; on a failure the last records read stay in
// force).
func (l *Loader) readPauses(ctx context.Context) error {
	m, err := chstore.Pauses(ctx, l.store.Conn(), l.store.Database())
	if err != nil {
		return err //nolint:wrapcheck // says what it read
	}
	l.pauses.Store(&m)
	return nil
}

// readPausesAtStart reads them before the first batch, retrying, so that
// a loader started while a table is paused never applies it.
func (l *Loader) readPausesAtStart(ctx context.Context) error {
	for wait := 250 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		err := l.readPauses(ctx)
		if err == nil {
			return nil
		}
		l.log.Warn("pause records not read; retrying before the first batch", slog.Duration("in", wait), slog.Any("err", err))
		select {
		case <-ctx.Done():
			return ctx.Err() //nolint:wrapcheck // stopping
		case <-time.After(wait):
		}
	}
}

// resumes are the tables whose resume the applier asked the poller for.
type resumes struct {
	mu    sync.Mutex
	asked map[string]string // table -> topic, not yet taken by the poller
	// wake ends the poller's wait for records (nil when it is not
	// waiting): with every table paused, nothing else would.
	wake context.CancelFunc
}

// arm registers cancel as the poller's wake-up for a blocking poll; false
// when a resume is already asked for (poll at once, do not wait).
func (r *resumes) arm(cancel context.CancelFunc) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.asked) > 0 {
		return false
	}
	r.wake = cancel
	return true
}

func (r *resumes) disarm() {
	r.mu.Lock()
	r.wake = nil
	r.mu.Unlock()
}

// applyPauses pauses tables as the newest records say, and asks the poller
// to resume the ones no longer paused. It runs on Run's goroutine between
// batches.
func (l *Loader) applyPauses(cl *kgo.Client) {
	pm := l.pauses.Load()
	if pm == nil {
		return
	}
	l.resume.mu.Lock()
	defer l.resume.mu.Unlock()
	for _, t := range l.cfg.Tables.Tables {
		p, has := (*pm)[t.Name]
		cur, stopped := l.stopped[t.Name]
		var pe *pausedError
		switch paused := stopped && errors.As(cur, &pe); {
		case has && p.Paused && !stopped:
			l.stopped[t.Name] = &pausedError{p: p}
			l.stops.note(t.Name, t.Topic, l.stopped[t.Name], time.Now())
			l.m.tablePaused.WithLabelValues(t.Name).Set(1)
			cl.PauseFetchTopics(t.Topic)
			l.log.Info("table paused", slog.String("table", t.Name), slog.String("by", p.By), slog.String("reason", p.Reason))
		case paused && !(has && p.Paused) && !pe.resuming:
			pe.resuming = true
			if l.resume.asked == nil {
				l.resume.asked = map[string]string{}
			}
			l.resume.asked[t.Name] = t.Topic
			if l.resume.wake != nil {
				l.resume.wake()
				l.resume.wake = nil
			}
		}
	}
}

// resumeAsked rewinds and resumes the tables the applier asked for, on the
// poller's goroutine before a batch's first poll, and returns them.
func (l *Loader) resumeAsked(cl *kgo.Client) []string {
	l.resume.mu.Lock()
	asked := l.resume.asked
	l.resume.asked = nil
	l.resume.mu.Unlock()
	var tables []string
	for table, topic := range asked {
		rewind(cl, topic)
		cl.ResumeFetchTopics(topic)
		tables = append(tables, table)
	}
	return tables
}

// endPauses ends the pauses of tables, resumed by the poller before the
// batch that carries them: from this batch on they are applied again.
func (l *Loader) endPauses(tables []string) {
	for _, name := range tables {
		delete(l.stopped, name)
		l.stops.clear(name, time.Now())
		l.m.tablePaused.WithLabelValues(name).Set(0)
		l.log.Info("table resumed", slog.String("table", name))
	}
}

// rewind sets topic's partitions back to their committed offsets; one
// with records polled but never committed goes back to its start.
func rewind(cl *kgo.Client, topic string) {
	set := map[int32]kgo.EpochOffset{}
	for part, eo := range cl.CommittedOffsets()[topic] {
		set[part] = eo
	}
	for part := range cl.UncommittedOffsets()[topic] {
		if _, ok := set[part]; !ok {
			set[part] = kgo.EpochOffset{Epoch: -1, Offset: 0}
		}
	}
	cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{topic: set})
}
