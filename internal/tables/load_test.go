package tables

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadBadInput: every mistake in a table config file is reported with
// the file, and where JSON is wrong with line:column, the field and the
// fix; the configuration's own problems with the table and field. All of
// them at once, unknown fields refused.
func TestLoadBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, data string
		want       []string
	}{
		{"cut off", "{\"tables\": [\n  {\"name\": \"documents\", \"id_column\": \"id\"",
			[]string{"bad.json:2:42: the file ends inside a JSON value (a closing } or ] or a quote is missing, or the file was cut off)"}},
		{"trailing comma", "{\"tables\": [\n  {\"name\": \"documents\", \"id_column\": \"id\", \"id_layout\": \"seed000\",}\n]}",
			[]string{"bad.json:2:67: invalid character '}'", "JSON allows no comma after the last field"}},
		{"unknown table field", "{\"tables\": [\n  {\"name\": \"documents\", \"id_column\": \"id\", \"id_layout\": \"seed000\",\n   \"shardkey\": \"workspace_id\"}]}",
			[]string{`bad.json:3:4: tables[0]: unknown field "shardkey"`, "known fields here: column_types, columns, exclude_columns, id_column, id_columns, id_layout, name, row_filter, schema, search, shard_key, topic"}},
		{"unknown revenue field and top-level field", `{"tables": [{"name": "inv", "id_column": "id", "id_layout": "seed000"}],
 "revenue": {"table": "inv", "amount": "amount"}, "topic_prefx": "x."}`,
			[]string{`bad.json:2:30: revenue: unknown field "amount"`, `bad.json:2:51: the top level: unknown field "topic_prefx"`}},
		{"wrong type", `{"tables": [{"name": "documents", "id_column": 7, "id_layout": "seed000"}]}`,
			[]string{"bad.json:1:48: tables.id_column: a JSON number where a string is expected"}},
		{"no tables", `{"tables": []}`, []string{"bad.json: no tables configured"}},
		{"wrong layout", `{"tables": [{"name": "documents", "id_column": "id", "id_layout": "seed0000"}]}`,
			[]string{`bad.json: table documents: id_layout: layout "seed0000" (known: seed000, quickcart`}},
		{"layout missing and a bad name, at once", `{"tables": [{"name": "documents", "id_column": "id"}, {"name": "in voices", "id_column": "id", "id_layout": "serial"}]}`,
			[]string{"bad.json: table documents: id_layout is required (one of seed000", `bad.json: table 1: name "in voices" is not a plain identifier`}},
		{"table twice", `{"tables": [{"name": "d", "id_column": "id", "id_layout": "serial"}, {"name": "d", "id_column": "id", "id_layout": "serial"}]}`,
			[]string{"bad.json: table d: configured twice"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, "bad.json")
			if err := os.WriteFile(path, []byte(c.data), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path)
			if err == nil {
				t.Fatalf("accepted %s", c.data)
			}
			msg := strings.ReplaceAll(err.Error(), path, "bad.json")
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error\n%s\ndoes not contain %q", msg, w)
				}
			}
			for _, line := range strings.Split(msg, "\n") {
				if !strings.HasPrefix(line, "bad.json") {
					t.Errorf("error line %q does not name the file", line)
				}
			}
		})
	}
	if _, err := Load(filepath.Join(dir, "none.json")); err == nil || !strings.Contains(err.Error(), "none.json") {
		t.Errorf("Load of a missing file: %v", err)
	}
}

// TestLoadDemo: the demo's table config loads.
func TestLoadDemo(t *testing.T) {
	c, err := Load("../../deploy/local/tables.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Tables) == 0 || c.TopicPrefix == "" {
		t.Fatalf("loaded %+v", c)
	}
}
