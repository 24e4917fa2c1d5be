package query

import (
	"testing"
	"time"
)

func TestBehindReason(t *testing.T) {
	now := time.Date(2026, 12, 2, 19, 0, 0, 0, time.UTC)
	sinceEpoch := time.Duration(now.Unix()) * time.Second
	for _, c := range []struct {
		delay    time.Duration
		readonly bool
		want     string
	}{
		{0, false, ""},
		{ReplicaBehind, false, ""},
		{ReplicaBehind + time.Second, false, "its replication is 11s behind"},
		{sinceEpoch, false, "its replication has not run since it started"},
		{0, true, "its replicated tables are read-only (ZooKeeper lost)"},
	} {
		if got := behindReason(c.delay, c.readonly, now); got != c.want {
			t.Errorf("behindReason(%s, %v) = %q, want %q", c.delay, c.readonly, got, c.want)
		}
	}
}
