package loader

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/envelope"
)

func TestCommitPoints(t *testing.T) {
	recs := []*kgo.Record{
		{Topic: "a", Partition: 0, Offset: 5, Value: []byte("x")},
		{Topic: "a", Partition: 1, Offset: 2},
		{Topic: "a", Partition: 0, Offset: 7},
		{Topic: "b", Partition: 0, Offset: 1},
		{Topic: "a", Partition: 0, Offset: 6},
		{Topic: "a", Partition: 1, Offset: 1, LeaderEpoch: 3}, // a newer epoch wins, as in CommitRecords
	}
	got := commitPoints(recs)
	want := map[string]int64{"a/0": 7, "a/1": 1, "b/0": 1}
	if len(got) != len(want) {
		t.Fatalf("%d commit points, want %d: %+v", len(got), len(want), got)
	}
	for _, r := range got {
		k := r.Topic + "/" + string(rune('0'+r.Partition))
		if w, ok := want[k]; !ok || r.Offset != w {
			t.Errorf("%s: offset %d, want %d", k, r.Offset, w)
		}
		if r.Value != nil || r.Key != nil {
			t.Errorf("%s: keeps the record's bytes", k)
		}
	}
}

func TestAll(t *testing.T) {
	errA, errB := errors.New("a"), errors.New("b")
	var running, peak atomic.Int32
	slow := func(err error) func() error {
		return func() error {
			n := running.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(20 * time.Millisecond)
			running.Add(-1)
			return err
		}
	}
	if err := all([]func() error{slow(nil), slow(errB), slow(errA)}); !errors.Is(err, errB) {
		t.Errorf("all = %v, want the first error by index (b)", err)
	}
	if peak.Load() < 2 {
		t.Errorf("at most %d ran at once, want them concurrent", peak.Load())
	}
	if err := all(nil); err != nil {
		t.Errorf("all(nil) = %v", err)
	}
}

func TestCuts(t *testing.T) {
	ins := decodeResult{ev: &envelope.Event{Op: envelope.OpInsert}}
	for _, c := range []struct {
		batch []decodeResult
		want  bool
	}{
		{[]decodeResult{ins, {err: errors.New("bad")}}, false},
		{[]decodeResult{ins, {ev: &envelope.Event{Op: envelope.OpTruncate}}}, true},
		{[]decodeResult{{ev: &envelope.Event{Op: envelope.OpSnapshotEnd}}}, true},
	} {
		if got := cuts(c.batch); got != c.want {
			t.Errorf("cuts(%+v) = %v, want %v", c.batch, got, c.want)
		}
	}
}

// TestEarly: early runs its function at once, before anyone waits for it
// (a batch's watermarks are written beside the previous batch's tail, not
// after it), and the wait returns its error, as often as it is called.
func TestEarly(t *testing.T) {
	if early(nil) != nil {
		t.Fatal("early(nil) is not nil: a batch without watermarks would wait for nothing")
	}
	started, release := make(chan struct{}), make(chan struct{})
	errW := errors.New("watermarks")
	wait := early(func() error {
		close(started)
		<-release
		return errW
	})
	select {
	case <-started: // before wait is called
	case <-time.After(time.Minute):
		t.Fatal("early did not start its function before the wait")
	}
	close(release)
	for range 2 {
		if err := wait(); !errors.Is(err, errW) {
			t.Fatalf("wait = %v, want the function's error", err)
		}
	}
}
