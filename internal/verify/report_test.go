package verify

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestReportText(t *testing.T) {
	r := &Report{
		API:       "http://127.0.0.1:8080",
		Positions: []Position{{0, "0/100", "0/100", true, true}, {1, "0/200", "", false, false}},
		Tables: []TableReport{{Table: "documents", Shards: []ShardReport{
			{Shard: 0, SourceRows: 10, ClickHouseRows: 10, Checked: 10},
			{Shard: 1, SourceRows: 200000, ClickHouseRows: 199999, Checked: 100000, Sampled: true},
		}}},
		Differences: []Difference{
			{Kind: KindCountMismatch, Table: "documents", Shard: 1, Source: "200000", API: "199999"},
			{Kind: KindWrongValue, Table: "documents", ID: "42", Shard: 0, Column: "title", Source: `"a"`, API: `"b"`},
		},
	}
	for _, d := range r.Differences {
		r.Mismatches.add(d.Kind)
	}
	r.Mismatches.add(KindLagging)
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, part := range []string{
		"verify: FAIL — 3 difference(s); 1 table(s), 100010 row(s) checked",
		"absent from the API",
		"100000 (sample)",
		"wrong value 1, count mismatch 1, lagging 1",
		"first 2 of 3 difference(s)",
		`wrong_value table documents id 42 shard 0 column title: source "a", api "b"`,
		"count_mismatch table documents shard 1: source 200000, api 199999",
	} {
		if !strings.Contains(out, part) {
			t.Errorf("report lacks %q:\n%s", part, out)
		}
	}

	r = &Report{Passed: true, API: "x"}
	b.Reset()
	r.WriteText(&b) //nolint:errcheck
	if !strings.HasPrefix(b.String(), "verify: PASS — 0 difference(s)") {
		t.Errorf("passing report: %s", b.String())
	}
}

// TestReportJSON pins the machine-readable field names.
func TestReportJSON(t *testing.T) {
	r := &Report{Passed: false, Differences: []Difference{{Kind: KindMissing, Table: "t", ID: "1", Shard: 0}}}
	r.Mismatches.add(KindMissing)
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"passed", "took_seconds", "positions", "tables", "mismatches", "differences", "rechecked"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON report lacks %q: %s", k, b)
		}
	}
	mm := m["mismatches"].(map[string]any)
	if mm["missing"] != float64(1) || mm["wrong_value"] != float64(0) {
		t.Errorf("mismatches = %v", mm)
	}
	d := m["differences"].([]any)[0].(map[string]any)
	if d["kind"] != "missing" || d["shard"] != float64(0) {
		t.Errorf("difference = %v (shard 0 must be present)", d)
	}
}
