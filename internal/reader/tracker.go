package reader

import (
	"sync"
	"time"

	"github.com/tributary/tributary/internal/envelope"
)

// tracker decides how far the slot may be confirmed: up to the end of the
// newest transaction such that it and every transaction before it have all
// their records acknowledged by Kafka. It never moves backwards.
//
// The replication goroutine calls begin/add/seal/idle; Kafka's promise
// goroutine calls ack. Everything is under mu.
//
// Every advance of the confirmable position is signalled on moved (one
// pending signal at most, so a burst of advances wakes the watermark
// goroutine once): a watermark follows a commit as soon as Kafka has
// acknowledged it and everything before it, never earlier.
type tracker struct {
	moved     chan struct{}
	mu        sync.Mutex
	queue     []*txnState // in commit order; front is the oldest unconfirmed
	confirmed envelope.LSN
	// lastCommit is the commit time of the transaction at confirmed.
	lastCommit txnTime
	err        error // first produce failure; the reader stops on it
	// acked, if set, is told the commit time (µs) of every transaction
	// with records once it is confirmable: it and everything before it
	// acknowledged by Kafka (tributary_reader_commit_ack_seconds).
	acked func(commitUS int64)
}

type txnTime struct {
	lsn  envelope.LSN
	unix int64 // microseconds
}

type txnState struct {
	end      envelope.LSN // commit end LSN; set by seal
	commitUS int64
	pending  int
	records  int // added in all
	sealed   bool
}

func newTracker(start envelope.LSN) *tracker {
	return &tracker{confirmed: start, moved: make(chan struct{}, 1)}
}

// advanced receives a value after the confirmable position moved (since
// the last receive).
func (t *tracker) advanced() <-chan struct{} { return t.moved }

// signal notes that confirmed moved. Called under mu; never blocks.
func (t *tracker) signal() {
	select {
	case t.moved <- struct{}{}:
	default: // a signal is pending already: its receiver reads the newest position
	}
}

// begin opens a transaction; records are added to it until seal.
func (t *tracker) begin() *txnState {
	s := &txnState{}
	t.mu.Lock()
	t.queue = append(t.queue, s)
	t.mu.Unlock()
	return s
}

// add counts one record produced for s.
func (t *tracker) add(s *txnState) {
	t.mu.Lock()
	s.pending++
	s.records++
	t.mu.Unlock()
}

// ack is called once per record add()ed, from the producer's callback.
func (t *tracker) ack(s *txnState, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil && t.err == nil {
		t.err = err
	}
	s.pending--
	t.advance()
}

// seal marks s complete (its commit arrived) at end.
func (t *tracker) seal(s *txnState, end envelope.LSN, commitUS int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s.end, s.commitUS, s.sealed = end, commitUS, true
	t.advance()
}

func (t *tracker) advance() {
	// After a failed produce nothing more is confirmed: the reader restarts
	// from the last good position and the lost records are read again.
	for t.err == nil && len(t.queue) > 0 {
		f := t.queue[0]
		if !f.sealed || f.pending > 0 {
			return
		}
		if f.end > t.confirmed {
			t.confirmed = f.end
			t.lastCommit = txnTime{f.end, f.commitUS}
			t.signal()
			if t.acked != nil && f.records > 0 && f.commitUS > 0 {
				t.acked(f.commitUS)
			}
		}
		t.queue[0] = nil
		t.queue = t.queue[1:]
	}
}

// idle advances to walEnd when nothing is in flight: every transaction that
// committed before walEnd has been decoded and sent to us already. asOf is
// when that was true (it becomes the watermark's time).
func (t *tracker) idle(walEnd envelope.LSN, asOf time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil && len(t.queue) == 0 && walEnd > t.confirmed {
		t.confirmed = walEnd
		t.lastCommit = txnTime{walEnd, asOf.UnixMicro()}
		t.signal()
	}
}

// position returns the confirmable LSN, the newest confirmed commit, and
// the first produce error.
func (t *tracker) position() (envelope.LSN, txnTime, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.confirmed, t.lastCommit, t.err
}

// inFlight is the number of open or unacknowledged transactions.
func (t *tracker) inFlight() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.queue)
}

// newTracker is a tracker from start that times commits to their
// acknowledgement in the reader's metrics.
func (r *Reader) newTracker(start envelope.LSN) *tracker {
	t := newTracker(start)
	t.acked = func(commitUS int64) {
		r.m.commitAck.Observe(max(0, time.Since(time.UnixMicro(commitUS)).Seconds()))
	}
	return t
}
