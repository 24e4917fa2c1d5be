package configjson

import (
	"errors"
	"strings"
	"testing"
)

type item struct {
	Name string `json:"name"`
	N    int    `json:"n,omitempty"`
	Skip string `json:"-"`
}

type file struct {
	Items []item          `json:"items"`
	One   *item           `json:"one,omitempty"`
	Tags  map[string]item `json:"tags,omitempty"`
	Flag  bool            `json:"flag"`
}

// TestDecode: every kind of mistake is reported with the file, line:column,
// the field's path and a fix; good files decode.
func TestDecode(t *testing.T) {
	for _, c := range []struct {
		name, data string
		want       []string // substrings of the error; nil: valid
	}{
		{name: "valid", data: `{"items": [{"name": "a", "n": 2}], "one": {"name": "b"}, "tags": {"x": {"name": "c"}}, "flag": true}`},
		{name: "empty", data: "  \n", want: []string{"f.json: the file is empty"}},
		{name: "cut off", data: "{\"items\": [\n  {\"name\": \"a\"", want: []string{"f.json:2:15: ", "ends inside a JSON value", "missing"}},
		{name: "trailing comma in object", data: "{\"items\": [{\"name\": \"a\",}]}",
			want: []string{"f.json:1:25: ", "no comma after the last field"}},
		{name: "trailing comma in list", data: "{\"items\": [\n{\"name\": \"a\"},\n]}",
			want: []string{"f.json:3:1: ", "no comma after the last element"}},
		{name: "missing comma", data: "{\"flag\": true\n \"items\": []}", want: []string{"f.json:2:2: ", "a comma is missing"}},
		{name: "missing brace", data: "{\"items\": [\n  {\"name\": \"a\"\n]}", want: []string{"f.json:3:1: ", "a } is missing: close the object before this ]"}},
		{name: "missing bracket", data: "{\"items\": [{\"name\": \"a\"}, {\"name\": \"b\"}\n}", want: []string{"f.json:2:1: ", "a ] is missing: close the list before this }"}},
		{name: "unknown field, nested", data: "{\"items\": [{\"name\": \"a\"},\n  {\"name\": \"b\", \"nmae\": 1}]}",
			want: []string{"f.json:2:17: items[1]: unknown field \"nmae\"", "known fields here: n, name"}},
		{name: "unknown fields, all of them", data: "{\"itmes\": [], \"one\": {\"Name\": \"x\"}, \"tags\": {\"k\": {\"z\": 1}}}",
			want: []string{"f.json:1:2: the top level: unknown field \"itmes\"", "known fields here: flag, items, one, tags",
				"f.json:1:23: one: unknown field \"Name\"", "tags.k: unknown field \"z\""}},
		{name: "a dash field is unknown", data: `{"items": [{"name": "a", "Skip": "x"}]}`, want: []string{`unknown field "Skip"`}},
		{name: "wrong type", data: "{\"items\": [\n {\"name\": \"a\", \"n\": \"two\"}]}",
			want: []string{"f.json:2:21: items.n: a JSON string where an integer is expected"}},
		{name: "wrong type, list", data: `{"items": {"name": "a"}}`, want: []string{"items: a JSON object where a list of objects is expected"}},
		{name: "not an object", data: `[1, 2]`, want: []string{"f.json:1:", "a JSON array where an object is expected"}},
		{name: "trailing data", data: "{\"flag\": true}\n{\"flag\": false}", want: []string{"f.json:2:1: more data after"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var f file
			err := Decode("f.json", []byte(c.data), &f)
			if c.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				if len(f.Items) != 1 || f.Items[0].N != 2 || f.One.Name != "b" || f.Tags["x"].Name != "c" || !f.Flag {
					t.Fatalf("decoded %+v", f)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted %s", c.data)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.File != "f.json" {
				t.Errorf("error %v is not a *configjson.Error naming the file", err)
			}
		})
	}
}

type base struct {
	Kind string `json:"kind"`
}

// when has a JSON form of its own: a string.
type when struct{ s string }

func (w *when) UnmarshalJSON(b []byte) error { w.s = string(b); return nil }

type withEmbedded struct {
	base
	Name string `json:"name"`
	At   when   `json:"at"`
}

// TestDecodeEmbeddedAndCustom: an embedded struct's fields are known at its
// parent's level, and a type with its own UnmarshalJSON is not walked.
func TestDecodeEmbeddedAndCustom(t *testing.T) {
	var v withEmbedded
	if err := Decode("f.json", []byte(`{"kind": "k", "name": "n", "at": {"any": "thing"}}`), &v); err != nil {
		t.Fatal(err)
	}
	if v.Kind != "k" || v.Name != "n" || v.At.s == "" {
		t.Fatalf("decoded %+v", v)
	}
	err := Decode("f.json", []byte(`{"kind": "k", "nme": "n"}`), &v)
	if err == nil || !strings.Contains(err.Error(), `unknown field "nme" (known fields here: at, kind, name)`) {
		t.Fatalf("unknown field beside an embedded struct: %v", err)
	}
}

func TestPosition(t *testing.T) {
	data := []byte("ab\ncd\n\nef")
	for _, c := range []struct {
		off       int64
		line, col int
	}{{0, 1, 1}, {1, 1, 2}, {2, 1, 3}, {3, 2, 1}, {6, 3, 1}, {7, 4, 1}, {8, 4, 2}, {100, 4, 3}, {-1, 1, 1}} {
		if l, col := Position(data, c.off); l != c.line || col != c.col {
			t.Errorf("Position(%d) = %d:%d, want %d:%d", c.off, l, col, c.line, c.col)
		}
	}
}

func TestLocate(t *testing.T) {
	data := []byte("{\"shards\": [\n  {\"shard\": 1, \"dsn_env\": \"A\"},\n  {\"shard\": 1,\n   \"dsn_env\": \"B\"}]}")
	for _, c := range []struct {
		path      string
		line, col int
		ok        bool
	}{
		{"shards", 1, 12, true}, {"shards[0]", 2, 3, true}, {"shards[0].dsn_env", 2, 27, true},
		{"shards[1].shard", 3, 13, true}, {"shards[1].dsn_env", 4, 15, true}, {"shards[2]", 0, 0, false}, {"", 1, 1, true},
	} {
		line, col, ok := Locate(data, c.path)
		if line != c.line || col != c.col || ok != c.ok {
			t.Errorf("Locate(%q) = %d:%d %v, want %d:%d %v", c.path, line, col, ok, c.line, c.col, c.ok)
		}
	}
}
