package reader

import "testing"

func TestParseEpochMark(t *testing.T) {
	s := func(v string) *string { return &v }
	for _, tc := range []struct {
		comment *string
		want    epochMark
		err     bool
	}{
		{nil, epochMark{}, false},
		{s(""), epochMark{}, false},
		{s("tributary epoch=0 (the cdc-reader's snapshot epoch of this shard; keep it)"), epochMark{epoch: 0, recorded: true}, false},
		{s("tributary epoch=7"), epochMark{epoch: 7, recorded: true}, false},
		{s("tributary epoch=65535 (x)"), epochMark{epoch: 65535, recorded: true}, false},
		{s("owned by the billing team"), epochMark{foreign: true}, false},
		{s("tributary epoch=65536"), epochMark{}, true},
		{s("tributary epoch=-1"), epochMark{}, true},
		{s("tributary epoch=x"), epochMark{}, true},
	} {
		got, err := parseEpochMark(tc.comment)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("parseEpochMark(%v) = %+v, %v; want %+v, error %v", deref(tc.comment), got, err, tc.want, tc.err)
		}
	}
}

func deref(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}

func TestChooseEpoch(t *testing.T) {
	none := epochMark{}
	mark := func(e uint16) epochMark { return epochMark{epoch: e, recorded: true} }
	for _, tc := range []struct {
		name   string
		action startAction
		stored *readerState
		mark   epochMark
		want   uint16
		err    bool
	}{
		{"first start", actionCreate, nil, none, 0, false},
		{"first start, publication marked by a lost earlier run", actionCreate, nil, mark(0), 1, false},
		{"slot gone and state lost after two re-copies", actionCreate, nil, mark(2), 3, false},
		{"slot kept, state lost, no mark", actionRecreate, nil, none, 1, false},
		{"slot kept, state lost, mark 2", actionRecreate, nil, mark(2), 3, false},
		{"re-copy with state", actionRecreate, &readerState{Epoch: 2}, mark(2), 3, false},
		{"re-copy with state ahead of the mark", actionRecreate, &readerState{Epoch: 4}, mark(2), 5, false},
		{"re-copy with state behind the mark", actionRecreate, &readerState{Epoch: 1}, mark(4), 5, false},
		{"resume keeps the stored epoch", actionResume, &readerState{Epoch: 2, SnapshotDone: true}, mark(5), 2, false},
		{"resumed snapshot keeps the stored epoch", actionResumeSnapshot, &readerState{Epoch: 3}, mark(3), 3, false},
		{"foreign comment: as without a mark", actionRecreate, nil, epochMark{foreign: true}, 1, false},
		{"no epoch left", actionCreate, nil, mark(65535), 0, true},
	} {
		got, _, err := chooseEpoch(tc.action, tc.stored, tc.mark)
		if (err != nil) != tc.err || (!tc.err && got != tc.want) {
			t.Errorf("%s: chooseEpoch = %d, %v; want %d, error %v", tc.name, got, err, tc.want, tc.err)
		}
	}
}
