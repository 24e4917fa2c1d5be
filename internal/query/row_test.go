package query

import (
	"strings"
	"testing"
)

// TestPlanRow: the by-id read is FINAL, with PREWHERE on the id column
// alone (exact: every version of a row shares its id) and the tombstone
// filter in a plain WHERE, after the replacing merge.
func TestPlanRow(t *testing.T) {
	sql := planRow("db", "documents", "id", "")
	want := "SELECT * FROM `db`.`documents` FINAL PREWHERE `id` = ? WHERE _deleted = 0 ORDER BY _shard"
	if sql != want {
		t.Fatalf("planRow:\n got %s\nwant %s", sql, want)
	}
	pre := sql[strings.Index(sql, "PREWHERE"):strings.Index(sql, " WHERE _deleted")]
	if strings.Contains(pre, "_deleted") || strings.Count(pre, "?") != 1 || strings.Contains(pre, " AND ") {
		t.Errorf("PREWHERE must test the id column only: %q", pre)
	}
	if got := planRow("db", "t", "a`b", ""); !strings.Contains(got, "PREWHERE `a\\`b` = ?") {
		t.Errorf("id column not quoted: %s", got)
	}
	for _, k := range []string{"use_uncompressed_cache", "max_threads", "max_block_size"} {
		if _, ok := pointLookup[k]; !ok {
			t.Errorf("pointLookup lacks %s", k)
		}
	}
	if v, ok := pointLookup["optimize_move_to_prewhere"]; !ok || v != 0 {
		t.Errorf("pointLookup must keep optimize_move_to_prewhere = 0, has %v", v)
	}
}
