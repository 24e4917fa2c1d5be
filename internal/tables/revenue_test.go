package tables

import (
	"strings"
	"testing"
)

func TestRevenueConfig(t *testing.T) {
	const tbls = `"tables":[{"name":"invoices","id_column":"id","id_layout":"seed000"},{"name":"orders","id_column":"id","id_layout":"serial"}]`
	for _, c := range []struct {
		name, revenue, err string
	}{
		{"demo", `{"table":"invoices","amount_column":"amount","currency_column":"currency","time_column":"issued_at",
			"status_column":"status","workspace_column":"workspace_id","count_statuses":["paid"],"refund_statuses":["refunded"]}`, ""},
		{"quickcart orders, one currency, every row counts", `{"table":"orders","amount_column":"total","currency":"USD","time_column":"placed_at"}`, ""},
		{"unknown table", `{"table":"nope","amount_column":"a","currency":"USD","time_column":"t"}`, `table "nope" is not a configured table`},
		{"missing amount", `{"table":"orders","currency":"USD","time_column":"t"}`, `amount_column "" is not a plain identifier`},
		{"missing time", `{"table":"orders","amount_column":"a","currency":"USD"}`, `time_column "" is not a plain identifier`},
		{"hostile column", `{"table":"orders","amount_column":"a); DROP TABLE x; --","currency":"USD","time_column":"t"}`, "amount_column"},
		{"hostile status column", `{"table":"orders","amount_column":"a","currency":"USD","time_column":"t","status_column":"s s","count_statuses":["x"]}`, "status_column"},
		{"no currency", `{"table":"orders","amount_column":"a","time_column":"t"}`, "set currency_column, or currency"},
		{"both currencies", `{"table":"orders","amount_column":"a","time_column":"t","currency":"USD","currency_column":"c"}`, "not both"},
		{"bad fixed currency", `{"table":"orders","amount_column":"a","time_column":"t","currency":"usd"}`, "ISO 4217"},
		{"statuses without column", `{"table":"orders","amount_column":"a","time_column":"t","currency":"USD","count_statuses":["paid"]}`, "need a status_column"},
		{"column without count statuses", `{"table":"orders","amount_column":"a","time_column":"t","currency":"USD","status_column":"s"}`, "count_statuses is required"},
		{"status in both lists", `{"table":"orders","amount_column":"a","time_column":"t","currency":"USD","status_column":"s",
			"count_statuses":["paid"],"refund_statuses":["paid"]}`, `status "paid" is listed twice (count_statuses and refund_statuses)`},
		{"empty status", `{"table":"orders","amount_column":"a","time_column":"t","currency":"USD","status_column":"s","count_statuses":[""]}`, "1 to 64 bytes"},
		{"unknown field", `{"table":"orders","amount_column":"a","time_column":"t","currency":"USD","amount":"x"}`, "unknown field"},
	} {
		cfg, err := Parse([]byte(`{` + tbls + `,"revenue":` + c.revenue + `}`))
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err == "":
			r, tbl, ok := cfg.RevenueTable()
			if !ok || r == nil || tbl.Name != r.Table {
				t.Errorf("%s: RevenueTable() = %v, %v, %v", c.name, r, tbl, ok)
			}
		case err == nil || !strings.Contains(err.Error(), c.err):
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.err)
		}
	}
	cfg, err := Parse([]byte(`{` + tbls + `}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := cfg.RevenueTable(); ok {
		t.Error("RevenueTable() without a revenue section")
	}
}

// TestDemoConfig: the demo's configuration parses and reports revenue over
// its invoices table.
func TestDemoConfig(t *testing.T) {
	cfg, err := Load("../../deploy/local/tables.json")
	if err != nil {
		t.Fatal(err)
	}
	if r, tbl, ok := cfg.RevenueTable(); !ok || tbl.Name != "invoices" || r.AmountColumn != "amount" {
		t.Fatalf("demo revenue config: %+v %+v %v", r, tbl, ok)
	}
}
