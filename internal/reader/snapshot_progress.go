package reader

import (
	"sync"
	"time"

	"github.com/tributary/tributary/internal/progress"
)

// snapProgress tracks which chunks Kafka has acknowledged. A range's
// stored position (After) moves only to the end of the newest chunk such
// that it and every earlier chunk of the range are completely
// acknowledged; chunks are read in key order, one range by one worker at a
// time, so that position is a key below which every row is in Kafka.
//
// Workers call open/seal; the producer's promise goroutines call ack; the
// saver and the progress logger call state and totals. Everything is under
// mu.
type snapProgress struct {
	mu     sync.Mutex
	st     snapshotState
	queues [][][]*chunk // [table][range] chunks not yet folded into st
	err    error        // first produce failure
	// changed is set when st moved since the last state() call.
	changed bool
	// onAck is called under mu for every chunk folded in (metrics).
	onAck func(table int, rows int64, tp *tableProgress)
}

// chunk is one chunk's records in flight.
type chunk struct {
	table, rng int
	pending    int // records not yet acknowledged (see ack)
	sealed     bool
	final      bool     // the range has no rows after this chunk
	last       []string // key of the chunk's last row (nil: no rows)
	rows       int64
}

func newSnapProgress(st snapshotState, onAck func(int, int64, *tableProgress)) *snapProgress {
	p := &snapProgress{st: copyState(st), onAck: onAck}
	p.queues = make([][][]*chunk, len(st.Tables))
	for i, t := range st.Tables {
		p.queues[i] = make([][]*chunk, len(t.Ranges))
	}
	return p
}

// open starts a chunk of range rng of table.
func (p *snapProgress) open(table, rng int) *chunk {
	c := &chunk{table: table, rng: rng}
	p.mu.Lock()
	p.queues[table][rng] = append(p.queues[table][rng], c)
	p.mu.Unlock()
	return c
}

// ack is called once per record produced for c, from the producer's
// callback. Acks may come before c is sealed: pending then goes below
// zero until seal adds the chunk's record count (one lock per record, not
// two).
func (p *snapProgress) ack(c *chunk, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil && p.err == nil {
		p.err = err
	}
	c.pending--
	p.advance(c.table, c.rng)
}

// seal marks c fully produced: rows records, the last with key last;
// final when the range has nothing after it. A chunk whose read failed is
// never sealed, so nothing after it in its range is recorded.
func (p *snapProgress) seal(c *chunk, rows int64, last []string, final bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.pending += int(rows)
	c.rows, c.last, c.final, c.sealed = rows, last, final, true
	p.advance(c.table, c.rng)
}

func (p *snapProgress) advance(table, rng int) {
	// After a failed produce nothing more is recorded: the restart copies
	// again from the last acknowledged chunk.
	q := p.queues[table][rng]
	for p.err == nil && len(q) > 0 && q[0].sealed && q[0].pending == 0 {
		c := q[0]
		q[0] = nil
		q = q[1:]
		tp := &p.st.Tables[table]
		r := &tp.Ranges[rng]
		if c.last != nil {
			r.After = c.last
		}
		r.Rows += c.rows
		r.Chunks++
		r.Done = r.Done || c.final
		p.changed = true
		if p.onAck != nil {
			p.onAck(table, c.rows, tp)
		}
	}
	p.queues[table][rng] = q
}

// state returns a deep copy of the acknowledged progress and whether it
// changed since the previous call.
func (p *snapProgress) state() (snapshotState, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	changed := p.changed
	p.changed = false
	return copyState(p.st), changed
}

// copyState copies st deeply enough that the copy shares nothing that is
// ever modified (After slices are replaced, never modified in place).
func copyState(st snapshotState) snapshotState {
	out := snapshotState{Started: st.Started, Tables: make([]tableProgress, len(st.Tables))}
	for i, t := range st.Tables {
		t.Key = append([]string(nil), t.Key...)
		t.Ranges = append([]rangeProgress(nil), t.Ranges...)
		out.Tables[i] = t
	}
	return out
}

// failure returns the first produce error.
func (p *snapProgress) failure() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// snapTotals sums a snapshot's progress.
type snapTotals struct {
	rows, estimate     int64
	chunks             int64
	tables, tablesDone int
	ranges, rangesDone int
}

func (p *snapProgress) totals() snapTotals {
	p.mu.Lock()
	defer p.mu.Unlock()
	return totalsOf(&p.st)
}

func totalsOf(st *snapshotState) snapTotals {
	var s snapTotals
	for _, t := range st.Tables {
		s.tables++
		s.estimate += t.Estimate
		done := true
		for _, r := range t.Ranges {
			s.ranges++
			s.rows += r.Rows
			s.chunks += r.Chunks
			if r.Done {
				s.rangesDone++
			} else {
				done = false
			}
		}
		if done {
			s.tablesDone++
		}
	}
	return s
}

// tableRows is the rows a table's ranges have copied.
func tableRows(t *tableProgress) int64 {
	var n int64
	for _, r := range t.Ranges {
		n += r.Rows
	}
	return n
}

// tableDone reports whether every range of t is copied.
func tableDone(t *tableProgress) bool {
	for _, r := range t.Ranges {
		if !r.Done {
			return false
		}
	}
	return true
}

// progressRatio is a table's copied fraction by its row estimate: 1 once
// every range is done, else at most 0.99 (the estimate is only an
// estimate), 0 when unknown.
func progressRatio(t *tableProgress) float64 {
	if tableDone(t) {
		return 1
	}
	if t.Estimate <= 0 {
		return 0
	}
	return min(float64(tableRows(t))/float64(t.Estimate), 0.99)
}

// eta estimates the time left from the rows still to copy (by the
// estimate) at rate rows/s; ok is false when either is unknown.
func eta(done, estimate int64, rate float64) (time.Duration, bool) {
	if estimate <= 0 || rate <= 0 {
		return 0, false
	}
	left := max(estimate-done, 0)
	return time.Duration(float64(left) / rate * float64(time.Second)), true
}

// progressShower returns what calls cfg.ShowProgress with prog's totals
// under key (rows, estimate, the rate since start counting from before
// rows); a no-op without ShowProgress.
func (r *Reader) progressShower(key string, prog *snapProgress, before int64, start time.Time) func(final bool) {
	if r.cfg.ShowProgress == nil {
		return func(bool) {}
	}
	return func(final bool) {
		tot := prog.totals()
		rate := float64(tot.rows-before) / max(time.Since(start).Seconds(), 0.001)
		r.cfg.ShowProgress(key, progress.Status{Label: key, Done: tot.rows, Total: tot.estimate, Rate: rate}, final)
	}
}
