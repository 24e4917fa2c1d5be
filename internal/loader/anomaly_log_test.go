package loader

import (
	"bytes"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tributary/tributary/internal/chstore"
)

// TestAnomalyLogSummarises: hundreds of serial collisions over half an
// hour make one line per serialSummaryEvery, not one per id; duplicates
// make one line per round that found some.
func TestAnomalyLogSummarises(t *testing.T) {
	var buf bytes.Buffer
	al := anomalyLog{log: slog.New(slog.NewTextHandler(&buf, nil))}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	total := 0
	for round := 0; round < 360; round++ { // every 5 s for 30 minutes
		var alerted []chstore.Anomaly
		for i := 0; i < 2; i++ {
			alerted = append(alerted, chstore.Anomaly{ID: strconv.Itoa(total), Kind: chstore.KindSerialCollision})
			total++
		}
		al.report(start.Add(time.Duration(round)*5*time.Second), "tickets", alerted, total)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d serial collisions over 30 minutes logged %d lines, want 3 (one per %s):\n%s", total, len(lines), serialSummaryEvery, buf.String())
	}
	for _, l := range lines {
		if !strings.Contains(l, "level=INFO") || !strings.Contains(l, "table=tickets") {
			t.Errorf("summary line %q: want an INFO line naming the table", l)
		}
	}
	if !strings.Contains(lines[1], "new=240") { // 120 rounds of 2 since the first line
		t.Errorf("second summary %q: want new=240", lines[1])
	}

	buf.Reset()
	var dups []chstore.Anomaly
	for i := 0; i < 50; i++ {
		dups = append(dups, chstore.Anomaly{ID: strconv.Itoa(i), Kind: chstore.KindDuplicate})
	}
	al.report(start, "documents", dups, 0)
	al.report(start.Add(5*time.Second), "documents", nil, 0)
	lines = strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "new=50") ||
		!strings.Contains(lines[0], "examples=\"[0 1 2 3 4]\"") {
		t.Errorf("50 duplicates in one round logged %q, want one WARN line with new=50 and five examples", buf.String())
	}
}
