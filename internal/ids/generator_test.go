package ids

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable clock; Sleep advances it, as a real sleep would.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	slept  time.Duration
	onIdle func(c *fakeClock) // called by Sleep instead of advancing, if set
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

func (c *fakeClock) Sleep(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slept += d
	if c.onIdle != nil {
		c.onIdle(c)
		return
	}
	c.now = c.now.Add(d)
}

func newFakeGenerator(t *testing.T, layout string, clock *fakeClock, opts ...GeneratorOption) *Generator {
	t.Helper()
	opts = append([]GeneratorOption{WithClock(clock.Now), WithSleep(clock.Sleep)}, opts...)
	g, err := NewGenerator(mustPreset(t, layout), 5, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestGeneratorSequence(t *testing.T) {
	start := utc("2026-01-02T00:00:00Z")
	clock := &fakeClock{now: start}
	g := newFakeGenerator(t, "quickcart", clock)
	s := mustPreset(t, "quickcart")

	// 4096 ids fit in one millisecond; the 4097th waits for the next one.
	var last int64 = -1
	for i := range 4097 {
		id, err := g.Next()
		if err != nil {
			t.Fatalf("Next #%d: %v", i, err)
		}
		if id <= last {
			t.Fatalf("Next #%d = %d, not above %d", i, id, last)
		}
		last = id
		p, err := s.Split(id)
		if err != nil {
			t.Fatal(err)
		}
		wantMS, wantSeq := start.UnixMilli(), int64(i)
		if i == 4096 {
			wantMS, wantSeq = start.UnixMilli()+1, 0
		}
		if p != (Parts{UnixMilli: wantMS, Node: 5, Seq: wantSeq}) {
			t.Fatalf("Next #%d decodes to %+v, want ms %d seq %d", i, p, wantMS, wantSeq)
		}
	}
	if clock.slept != time.Millisecond {
		t.Errorf("slept %v for the exhausted sequence, want 1ms", clock.slept)
	}
	// The first id after a millisecond boundary restarts the sequence at 0;
	// this is QuickCart's worked example's second id: 100 ms after 362387865620483.
	clock.Set(start.Add(100 * time.Millisecond))
	if id, err := g.Next(); err != nil || id != 362388285050880 {
		t.Fatalf("Next at +100ms = %d, %v; want 362388285050880", id, err)
	}
}

func TestGeneratorClockBackwards(t *testing.T) {
	start := utc("2026-01-02T00:00:00Z")
	tests := []struct {
		name    string
		step    time.Duration // clock step after the first id (negative: backwards)
		maxWait time.Duration
		wantErr error
		wantMS  int64 // expected ms offset of the second id when it succeeds
	}{
		{"refuses by default", -5 * time.Millisecond, 0, ErrClockBackwards, 0},
		{"refuses beyond the bound", -50 * time.Millisecond, 10 * time.Millisecond, ErrClockBackwards, 0},
		{"waits within the bound", -5 * time.Millisecond, 10 * time.Millisecond, nil, 0},
		{"same millisecond", 0, 0, nil, 0},
		{"forward", 3 * time.Millisecond, 0, nil, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := &fakeClock{now: start}
			g := newFakeGenerator(t, "seed000", clock, WithMaxBackwardsWait(tt.maxWait))
			first, err := g.Next()
			if err != nil {
				t.Fatal(err)
			}
			clock.Set(start.Add(tt.step))
			second, err := g.Next()
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Next after step %v = %d, %v; want %v", tt.step, second, err, tt.wantErr)
				}
				// Refusal is not sticky: once the clock is back, ids flow and
				// stay above the earlier one.
				clock.Set(start.Add(time.Millisecond))
				if id, err := g.Next(); err != nil || id <= first {
					t.Fatalf("Next after recovery = %d, %v; want > %d", id, err, first)
				}
				return
			}
			if err != nil || second <= first {
				t.Fatalf("Next = %d, %v; want > %d", second, err, first)
			}
			p, _ := mustPreset(t, "seed000").Split(second)
			if got := p.UnixMilli - start.UnixMilli(); got != tt.wantMS {
				t.Fatalf("second id at +%d ms, want +%d", got, tt.wantMS)
			}
		})
	}
}

