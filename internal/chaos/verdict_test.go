package chaos

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tributary/tributary/internal/fleet"
)

// TestVerdict: a 5xx or refused answer counts against the verdict only
// outside every outage (a fault's injection until fresh after it); too few
// faults, a failed recovery, the verifier, dead letters and a lag metric
// left above 0 each fail it.
func TestVerdict(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	passing := func() *Verdict {
		return &Verdict{MinFaults: 1, VerifyPassed: true,
			Faults: []*fault{{kind: KillAPI, at: at(10), recovered: time.Second, fresh: 5 * time.Second}},
			Answers: []answer{
				{at: at(5), route: "/readyz", code: 200},
				{at: at(11), route: "/v1/shards", code: 0},                     // the API is down: inside
				{at: at(14), route: "/v1/documents/{id}", code: 503},           // inside
				{at: at(16), route: "/v1/documents/{id}", code: 404},           // not an error
				{at: at(20), route: "/readyz", code: 200, status: "degraded"}}} // not an error
	}
	cases := []struct {
		name   string
		change func(v *Verdict)
		want   string // "" passes; else a failure containing it
	}{
		{"errors inside outages only", func(*Verdict) {}, ""},
		{"a 5xx after fresh", func(v *Verdict) { v.Answers = append(v.Answers, answer{at: at(16), route: "/v1/shards", code: 500}) }, "1 API 5xx"},
		{"refused before the first fault", func(v *Verdict) { v.Answers = append(v.Answers, answer{at: at(9), route: "/readyz"}) }, "1 API 5xx"},
		{"too few faults", func(v *Verdict) { v.MinFaults = 2 }, "1 faults, want at least 2"},
		{"a kind never injected", func(v *Verdict) {
			v.MinFaults = len(Kinds)
			for _, k := range Kinds[1:] {
				v.Faults = append(v.Faults, &fault{kind: k, at: at(10), recovered: time.Second, fresh: 5 * time.Second})
			}
		}, "no fault of kind " + Kinds[0]},
		{"every kind injected", func(v *Verdict) {
			v.MinFaults = len(Kinds)
			for _, k := range Kinds {
				v.Faults = append(v.Faults, &fault{kind: k, at: at(10), recovered: time.Second, fresh: 5 * time.Second})
			}
		}, ""},
		{"a recovery failed", func(v *Verdict) { v.Faults[0].err = errors.New("stack.sh up: exit 1") }, "stack.sh up"},
		{"verifier", func(v *Verdict) { v.VerifyPassed = false }, "verifier"},
		{"dead letters", func(v *Verdict) { v.DLQ = 3 }, "3 dead-letter records"},
		{"lag left", func(v *Verdict) { v.LagNonZero, v.LagMax = 16, 1 }, "not 0 on 16 partitions"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := passing()
			c.change(v)
			fails := strings.Join(v.failures(), "\n")
			switch {
			case c.want == "" && !v.Passed():
				t.Errorf("failed: %s", fails)
			case c.want != "" && (v.Passed() || !strings.Contains(fails, c.want)):
				t.Errorf("failures %q, want one with %q", fails, c.want)
			}
		})
	}
}

// TestDrawSkipsRecovering: while a component recovers (a stack.sh up that
// may take a minute), the schedule goes on with faults of the others, and
// none of them hits the recovering one; with every component busy there
// is no fault to draw.
func TestDrawSkipsRecovering(t *testing.T) {
	st := &stack{shards: []fleet.Endpoint{{Number: 0}, {Number: 7}}}
	in := &injector{st: st, rng: rand.New(rand.NewPCG(1, 2))}
	recovering := map[string]bool{"kafka": true, "clickhouse": true, "reader shard 7": true}
	kinds := map[string]int{}
	for range 500 {
		f := in.draw(func(c string) bool { return recovering[c] })
		if f == nil {
			t.Fatal("no fault drawn while most components are up")
		}
		if recovering[f.component()] {
			t.Fatalf("drew %s %s, whose component %q is recovering", f.kind, f.target, f.component())
		}
		if (f.kind == HangKafka || f.kind == HangClickHouse) != (f.hold > 0) {
			t.Errorf("%s with hold %s", f.kind, f.hold)
		}
		kinds[f.kind]++
	}
	for _, k := range []string{KillReader, KillLoader, KillAPI, CrashPostgres} {
		if kinds[k] == 0 {
			t.Errorf("no %s drawn in 500 faults", k)
		}
	}
	if f := in.draw(func(string) bool { return true }); f != nil {
		t.Errorf("drew %s %s with every component recovering", f.kind, f.target)
	}
}

// TestDrawDealsEveryKind: every len(Kinds) faults drawn in a row hold
// every kind once; a kind whose component is recovering when its turn
// comes is dealt later, once it is back, instead of being lost.
func TestDrawDealsEveryKind(t *testing.T) {
	st := &stack{shards: []fleet.Endpoint{{Number: 3}, {Number: 5}}}
	in := &injector{st: st, rng: rand.New(rand.NewPCG(7, 8))}
	none := func(string) bool { return false }
	for deck := range 3 {
		kinds := map[string]int{}
		for range Kinds {
			kinds[in.draw(none).kind]++
		}
		for _, k := range Kinds {
			if kinds[k] != 1 {
				t.Errorf("deck %d: %s drawn %d times, want 1 (%v)", deck, k, kinds[k], kinds)
			}
		}
	}
	// Kafka recovers while its kinds come up: they wait in the deck.
	kafka := func(c string) bool { return c == "kafka" }
	var dealt []string
	for range len(Kinds) - 2 {
		f := in.draw(kafka)
		if f == nil || f.component() == "kafka" {
			t.Fatalf("drew %+v while Kafka recovers", f)
		}
		dealt = append(dealt, f.kind)
	}
	for range 2 {
		dealt = append(dealt, in.draw(none).kind)
	}
	slices.Sort(dealt)
	if want := slices.Sorted(slices.Values(Kinds)); !slices.Equal(dealt, want) {
		t.Errorf("one deck dealt around a recovering Kafka: %v, want every kind once: %v", dealt, want)
	}
}

// TestGapsHoldTheFaults: the schedule has exactly the faults the verdict
// wants, within the duration, none bunched closer than about a third of
// the mean gap.
func TestGapsHoldTheFaults(t *testing.T) {
	for _, n := range []int{10, 50, 200} {
		rng := rand.New(rand.NewPCG(uint64(n), 9))
		total := 30 * time.Minute
		g := gaps(rng, n, total)
		if len(g) != n+1 {
			t.Fatalf("n=%d: %d gaps, want %d", n, len(g), n+1)
		}
		var sum time.Duration
		mean := total / time.Duration(n+1)
		for i, d := range g {
			sum += d
			if d < mean/3 || d > 3*mean {
				t.Errorf("n=%d: gap %d is %s, mean %s", n, i, d, mean)
			}
		}
		if sum != total {
			t.Errorf("n=%d: gaps add up to %s, want %s", n, sum, total)
		}
	}
}
