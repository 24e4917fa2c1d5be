package ids

import (
	"fmt"
	"sync"
	"time"
)

// maxStallWaits bounds how often Next sleeps for the next millisecond after
// the sequence ran out before it gives up with ErrClockStalled. With a real
// clock one or two sleeps suffice.
const maxStallWaits = 1000

// Generator issues Snowflake ids for one node (shard or worker). It is safe
// for concurrent use.
//
// Invariant: ids returned by one Generator are strictly increasing in the
// order Next returned them. To keep it, Next never issues an id in a
// millisecond earlier than the last one: if the clock is behind, Next waits
// up to the configured bound (default: none) and otherwise returns
// ErrClockBackwards. When all sequence values of a millisecond are used, Next
// waits for the clock to reach the next millisecond.
//
// Uniqueness across Generators requires distinct node values; assigning them
// (leases, shard numbers) is the caller's duty.
type Generator struct {
	layout       Snowflake
	node         int64
	now          func() time.Time
	sleep        func(time.Duration)
	maxBackwards time.Duration

	mu     sync.Mutex // guards lastMS and seq
	lastMS int64      // Unix ms of the last issued id; -1 before the first
	seq    int64      // sequence of the last issued id
}

// GeneratorOption configures a Generator.
type GeneratorOption func(*Generator)

// WithClock replaces time.Now, for tests. The clock's wall time is used:
// a wall clock stepping backwards is exactly what the Generator guards against.
func WithClock(now func() time.Time) GeneratorOption {
	return func(g *Generator) { g.now = now }
}

// WithSleep replaces time.Sleep, for tests with a fake clock.
func WithSleep(sleep func(time.Duration)) GeneratorOption {
	return func(g *Generator) { g.sleep = sleep }
}

// WithMaxBackwardsWait lets Next wait up to d for a clock that is behind the
// last issued id to catch up, instead of failing at once. Next holds the
// Generator's lock while waiting, so other callers wait too.
func WithMaxBackwardsWait(d time.Duration) GeneratorOption {
	return func(g *Generator) { g.maxBackwards = d }
}

// NewGenerator returns a Generator issuing ids of layout for node.
func NewGenerator(layout Snowflake, node int64, opts ...GeneratorOption) (*Generator, error) {
	if layout.maxTime == 0 {
		return nil, fmt.Errorf("generator: zero Snowflake layout: %w", ErrInvalidLayout)
	}
	if node < 0 || node > layout.maxNode {
		return nil, fmt.Errorf("generator: node %d outside [0, %d]: %w", node, layout.maxNode, ErrShard)
	}
	g := &Generator{
		layout: layout,
		node:   node,
		now:    time.Now,
		sleep:  time.Sleep,
		lastMS: -1,
	}
	for _, o := range opts {
		o(g)
	}
	if g.maxBackwards < 0 {
		return nil, fmt.Errorf("generator: negative backwards wait %v: %w", g.maxBackwards, ErrInvalidLayout)
	}
	return g, nil
}

// Next returns a new id, or an error wrapping ErrClockBackwards,
// ErrClockStalled or ErrRange (clock outside the layout's time range).
func (g *Generator) Next() (int64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()

	ms := g.now().UnixMilli()
	if ms < g.lastMS {
		var err error
		if ms, err = g.waitBackwards(ms); err != nil {
			return 0, err
		}
	}
	seq := int64(0)
	if ms == g.lastMS {
		seq = g.seq + 1
		if seq > g.layout.maxSeq {
			var err error
			if ms, err = g.waitNextMilli(); err != nil {
				return 0, err
			}
			seq = 0
		}
	}
	id, err := g.layout.Encode(Parts{UnixMilli: ms, Node: g.node, Seq: seq})
	if err != nil {
		return 0, fmt.Errorf("generator: %w", err)
	}
	g.lastMS, g.seq = ms, seq
	return id, nil
}

// waitBackwards is called with the clock at ms < lastMS. It waits once for
// the gap if the gap is within the allowed bound. Caller holds mu.
func (g *Generator) waitBackwards(ms int64) (int64, error) {
	behind := time.Duration(g.lastMS-ms) * time.Millisecond
	if behind > g.maxBackwards {
		return 0, fmt.Errorf("generator: clock %v behind the last issued id (may wait %v): %w",
			behind, g.maxBackwards, ErrClockBackwards)
	}
	g.sleep(behind)
	ms = g.now().UnixMilli()
	if ms < g.lastMS {
		return 0, fmt.Errorf("generator: clock still %v behind the last issued id after waiting: %w",
			time.Duration(g.lastMS-ms)*time.Millisecond, ErrClockBackwards)
	}
	return ms, nil
}

// waitNextMilli waits until the clock passes lastMS. Caller holds mu.
func (g *Generator) waitNextMilli() (int64, error) {
	for range maxStallWaits {
		now := g.now()
		ms := now.UnixMilli()
		if ms > g.lastMS {
			return ms, nil
		}
		if ms < g.lastMS {
			// Stepped back while we waited: the bounded backwards wait
			// applies; then look again, since lastMS itself is still used up.
			if _, err := g.waitBackwards(ms); err != nil {
				return 0, err
			}
			continue
		}
		// Sleep to the next millisecond boundary of the wall clock.
		g.sleep(time.UnixMilli(ms + 1).Sub(now))
	}
	return 0, fmt.Errorf("generator: clock stuck at %d ms after %d waits: %w", g.lastMS, maxStallWaits, ErrClockStalled)
}
