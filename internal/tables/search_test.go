package tables

import (
	"strings"
	"testing"
)

func TestSearchConfig(t *testing.T) {
	for _, c := range []struct {
		name, search, err string
	}{
		{"all columns", `{"time_column":"created_at","title_column":"title","workspace_column":"workspace_id"}`, ""},
		{"time only", `{"time_column":"updated_at"}`, ""},
		{"missing time", `{"title_column":"title"}`, `time_column "" is not a plain identifier`},
		{"hostile title", `{"time_column":"t","title_column":"title) OR 1=1 --"}`, "title_column"},
		{"hostile workspace", `{"time_column":"t","workspace_column":"a b"}`, "workspace_column"},
		{"unknown field", `{"time_column":"t","body_column":"b"}`, "unknown field"},
	} {
		cfg, err := Parse([]byte(`{"tables":[{"name":"documents","id_column":"id","id_layout":"seed000","search":` + c.search + `}]}`))
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err == "":
			if tbl, ok := cfg.ByName("documents"); !ok || tbl.Search == nil || tbl.Search.TimeColumn == "" {
				t.Errorf("%s: search section lost: %+v", c.name, tbl)
			}
		case err == nil || !strings.Contains(err.Error(), c.err):
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.err)
		}
	}
	cfg, err := Parse([]byte(`{"tables":[{"name":"documents","id_column":"id","id_layout":"seed000"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if tbl, _ := cfg.ByName("documents"); tbl.Search != nil {
		t.Error("search section without one configured")
	}
}
