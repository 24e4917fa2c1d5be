package reader

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

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

func TestPickState(t *testing.T) {
	id := shardIdentity{SystemID: "7400000000000000001", Database: "app", Slot: "tributary_shard_3"}
	other := shardIdentity{SystemID: "7400000000000000002", Database: "app", Slot: "tributary_shard_3"}
	own := &readerState{Slot: id.Slot, Shard: 3, SystemID: id.SystemID, Database: id.Database, SnapshotDone: true, Confirmed: 100}
	legacy := &readerState{Slot: id.Slot, Shard: 3, SnapshotDone: true, Confirmed: 90}
	foreign := &readerState{Slot: id.Slot, Shard: 3, SystemID: other.SystemID, Database: "app", SnapshotDone: true, Confirmed: 500}
	for _, c := range []struct {
		name        string
		st          storedStates
		slotExists  bool
		want        *readerState
		wantMigrate bool
		wantErr     string
	}{
		{name: "first start", st: storedStates{}},
		{name: "own state", st: storedStates{own: own}, slotExists: true, want: own},
		{name: "own state wins over the old format", st: storedStates{own: own, legacy: legacy}, slotExists: true, want: own},
		{name: "old format, same shard: migrated", st: storedStates{legacy: legacy}, slotExists: true, want: legacy, wantMigrate: true},
		{name: "old format of another shard", st: storedStates{legacy: &readerState{Slot: id.Slot, Shard: 5}}, slotExists: true,
			wantErr: "stored by shard 5, and this reader is shard 3"},
		{name: "own key, other shard number", st: storedStates{own: &readerState{Slot: id.Slot, Shard: 4, SystemID: id.SystemID, Database: "app"}},
			wantErr: "stored by shard 4, and this reader is shard 3"},
		{name: "own key, other identity inside", st: storedStates{own: foreign}, wantErr: "names system 7400000000000000002"},
		{name: "another cluster's state, slot exists here", st: storedStates{others: map[string]*readerState{other.key(): foreign}}, slotExists: true,
			wantErr: "from system 7400000000000000002"},
		{name: "another cluster's state, no slot here: a first start", st: storedStates{others: map[string]*readerState{other.key(): foreign}}},
		{name: "another shard's state of the same slot name elsewhere", slotExists: true,
			st: storedStates{others: map[string]*readerState{other.key(): {Slot: id.Slot, Shard: 9, SystemID: other.SystemID, Database: "app"}}}},
	} {
		got, migrate, err := pickState(c.st, id, 3, c.slotExists)
		switch {
		case c.wantErr != "":
			if !errors.Is(err, ErrForeignState) || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%s: err %v, want ErrForeignState saying %q", c.name, err, c.wantErr)
			}
		case err != nil:
			t.Errorf("%s: %v", c.name, err)
		case got != c.want || migrate != c.wantMigrate:
			t.Errorf("%s: got %+v (migrate %v), want %+v (migrate %v)", c.name, got, migrate, c.want, c.wantMigrate)
		}
	}
}

// TestStateRecords: records are sorted by key into the reader's own, the
// old format's and other clusters'; the newest wins and a tombstone
// deletes, as compaction would.
func TestStateRecords(t *testing.T) {
	id := shardIdentity{SystemID: "1", Database: "app", Slot: "s1"}
	s := &stateStore{id: id}
	st := storedStates{others: map[string]*readerState{}}
	rec := func(key string, v *readerState) {
		var b []byte
		if v != nil {
			var err error
			if b, err = json.Marshal(v); err != nil {
				t.Fatal(err)
			}
		}
		s.note(&st, key, b)
	}
	rec("s1", &readerState{Slot: "s1", Shard: 3, Confirmed: 10}) // the old format
	rec("1/app/s1", &readerState{Slot: "s1", Shard: 3, SystemID: "1", Database: "app", Confirmed: 20})
	rec("1/app/s1", &readerState{Slot: "s1", Shard: 3, SystemID: "1", Database: "app", Confirmed: 30})
	rec("2/app/s1", &readerState{Slot: "s1", Shard: 3, SystemID: "2", Database: "app", Confirmed: 40})
	rec("2/app/s10", &readerState{Slot: "s10"}) // another slot
	rec("s10", &readerState{Slot: "s10"})
	s.note(&st, "garbage", []byte("{not json"))
	if st.own == nil || st.own.Confirmed != 30 {
		t.Errorf("own state %+v, want the newest (confirmed 30)", st.own)
	}
	if st.legacy == nil || st.legacy.Confirmed != 10 {
		t.Errorf("old-format state %+v, want confirmed 10", st.legacy)
	}
	if len(st.others) != 1 || st.others["2/app/s1"] == nil {
		t.Errorf("other clusters' states %v, want 2/app/s1 only", st.others)
	}
	rec("s1", nil) // migrated: the old key deleted
	rec("2/app/s1", nil)
	if st.legacy != nil || len(st.others) != 0 || st.own == nil {
		t.Errorf("after tombstones: legacy %+v, others %v, own %+v; want none, none, kept", st.legacy, st.others, st.own)
	}
	// An old-format record read back as it was written before identities.
	var old readerState
	if err := json.Unmarshal([]byte(`{"slot":"s1","shard":3,"snapshot_done":true,"confirmed":"0/16B3748","epoch":2,"timeline":1,"updated_at":"2026-11-30T10:00:00Z"}`), &old); err != nil {
		t.Fatalf("old-format record: %v", err)
	}
	if !old.SnapshotDone || old.Epoch != 2 || old.Confirmed == 0 || old.SystemID != "" {
		t.Errorf("old-format record read as %+v", old)
	}
}

// TestResnapshotsOf: the running and ended resnapshots of a state, from
// its lists, or from the single fields a reader that ran one at a time
// stored.
func TestResnapshotsOf(t *testing.T) {
	a := &Resnapshot{ResnapshotRequest: ResnapshotRequest{ID: "a", Table: "docs"}, Phase: PhaseCopying}
	b := &Resnapshot{ResnapshotRequest: ResnapshotRequest{ID: "b", Table: "invoices"}, Phase: PhaseSweeping}
	done := &Resnapshot{ResnapshotRequest: ResnapshotRequest{ID: "c", Table: "docs"}, Phase: PhaseDone}
	for name, c := range map[string]struct {
		st             readerState
		running, ended []string
	}{
		"lists":         {readerState{Resnapshots: []*Resnapshot{a, b}, EndedResnapshots: []*Resnapshot{done}, Resnapshot: b, LastResnapshot: done}, []string{"a", "b"}, []string{"c"}},
		"one at a time": {readerState{Resnapshot: a, LastResnapshot: done}, []string{"a"}, []string{"c"}},
		"none":          {readerState{}, nil, nil},
	} {
		running, ended := resnapshotsOf(&c.st)
		ids := func(rs []*Resnapshot) (out []string) {
			for _, r := range rs {
				out = append(out, r.ID)
			}
			return out
		}
		if got := ids(running); !slices.Equal(got, c.running) {
			t.Errorf("%s: running %v, want %v", name, got, c.running)
		}
		if got := ids(ended); !slices.Equal(got, c.ended) {
			t.Errorf("%s: ended %v, want %v", name, got, c.ended)
		}
	}
}
