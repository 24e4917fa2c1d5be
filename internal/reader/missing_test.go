package reader

import (
	"maps"
	"testing"
)

func TestMergeMissing(t *testing.T) {
	s := func(v string) *string { return &v }
	for _, tc := range []struct {
		name    string
		columns []string
		catalog map[string]*string
		known   map[string]string
		want    map[string]string
	}{
		{"from the catalog", []string{"id", "priority", "status"},
			map[string]*string{"id": nil, "priority": s("5"), "status": s("new")}, nil,
			map[string]string{"priority": "5", "status": "new"}},
		{"renamed since: the earlier value", []string{"id", "status"},
			map[string]*string{"id": nil, "state": s("new")}, map[string]string{"status": "new"},
			map[string]string{"status": "new"}},
		{"renamed since, never known: none", []string{"id", "status"},
			map[string]*string{"id": nil, "state": s("new")}, nil,
			map[string]string{}},
		{"the catalog wins while the column is there", []string{"id", "status"},
			map[string]*string{"id": nil, "status": nil}, map[string]string{"status": "new"},
			map[string]string{}},
		{"the new name from the catalog", []string{"id", "state"},
			map[string]*string{"id": nil, "state": s("new")}, map[string]string{"status": "new"},
			map[string]string{"state": "new"}},
		{"empty string is a value", []string{"note"},
			map[string]*string{"note": s("")}, nil,
			map[string]string{"note": ""}},
	} {
		if got := mergeMissing(tc.columns, tc.catalog, tc.known); !maps.Equal(got, tc.want) {
			t.Errorf("%s: mergeMissing = %v, want %v", tc.name, got, tc.want)
		}
	}
}
