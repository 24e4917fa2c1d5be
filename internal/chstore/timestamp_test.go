package chstore

import (
	"testing"
	"time"
)

var timestampSeeds = []string{
	"2026-11-30 12:00:00.123456+00", "2026-11-30 12:00:00+00", "2026-11-30 12:00:00", "2026-11-30 12:00:00.5+01",
	"2026-11-30 12:00:00.123456-07:30", "1900-02-28 23:59:59.999999+05:30:15", "2000-02-29 00:00:00+14",
	"2001-02-29 00:00:00+00", "2026-13-01 00:00:00", "2026-00-10 00:00:00", "2026-04-31 00:00:00", "2026-11-30 24:00:00",
	"2026-11-30 12:60:00", "2026-11-30 12:00:60", "2026-11-30 12:00:00.", "2026-11-30 12:00:00.1234567891+00",
	"2026-11-30 12:00:00.123456789", "2026-11-30 12:00:00+24", "2026-11-30 12:00:00+01:60", "2026-11-30 12:00:00+1",
	"2026-11-30 12:00:00 BC", "2026-11-30 12:00:00+00 BC", "0000-01-01 00:00:00+00", "9999-12-31 23:59:59.999999-12",
	"10000-01-01 00:00:00+00", "2026-11-30T12:00:00Z", "-026-11-30 12:00:00", "2026-1-30 12:00:00", "2026-11-30 12:00:00+0100",
	"2026-11-30 12:00:00.12345678912", "2026-11-30 12:00:00-00:00", "infinity", "",
}

// TestISOTimestampMatchesLayouts: the fast path answers only where
// time.Parse answers, with the same instant.
func TestISOTimestampMatchesLayouts(t *testing.T) {
	for _, s := range timestampSeeds {
		checkTimestamp(t, s)
	}
	// What PostgreSQL prints takes the fast path.
	for _, s := range []string{"2026-11-30 12:00:00.123456+00", "2026-11-30 12:00:00+00", "2026-11-30 12:00:00.5-07:30",
		"2026-11-30 12:00:00", "1900-02-28 23:59:59.999999+05:30:15"} {
		if _, ok := isoTimestamp(s); !ok {
			t.Errorf("%q: not taken by the fast path", s)
		}
	}
}

func FuzzISOTimestamp(f *testing.F) {
	for _, s := range timestampSeeds {
		f.Add(s)
	}
	f.Fuzz(checkTimestamp)
}

func checkTimestamp(t *testing.T, s string) {
	got, ok := isoTimestamp(s)
	want, err := parseDateTimeLayouts(s)
	if !ok {
		return
	}
	if err != nil {
		t.Fatalf("%q: fast path accepted (%v), time.Parse refuses: %v", s, got, err)
	}
	if got != want || got.Location() != time.UTC {
		t.Fatalf("%q: fast path %v, time.Parse %v", s, got, want)
	}
}
