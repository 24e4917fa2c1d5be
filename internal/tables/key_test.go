package tables

import (
	"slices"
	"strings"
	"testing"
)

func TestKeyConfig(t *testing.T) {
	cfg, err := Parse([]byte(`{"tables":[
		{"name":"lines","id_columns":["tenant_id","line_no"],"id_layout":"key"},
		{"name":"docs","id_column":"id","id_layout":"seed000"},
		{"name":"one","id_columns":["id"],"id_layout":"serial"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	// Validate again, as a caller changing a validated copy does: the
	// same answer.
	if err := cfg.Validate(); err != nil {
		t.Fatalf("second Validate: %v", err)
	}
	lines, _ := cfg.ByName("lines")
	if !lines.Composite() || lines.IDColumn != "" || !slices.Equal(lines.Key(), []string{"tenant_id", "line_no"}) || lines.KeyForm() != "(tenant_id, line_no)" {
		t.Errorf("lines: composite %v, id_column %q, key %q", lines.Composite(), lines.IDColumn, lines.Key())
	}
	for _, name := range []string{"docs", "one"} {
		d, _ := cfg.ByName(name)
		if d.Composite() || d.IDColumn != "id" || !slices.Equal(d.IDColumns, []string{"id"}) {
			t.Errorf("%s: composite %v, id_column %q, id_columns %q", name, d.Composite(), d.IDColumn, d.IDColumns)
		}
	}
}

func TestKeyConfigRefused(t *testing.T) {
	cases := []struct{ table, want string }{
		{`"id_column":"id","id_columns":["id","x"],"id_layout":"key"`, "not both"},
		{`"id_layout":"serial"`, "id_column or id_columns is required"},
		{`"id_columns":["a","b"],"id_layout":"serial"`, `set id_layout to "key"`},
		{`"id_column":"id","id_layout":"key"`, `id_layout "key" is for tables identified by several columns`},
		{`"id_columns":["a","a"],"id_layout":"key"`, "names a twice"},
		{`"id_columns":["a","b c"],"id_layout":"key"`, `"b c" is not a plain identifier`},
		{`"id_columns":["a","b"],"id_layout":"key","exclude_columns":["b"]`, `exclude_columns cannot hold the id column "b"`},
		{`"id_columns":["a","b"],"id_layout":"key","columns":["a","c"]`, `columns must include the id column "b"`},
	}
	for _, c := range cases {
		_, err := Parse([]byte(`{"tables":[{"name":"t",` + c.table + `}]}`))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to contain %q", c.table, err, c.want)
		}
	}
}

func TestMovesRefuseCompositeTables(t *testing.T) {
	_, err := Parse([]byte(`{"tables":[
		{"name":"documents","id_columns":["tenant_id","doc_no"],"id_layout":"key"},
		{"name":"document_moves","id_column":"move_id","id_layout":"uuidv4"}],
		"moves":{"table":"document_moves","documents_table":"documents","document_column":"document_id","to_shard_column":"to_shard",
		"state_column":"state","started_column":"started_at"}}`))
	if err == nil || !strings.Contains(err.Error(), `moves: documents_table "documents" is identified by several columns (tenant_id, doc_no)`) {
		t.Errorf("error %v", err)
	}
}
