package configjson

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzDecode: Decode never panics, every error is an *Error naming the
// file with a position inside the data, and what it accepts strict
// encoding/json accepts too.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"items": [{"name": "a", "n": 2}], "flag": true}`, `{"items": [{"name": "a",}]}`,
		`{"one": {"Name": 1}}`, `{"tags": {"x": {"z": []}}}`, "{\"items\": [\n", `[]`, `{} {}`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v file
		err := Decode("f.json", data, &v)
		if err == nil {
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.DisallowUnknownFields()
			var w file
			if err := dec.Decode(&w); err != nil {
				t.Fatalf("Decode accepted %q, encoding/json refuses it: %v", data, err)
			}
			return
		}
		for _, e := range flatten(err) {
			ce, ok := e.(*Error)
			if !ok || ce.File != "f.json" {
				t.Fatalf("error %v (%T) is not an *Error naming the file", e, e)
			}
			if ce.Line < 0 || ce.Line > bytes.Count(data, []byte{'\n'})+1 {
				t.Fatalf("error %v: line %d outside the data", e, ce.Line)
			}
		}
	})
}

// flatten lists the errors a tree of errors.Join holds.
func flatten(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, flatten(e)...)
	}
	return out
}
