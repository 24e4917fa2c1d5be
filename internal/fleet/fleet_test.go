package fleet

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// TestParseNumbering: sparse and 1-based fleets keep their numbers, sorted;
// nothing is renumbered from 0.
func TestParseNumbering(t *testing.T) {
	for _, c := range []struct {
		name, data string
		want       []int
	}{
		{"sparse", `{"shards": [{"shard": 17, "dsn_env": "C"}, {"shard": 1, "dsn_env": "A", "name": "eu-1"}, {"shard": 5, "dsn_env": "B"}]}`, []int{1, 5, 17}},
		{"one-based", `{"shards": [{"shard": 1, "dsn_env": "A"}, {"shard": 2, "dsn_env": "B"}, {"shard": 3, "dsn_env": "C"}]}`, []int{1, 2, 3}},
		{"zero-based", `{"shards": [{"shard": 0, "dsn_env": "A"}, {"shard": 1, "dsn_env": "B"}]}`, []int{0, 1}},
		{"largest", `{"shards": [{"shard": 8191, "dsn_env": "A"}]}`, []int{8191}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, err := Parse("fleet.json", []byte(c.data))
			if err != nil {
				t.Fatal(err)
			}
			if got := f.Numbers(); !slices.Equal(got, c.want) {
				t.Fatalf("numbers %v, want %v", got, c.want)
			}
			for _, n := range c.want {
				if s, ok := f.Shard(n); !ok || s.Number != n {
					t.Errorf("Shard(%d) = %+v, %v", n, s, ok)
				}
			}
			if _, ok := f.Shard(c.want[len(c.want)-1] + 1); ok {
				t.Error("Shard found a number the fleet does not have")
			}
		})
	}
}

