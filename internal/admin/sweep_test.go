package admin

import (
	"errors"
	"strings"
	"testing"

	"github.com/tributary/tributary/internal/reader"
	"github.com/tributary/tributary/internal/tables"
)

func TestSweepOf(t *testing.T) {
	tbl := tables.Table{Schema: "public", Name: "docs", IDColumns: []string{"id"}, Topic: "t.docs"}
	done := &reader.Resnapshot{ResnapshotRequest: reader.ResnapshotRequest{ID: "a", Table: "docs", Where: "w = 1"},
		Phase: reader.PhaseDone, Epoch: 3, SwitchAt: 0x100}
	if sw, err := SweepOf(tbl, 2, done, 4); err != nil || sw.Epoch != 3 || sw.SwitchAt != 0x100 || sw.Shard != 2 || sw.Partitions != 4 {
		t.Fatalf("a done resnapshot: %+v, %v", sw, err)
	}
	failed := *done
	failed.Phase, failed.Error = reader.PhaseFailed, "connection lost"
	other := *done
	other.Table = "invoices"
	for name, c := range map[string]struct {
		a    *reader.Resnapshot
		want string
	}{
		"none":        {nil, "no finished resnapshot"},
		"other table": {&other, "copied table invoices, not docs"},
		"failed":      {&failed, "ended failed (connection lost)"},
	} {
		_, err := SweepOf(tbl, 2, c.a, 4)
		if !errors.Is(err, ErrResnapshotRefused) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: want refused with %q, got %v", name, c.want, err)
		}
	}
}
