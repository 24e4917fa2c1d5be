package tables

import (
	"strings"
	"testing"
)

// TestColumnTypes: a table's column_types reach the loader by table name;
// a type Tributary does not store, or a column that is not an identifier,
// is refused before anything connects, naming the table and column.
func TestColumnTypes(t *testing.T) {
	c, err := Parse([]byte(`{"tables":[{"name":"rates","id_column":"id","id_layout":"serial",
		"column_types":{"rate":"Decimal(38, 12)","shape":"String","q":"Decimal(10,0)"}},
		{"name":"plain","id_column":"id","id_layout":"serial"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	got := c.ColumnTypes()
	if len(got) != 1 || got["rates"]["rate"] != "Decimal(38, 12)" || got["rates"]["shape"] != "String" || got["rates"]["q"] != "Decimal(10,0)" {
		t.Fatalf("ColumnTypes() = %v", got)
	}
	_, err = Parse([]byte(`{"tables":[{"name":"rates","id_column":"id","id_layout":"serial",
		"column_types":{"rate":"Float64","bad name":"String","x":"Decimal(38)"}}]}`))
	for _, want := range []string{
		`table rates: column_types: rate: "Float64" is not "String" or "Decimal(P, S)"`,
		`table rates: column_types: column "bad name" is not a plain identifier`,
		`table rates: column_types: x: "Decimal(38)" is not "String" or "Decimal(P, S)"`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not say %s", err, want)
		}
	}
}
