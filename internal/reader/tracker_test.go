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
