package admin

import (
	"strings"
	"testing"
	"time"

	"github.com/tributary/tributary/internal/reader"
)

func TestProgressLine(t *testing.T) {
	started := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		a    reader.Resnapshot
		rate float64
		want []string
		not  []string
	}{
		{"requested", reader.Resnapshot{ResnapshotRequest: reader.ResnapshotRequest{ID: "ab", Table: "docs"}, Phase: reader.PhaseRequested},
			0, []string{"resnapshot ab shard 3 table docs (every row): requested, 0 rows"}, []string{"ETA", "%"}},
		{"predicate, no plan yet", reader.Resnapshot{ResnapshotRequest: reader.ResnapshotRequest{ID: "cd", Table: "docs", Where: "workspace_id = 7"}, Phase: reader.PhaseCopying},
			10, []string{"(WHERE workspace_id = 7): copying, 0 rows"}, []string{"ETA"}},
		{"failed", reader.Resnapshot{ResnapshotRequest: reader.ResnapshotRequest{ID: "ef", Table: "docs"}, Phase: reader.PhaseFailed,
			Started: started, Finished: started.Add(1500 * time.Millisecond), Error: "connection lost"},
			0, []string{"failed, 0 rows, took 1.5s: connection lost"}, nil},
		{"sweeping, retried", reader.Resnapshot{ResnapshotRequest: reader.ResnapshotRequest{ID: "gh", Table: "docs", Where: "w = 1"}, Phase: reader.PhaseSweeping,
			Sweep: &reader.SweepProgress{Checked: 120, Deleted: 3, Attempts: 2, Error: "clickhouse down"}},
			0, []string{"sweeping", "sweep: 120 rows checked, 3 deleted (attempt 2)", "retried: clickhouse down"}, []string{"ETA"}},
		{"sweep waiting", reader.Resnapshot{ResnapshotRequest: reader.ResnapshotRequest{ID: "ij", Table: "docs", Where: "w = 1"}, Phase: reader.PhaseSweeping,
			Sweep: &reader.SweepProgress{Waiting: true, Attempts: 1}},
			0, []string{"sweep waiting for the loader"}, []string{"attempt"}},
		{"swept", reader.Resnapshot{ResnapshotRequest: reader.ResnapshotRequest{ID: "kl", Table: "docs", Where: "w = 1"}, Phase: reader.PhaseDone,
			Sweep: &reader.SweepProgress{Checked: 9, Deleted: 1, Attempts: 1, Error: "old"}},
			0, []string{"done", "sweep: 9 rows checked, 1 deleted"}, []string{"retried", "attempt"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := ProgressLine(3, &c.a, c.rate)
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q lacks %q", got, w)
				}
			}
			for _, n := range c.not {
				if strings.Contains(got, n) {
					t.Errorf("%q has %q", got, n)
				}
			}
		})
	}
}
