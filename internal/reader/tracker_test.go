package reader

import (
	"errors"
	"testing"
	"time"
)

func TestTrackerConfirmsOnlyAckedPrefix(t *testing.T) {
	tr := newTracker(100)
	a := tr.begin()
	tr.add(a)
	tr.add(a)
	tr.seal(a, 200, 1)
	b := tr.begin()
	tr.add(b)
	tr.seal(b, 300, 2)

	check := func(want uint64) {
		t.Helper()
		got, _, _ := tr.position()
		if uint64(got) != want {
			t.Fatalf("confirmed = %d, want %d", got, want)
		}
	}
	check(100)
	tr.ack(b, nil) // later txn acked first: must not confirm past a
	check(100)
	tr.ack(a, nil)
	check(100)
	tr.ack(a, nil)
	check(300)

	// idle never moves while something is in flight, and never backwards.
	c := tr.begin()
	tr.idle(1000, time.Now())
	check(300)
	tr.seal(c, 400, 3) // empty transaction
	check(400)
	tr.idle(350, time.Now())
	check(400)
	tr.idle(1000, time.Now())
	check(1000)
}

func TestTrackerOpenTransactionBlocks(t *testing.T) {
	tr := newTracker(10)
	a := tr.begin()
	tr.add(a)
	tr.ack(a, nil)
	if got, _, _ := tr.position(); got != 10 {
		t.Fatalf("confirmed %d before commit", got)
	}
	tr.seal(a, 20, 0)
	if got, _, _ := tr.position(); got != 20 {
		t.Fatalf("confirmed = %d, want 20", got)
	}
}

func TestTrackerKeepsFirstError(t *testing.T) {
	tr := newTracker(10)
	a := tr.begin()
	tr.add(a)
	tr.add(a)
	first := errors.New("first")
	tr.ack(a, first)
	tr.ack(a, errors.New("second"))
	tr.seal(a, 20, 0)
	got, _, err := tr.position()
	if !errors.Is(err, first) {
		t.Fatalf("err = %v, want first", err)
	}
	if got != 10 {
		t.Fatalf("confirmed = %d after a failed produce, want 10", got)
	}
}

// TestTrackerSignalsAdvances checks that the watermark goroutine is woken
// by every advance of the confirmable position — the last ack of a sealed
// transaction, a seal after its acks, an idle shard's keepalive — and not
// by records or seals that leave it where it was; a burst of advances is
// one pending signal.
func TestTrackerSignalsAdvances(t *testing.T) {
	tr := newTracker(100)
	signalled := func() bool {
		select {
		case <-tr.advanced():
			return true
		default:
			return false
		}
	}
	a := tr.begin()
	tr.add(a)
	tr.seal(a, 200, 1)
	if signalled() {
		t.Fatal("signal before Kafka acknowledged the transaction's record")
	}
	tr.ack(a, nil)
	if !signalled() {
		t.Fatal("no signal after the transaction's last ack")
	}
	b := tr.begin()
	tr.add(b)
	tr.ack(b, nil)
	if signalled() {
		t.Fatal("signal for an acked but unsealed transaction")
	}
	tr.seal(b, 300, 2)
	if !signalled() {
		t.Fatal("no signal after sealing an acked transaction")
	}
	tr.idle(400, time.Now())
	tr.idle(500, time.Now())
	if !signalled() {
		t.Fatal("no signal after an idle advance")
	}
	if signalled() {
		t.Fatal("two pending signals for one burst of advances")
	}
	tr.idle(450, time.Now()) // behind: no advance
	if signalled() {
		t.Fatal("signal without an advance")
	}
}

// TestRoundWait checks the watermark coalescing: a round right after the
// previous one waits out the gap, one after a quiet spell does not wait.
func TestRoundWait(t *testing.T) {
	for _, tc := range []struct{ since, gap, want time.Duration }{
		{0, 25 * time.Millisecond, 25 * time.Millisecond},
		{10 * time.Millisecond, 25 * time.Millisecond, 15 * time.Millisecond},
		{25 * time.Millisecond, 25 * time.Millisecond, 0},
		{time.Hour, 25 * time.Millisecond, 0},
		{0, 0, 0},
	} {
		if got := roundWait(tc.since, tc.gap); got != tc.want {
			t.Errorf("roundWait(%s, %s) = %s, want %s", tc.since, tc.gap, got, tc.want)
		}
	}
}

// TestTrackerTimesAcknowledgedCommits: a transaction's commit time is
// reported once, when it and everything before it are acknowledged — not
// when its own records are, and never for an empty transaction.
func TestTrackerTimesAcknowledgedCommits(t *testing.T) {
	tr := newTracker(100)
	var got []int64
	tr.acked = func(us int64) { got = append(got, us) }
	a := tr.begin()
	tr.add(a)
	tr.seal(a, 200, 11)
	b := tr.begin()
	tr.add(b)
	tr.seal(b, 300, 22)
	empty := tr.begin()
	tr.seal(empty, 400, 33)
	tr.ack(b, nil)
	if len(got) != 0 {
		t.Fatalf("commits timed before the first transaction was acknowledged: %v", got)
	}
	tr.ack(a, nil)
	if len(got) != 2 || got[0] != 11 || got[1] != 22 {
		t.Fatalf("commits timed = %v, want [11 22] (the empty transaction left out)", got)
	}
	if pos, _, _ := tr.position(); pos != 400 {
		t.Fatalf("confirmed = %d, want 400", pos)
	}
}