// TestParseBadInput: each mistake is refused with the file and the field.
func TestParseBadInput(t *testing.T) {
	for _, c := range []struct {
		name, data string
		want       []string
	}{
		{"shard twice", `{"shards": [{"shard": 5, "dsn_env": "A"}, {"shard": 5, "dsn_env": "B"}]}`,
			[]string{"fleet.json:1:53: shards[1].shard: shard 5 is listed twice (also shards[0])"}},
		{"negative", `{"shards": [{"shard": -1, "dsn_env": "A"}]}`, []string{"fleet.json:1:23: shards[0].shard: shard number -1 is out of range 0..8191"}},
		{"too large", `{"shards": [{"shard": 8192, "dsn_env": "A"}]}`, []string{"shards[0].shard: shard number 8192 is out of range"}},
		{"number missing", `{"shards": [{"dsn_env": "A"}]}`, []string{"fleet.json:1:13: shards[0].shard: the shard number is missing"}},
		{"no DSN source", `{"shards": [{"shard": 1}]}`, []string{"fleet.json:1:13: shards[0]: dsn_env or dsn_file is required"}},
		{"both sources", `{"shards": [{"shard": 1, "dsn_env": "A", "dsn_file": "a.dsn"}]}`, []string{"shards[0].dsn_env: set dsn_env or dsn_file, not both"}},
		{"both reader sources", `{"shards": [{"shard": 1, "dsn_env": "A", "reader_dsn_env": "B", "reader_dsn_file": "b"}]}`,
			[]string{"shards[0].reader_dsn_env: set reader_dsn_env or reader_dsn_file, not both"}},
		{"bad variable name", `{"shards": [{"shard": 1, "dsn_env": "$A"}]}`, []string{`shards[0].dsn_env: "$A" is not an environment variable name`}},
		{"a DSN instead of a variable", `{"shards": [{"shard": 1, "dsn_env": "postgres://u:p@h/db"}]}`, []string{"is not an environment variable name"}},
		{"name twice", `{"shards": [{"shard": 1, "dsn_env": "A", "name": "x"}, {"shard": 2, "dsn_env": "B", "name": "x"}]}`,
			[]string{`shards[1].name: name "x" is used twice`}},
		{"unknown field", "{\"shards\": [{\"shard\": 1,\n \"dsn\": \"postgres://x\"}]}",
			[]string{`fleet.json:2:2: shards[0]: unknown field "dsn"`, "known fields here: dsn_env, dsn_file, name, reader_dsn_env, reader_dsn_file, shard"}},
		{"unknown top-level field", `{"shard": []}`, []string{`fleet.json:1:2: the top level: unknown field "shard"`}},
		{"no shards", `{"shards": []}`, []string{"fleet.json: shards: no shards listed"}},
		{"number as a string", `{"shards": [{"shard": "1", "dsn_env": "A"}]}`, []string{"fleet.json:1:23: shards.shard: a JSON string where an integer is expected"}},
		{"malformed", "{\"shards\": [{\"shard\": 1, \"dsn_env\": \"A\"}", []string{"fleet.json:1:41: the file ends inside a JSON value"}},
		{"every mistake at once", `{"shards": [{"shard": -3, "dsn_env": "A"}, {"shard": 2}]}`,
			[]string{"shards[0].shard: shard number -3", "shards[1]: dsn_env or dsn_file is required"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("fleet.json", []byte(c.data))
			if err == nil {
				t.Fatalf("accepted %s", c.data)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
		})
	}
}

// TestResolve: DSNs come from variables and files (relative to the fleet
// file); every missing one is reported, naming the shard and the variable,
// never a DSN; the reader falls back to the shard's DSN.
func TestResolve(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "s5.dsn"), []byte("postgres://five\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "fleet.json")
	data := `{"shards": [
		{"shard": 17, "dsn_env": "S17", "reader_dsn_env": "S17_REPL"},
		{"shard": 5, "dsn_file": "s5.dsn", "name": "eu"},
		{"shard": 1, "dsn_env": "S1"}]}`
	f, err := Parse(path, []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"S1": "postgres://one", "S17": "postgres://seventeen", "S17_REPL": "postgres://repl17"}
	eps, err := f.Resolve(env(vars))
	if err != nil {
		t.Fatal(err)
	}
	want := []Endpoint{{1, "", "postgres://one"}, {5, "eu", "postgres://five"}, {17, "", "postgres://seventeen"}}
	if !slices.Equal(eps, want) {
		t.Fatalf("endpoints %+v, want %+v", eps, want)
	}
	for n, w := range map[int]string{17: "postgres://repl17", 5: "postgres://five", 1: "postgres://one"} {
		if got, err := f.ReaderDSN(n, env(vars)); err != nil || got != w {
			t.Errorf("ReaderDSN(%d) = %q, %v; want %q", n, got, err, w)
		}
	}
	if _, err := f.ReaderDSN(2, env(vars)); err == nil || !strings.Contains(err.Error(), "shard 2 is not in the fleet (shards [1 5 17])") {
		t.Errorf("ReaderDSN of a shard not in the fleet: %v", err)
	}

	// Missing: a variable and the file.
	if err := os.Remove(filepath.Join(dir, "s5.dsn")); err != nil {
		t.Fatal(err)
	}
	_, err = f.Resolve(env(map[string]string{"S17": "postgres://u:secret@h/db"}))
	if err == nil {
		t.Fatal("resolved with a variable and a file missing")
	}
	for _, w := range []string{path + ": shard 1.dsn_env: $S1 is not set", path + ": shard 5 (eu).dsn_file: cannot read the DSN"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q\ndoes not contain %q", err, w)
		}
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("error %q shows a DSN", err)
	}
	if _, err := f.ReaderDSN(17, env(map[string]string{"S17": "x"})); err == nil || !strings.Contains(err.Error(), "reader_dsn_env: $S17_REPL is not set") {
		t.Errorf("reader DSN variable missing: %v", err)
	}
}

func TestLoad(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "none.json")); err == nil || !strings.Contains(err.Error(), "fleet file: open") {
		t.Errorf("Load of a missing file: %v", err)
	}
}
