package reader

import "testing"

func TestDecideStart(t *testing.T) {
	done := &readerState{SnapshotDone: true, Confirmed: 100}
	inProgress := &readerState{ConsistentPoint: 100, Snapshot: &snapshotState{}}
	for _, c := range []struct {
		name   string
		slot   slotInfo
		stored *readerState
		want   startAction
	}{
		{"fresh", slotInfo{}, nil, actionCreate},
		{"fresh with stale state", slotInfo{}, done, actionCreate},
		{"fresh with stale snapshot progress", slotInfo{}, inProgress, actionCreate},
		{"lost WAL", slotInfo{exists: true, walStatus: "lost", confirmed: 200}, done, actionRecreate},
		{"lost WAL mid-snapshot", slotInfo{exists: true, walStatus: "lost", confirmed: 100}, inProgress, actionRecreate},
		{"no state", slotInfo{exists: true, confirmed: 200}, nil, actionRecreate},
		{"killed while creating the slot", slotInfo{exists: true, confirmed: 100}, &readerState{}, actionRecreate},
		{"old-format interrupted snapshot", slotInfo{exists: true, confirmed: 200}, &readerState{Confirmed: 100}, actionRecreate},
		{"consistent point without a plan", slotInfo{exists: true, confirmed: 100}, &readerState{ConsistentPoint: 100}, actionRecreate},
		{"interrupted snapshot, slot at its consistent point", slotInfo{exists: true, confirmed: 100, walStatus: "reserved"}, inProgress, actionResumeSnapshot},
		{"interrupted snapshot, slot confirmed past it", slotInfo{exists: true, confirmed: 150}, inProgress, actionRecreate},
		{"interrupted snapshot, slot recreated behind", slotInfo{exists: true, confirmed: 50}, inProgress, actionRecreate},
		{"slot went backwards, no timeline recorded", slotInfo{exists: true, confirmed: 50, timeline: 1}, done, actionRecreate},
		{"slot went backwards in a crash (same timeline)", slotInfo{exists: true, confirmed: 50, timeline: 1},
			&readerState{SnapshotDone: true, Confirmed: 100, Timeline: 1}, actionResume},
		{"slot went backwards on a new timeline (a restore)", slotInfo{exists: true, confirmed: 50, timeline: 2},
			&readerState{SnapshotDone: true, Confirmed: 100, Timeline: 1}, actionRecreate},
		{"slot ahead of state", slotInfo{exists: true, confirmed: 300, walStatus: "reserved"}, done, actionResume},
		{"slot equal to state", slotInfo{exists: true, confirmed: 100}, done, actionResume},
	} {
		got, why := decideStart(c.slot, c.stored)
		if got != c.want || why == "" {
			t.Errorf("%s: got %v (%q), want %v", c.name, got, why, c.want)
		}
	}
}

func TestStartEpoch(t *testing.T) {
	done := &readerState{SnapshotDone: true, Epoch: 2}
	cases := []struct {
		action startAction
		stored *readerState
		want   uint16
	}{
		{actionCreate, nil, 0},              // first start
		{actionResume, done, 2},             // continuing keeps the epoch
		{actionResumeSnapshot, done, 2},     // so does a resumed copy
		{actionCreate, done, 3},             // slot dropped, state kept: changes lost
		{actionRecreate, done, 3},           // slot lost or behind
		{actionRecreate, nil, 1},            // a slot without state: newer than an unknown first copy
		{actionRecreate, &readerState{}, 1}, // first copy never finished
	}
	for _, c := range cases {
		if got := startEpoch(c.action, c.stored); got != c.want {
			t.Errorf("startEpoch(%v, %+v) = %d, want %d", c.action, c.stored, got, c.want)
		}
	}
}
