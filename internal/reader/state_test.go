package reader

import "testing"

func TestDecideStart(t *testing.T) {
	done := &readerState{SnapshotDone: true, Confirmed: 100}
	for _, c := range []struct {
		name   string
		slot   slotInfo
		stored *readerState
		want   startAction
	}{
		{"fresh", slotInfo{}, nil, actionCreate},
		{"fresh with stale state", slotInfo{}, done, actionCreate},
		{"lost WAL", slotInfo{exists: true, walStatus: "lost", confirmed: 200}, done, actionRecreate},
		{"no state", slotInfo{exists: true, confirmed: 200}, nil, actionRecreate},
		{"interrupted snapshot", slotInfo{exists: true, confirmed: 200}, &readerState{Confirmed: 100}, actionRecreate},
		{"slot went backwards", slotInfo{exists: true, confirmed: 50}, done, actionRecreate},
		{"slot ahead of state", slotInfo{exists: true, confirmed: 300, walStatus: "reserved"}, done, actionResume},
		{"slot equal to state", slotInfo{exists: true, confirmed: 100}, done, actionResume},
	} {
		got, why := decideStart(c.slot, c.stored)
		if got != c.want || why == "" {
			t.Errorf("%s: got %v (%q), want %v", c.name, got, why, c.want)
		}
	}
}
