package loader

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/tables"
)

// TestPreaggRefusesCompositeRevenueTable: a revenue table identified by
// several columns gets no pre-aggregator and no marks, said once at start;
// the API then answers with the live query.
func TestPreaggRefusesCompositeRevenueTable(t *testing.T) {
	for _, c := range []struct {
		table string
		off   bool
	}{
		{`{"name":"lines","id_columns":["tenant_id","line_no"],"id_layout":"key"}`, true},
		{`{"name":"lines","id_column":"id","id_layout":"serial"}`, false},
	} {
		tc, err := tables.Parse([]byte(`{"tables":[` + c.table + `],
			"revenue":{"table":"lines","amount_column":"amount","currency":"EUR","time_column":"at"}}`))
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{Tables: tc, RevenueAggregator: true, PreaggBlockBits: 16}
		if got := preaggRefused(cfg) != ""; got != c.off {
			t.Errorf("%s: refused %v, want %v", c.table, got, c.off)
		}
		if !c.off {
			continue
		}
		var logs bytes.Buffer
		if agg := newAggregator(cfg, nil, slog.New(slog.NewTextHandler(&logs, nil)), prometheus.NewRegistry()); agg != nil {
			t.Errorf("%s: an aggregator", c.table)
		}
		if m := newMarks(cfg); m != nil {
			t.Errorf("%s: marks", c.table)
		}
		if n := strings.Count(logs.String(), "revenue pre-aggregator off"); n != 1 || !strings.Contains(logs.String(), "identified by several columns (tenant_id, line_no)") {
			t.Errorf("log: %s", logs.String())
		}
	}
}