func TestGeneratorStalledClock(t *testing.T) {
	clock := &fakeClock{now: utc("2026-01-02T00:00:00Z"), onIdle: func(*fakeClock) {}}
	g := newFakeGenerator(t, "seed000", clock)
	for range 1024 {
		if _, err := g.Next(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.Next(); !errors.Is(err, ErrClockStalled) {
		t.Fatalf("Next with a frozen clock and no sequence left: %v, want ErrClockStalled", err)
	}
}

func TestGeneratorBackwardsWhileExhausted(t *testing.T) {
	// The sequence runs out, and while Next waits the clock steps back: it
	// must not reuse the exhausted millisecond.
	start := utc("2026-01-02T00:00:00Z")
	clock := &fakeClock{now: start}
	steps := 0
	clock.onIdle = func(c *fakeClock) {
		steps++
		if steps == 1 {
			c.now = start.Add(-2 * time.Millisecond) // step back
			return
		}
		c.now = start.Add(time.Duration(steps-1) * time.Millisecond)
	}
	g := newFakeGenerator(t, "seed000", clock, WithMaxBackwardsWait(5*time.Millisecond))
	seen := map[int64]bool{}
	for range 1025 {
		id, err := g.Next()
		if err != nil {
			t.Fatal(err)
		}
		if seen[id] {
			t.Fatalf("duplicate id %d", id)
		}
		seen[id] = true
	}
}

func TestGeneratorOutOfRange(t *testing.T) {
	clock := &fakeClock{now: utc("2023-12-31T23:59:59Z")} // before seed000's epoch
	g := newFakeGenerator(t, "seed000", clock)
	if _, err := g.Next(); !errors.Is(err, ErrRange) {
		t.Fatalf("Next before the epoch: %v, want ErrRange", err)
	}
}

func TestNewGeneratorValidates(t *testing.T) {
	if _, err := NewGenerator(mustPreset(t, "seed000"), 8192); !errors.Is(err, ErrShard) {
		t.Errorf("node 8192: %v, want ErrShard", err)
	}
	if _, err := NewGenerator(Snowflake{}, 0); !errors.Is(err, ErrInvalidLayout) {
		t.Errorf("zero layout: %v, want ErrInvalidLayout", err)
	}
	if _, err := NewGenerator(mustPreset(t, "seed000"), 1, WithMaxBackwardsWait(-1)); !errors.Is(err, ErrInvalidLayout) {
		t.Errorf("negative wait: %v, want ErrInvalidLayout", err)
	}
}

// TestGeneratorConcurrent issues 8 x 100k ids from one Generator on the real
// clock: no duplicates, and each goroutine sees increasing ids.
func TestGeneratorConcurrent(t *testing.T) {
	const workers, perWorker = 8, 100_000
	n := perWorker
	if testing.Short() {
		n = 10_000
	}
	g, err := NewGenerator(mustPreset(t, "seed000"), 17)
	if err != nil {
		t.Fatal(err)
	}
	results := make([][]int64, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			out := make([]int64, 0, n)
			for range n {
				id, err := g.Next()
				if err != nil {
					errs[w] = err
					return
				}
				if len(out) > 0 && id <= out[len(out)-1] {
					errs[w] = errors.New("ids not increasing within a goroutine")
					return
				}
				out = append(out, id)
			}
			results[w] = out
		})
	}
	wg.Wait()
	all := make([]int64, 0, workers*n)
	for w := range workers {
		if errs[w] != nil {
			t.Fatalf("worker %d: %v", w, errs[w])
		}
		all = append(all, results[w]...)
	}
	slices.Sort(all)
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			t.Fatalf("duplicate id %d", all[i])
		}
	}
	s := mustPreset(t, "seed000")
	for _, id := range []int64{all[0], all[len(all)-1]} {
		if p, err := s.Split(id); err != nil || p.Node != 17 {
			t.Fatalf("id %d decodes to %+v, %v; want node 17", id, p, err)
		}
	}
}

// BenchmarkGenerator measures Next on the real clock (seed000 caps it at
// 1024 ids per millisecond).
func BenchmarkGenerator(b *testing.B) {
	g, err := NewGenerator(mustPreset(b, "seed000"), 1)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := g.Next(); err != nil {
			b.Fatal(err)
		}
	}
}
