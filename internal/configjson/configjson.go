// Package configjson decodes the JSON configuration files operators write
// (the table config, the fleet file) strictly, and says where a mistake is:
// every error names the file, the line and column, the field's path (e.g.
// tables[1].id_layout) and what to do about it. Unknown fields are refused,
// all of them at once, each with the fields that are known there: a typo
// must not silently turn a setting off. Keys must match exactly
// (encoding/json alone would take "Name" for "name").
package configjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// Error is one mistake in a configuration file.
type Error struct {
	File string // as given to Decode
	// Line and Column (1-based, in bytes) locate the mistake; 0 when the
	// position is not known.
	Line, Column int
	// Path is the field's path, e.g. tables[1].id_layout; empty for the
	// file as a whole.
	Path string
	// Problem says what is wrong; Fix what to do about it (may be empty).
	Problem, Fix string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d:%d", e.Line, e.Column)
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Problem)
	if e.Fix != "" {
		b.WriteString(" (" + e.Fix + ")")
	}
	return b.String()
}

// Position converts a byte offset of data into a 1-based line and column.
func Position(data []byte, offset int64) (line, column int) {
	if offset < 0 {
		offset = 0
	}
	if offset > int64(len(data)) {
		offset = int64(len(data))
	}
	before := data[:offset]
	line = 1 + bytes.Count(before, []byte{'\n'})
	column = int(offset) - bytes.LastIndexByte(before, '\n')
	return line, column
}

// Decode decodes data, the contents of file, into v (a pointer to a
// struct), refusing unknown fields, trailing data and values of the wrong
// type. The errors it returns are *Error values (joined when several).
func Decode(file string, data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return &Error{File: file, Problem: "the file is empty", Fix: "it must hold one JSON object"}
	}
	// Unknown fields first, all of them: encoding/json stops at the first
	// and says neither where nor in which object.
	if errs := unknownFields(file, data, reflect.TypeOf(v)); len(errs) > 0 {
		return errors.Join(errs...)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(file, data, err)
	}
	end := dec.InputOffset()
	if _, err := dec.Token(); err != io.EOF {
		line, col := Position(data, skipSpace(data, end))
		return &Error{File: file, Line: line, Column: col, Problem: "more data after the configuration's JSON object",
			Fix: "the file must hold exactly one object: remove what follows, or merge it into the object"}
	}
	return nil
}

// decodeError turns an encoding/json error into an *Error with a position.
func decodeError(file string, data []byte, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		line, col := Position(data, int64(len(data)))
		return &Error{File: file, Line: line, Column: col, Problem: "the file ends inside a JSON value",
			Fix: "a closing } or ] or a quote is missing, or the file was cut off"}
	case errors.As(err, &syn):
		// The offset is just past the offending character.
		line, col := Position(data, syn.Offset-1)
		fix := "check the JSON syntax here"
		switch msg := syn.Error(); {
		case strings.Contains(msg, "looking for beginning of object key string") && prevNonSpace(data, syn.Offset-1) == ',':
			fix = "JSON allows no comma after the last field of an object"
		case strings.Contains(msg, "looking for beginning of value") && prevNonSpace(data, syn.Offset-1) == ',':
			fix = "JSON allows no comma after the last element of a list"
		case strings.Contains(msg, "after object key:value pair"):
			fix = "a comma is missing between two fields, or a } to close the object"
			if at(data, syn.Offset-1) == ']' {
				fix = "a } is missing: close the object before this ]"
			}
		case strings.Contains(msg, "after array element"):
			fix = "a comma is missing between two elements, or a ] to close the list"
			if at(data, syn.Offset-1) == '}' {
				fix = "a ] is missing: close the list before this }"
			}
		case strings.Contains(msg, "in string literal"):
			fix = "strings may not span lines or hold raw control characters"
		}
		return &Error{File: file, Line: line, Column: col, Problem: syn.Error(), Fix: fix}
	case errors.As(err, &typ):
		line, col := Position(data, valueStart(data, typ.Offset))
		return &Error{File: file, Line: line, Column: col, Path: typ.Field,
			Problem: fmt.Sprintf("a JSON %s where %s is expected", typ.Value, describe(typ.Type)),
			Fix:     "see docs/configuration.md for this field's form"}
	}
	return &Error{File: file, Problem: err.Error()}
}

// valueStart finds where the JSON value that encoding/json reports at
// offset begins: it reports scalars by their end and objects and lists
// just past their opening delimiter.
func valueStart(data []byte, offset int64) int64 {
	off := min(max(offset, 0), int64(len(data)))
	if off > 0 && data[off-1] == '"' { // a string: back to its opening quote
		for i := off - 2; i >= 0; i-- {
			if data[i] == '"' && (i == 0 || data[i-1] != '\\') {
				return i
			}
		}
	}
	for i := off - 1; i >= 0; i-- {
		switch data[i] {
		case ':', '[', ',':
			return skipSpace(data, i+1)
		}
	}
	return off
}

// skipSpace returns the offset of the first non-space byte at or after off.
func skipSpace(data []byte, off int64) int64 {
	for off < int64(len(data)) && strings.IndexByte(" \t\r\n", data[off]) >= 0 {
		off++
	}
	return off
}

// at returns data[i], or 0 outside data.
func at(data []byte, i int64) byte {
	if i < 0 || i >= int64(len(data)) {
		return 0
	}
	return data[i]
}

// prevNonSpace returns the last non-space byte of data before offset.
func prevNonSpace(data []byte, offset int64) byte {
	for i := min(offset, int64(len(data))) - 1; i >= 0; i-- {
		if c := data[i]; c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return c
		}
	}
	return 0
}

// describe names a Go type the way a JSON writer thinks of it.
func describe(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list of " + strings.TrimPrefix(strings.TrimPrefix(describe(t.Elem()), "a "), "an ") + "s"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return t.String()
}

// unknownFields walks data along the Go type t and reports every object key
// that t has no field for, with its position and the known fields. Syntax
// errors are left to the decoder, which reports them with positions too.
func unknownFields(file string, data []byte, t reflect.Type) []error {
	w := walker{file: file, data: data, dec: json.NewDecoder(bytes.NewReader(data))}
	w.value(t, "")
	return w.errs
}

type walker struct {
	file string
	data []byte
	dec  *json.Decoder
	errs []error
	bad  bool // a syntax error: stop walking
}

// value consumes one JSON value of Go type t at path.
func (w *walker) value(t reflect.Type, path string) {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && reflect.PointerTo(t).Implements(unmarshaler) {
		t = nil // its JSON form is its own: the decoder checks it
	}
	tok, err := w.dec.Token()
	if err != nil {
		w.bad = true
		return
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return // a scalar: its type is the decoder's to check
	}
	switch d {
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; w.dec.More() && !w.bad; i++ {
			w.value(elem, path+"["+strconv.Itoa(i)+"]")
		}
	case '{':
		var fields map[string]reflect.Type
		var mapElem reflect.Type
		if t != nil && t.Kind() == reflect.Struct {
			fields = jsonFields(t)
		} else if t != nil && t.Kind() == reflect.Map {
			mapElem = t.Elem()
		}
		for w.dec.More() && !w.bad {
			ktok, err := w.dec.Token()
			if err != nil {
				w.bad = true
				return
			}
			key, _ := ktok.(string)
			end := w.dec.InputOffset()
			sub := key
			if path != "" {
				sub = path + "." + key
			}
			var ft reflect.Type
			switch {
			case fields != nil:
				var known bool
				if ft, known = fields[key]; !known {
					w.unknown(key, path, end, fields)
				}
			case mapElem != nil:
				ft = mapElem
			}
			w.value(ft, sub)
		}
	}
	if _, err := w.dec.Token(); err != nil { // the closing delimiter
		w.bad = true
	}
}

// unknown records an unknown key that ends at offset end.
func (w *walker) unknown(key, path string, end int64, fields map[string]reflect.Type) {
	start := int64(bytes.LastIndexByte(w.data[:end], '"'))
	if i := bytes.LastIndexByte(w.data[:max(start, 0)], '"'); i >= 0 {
		start = int64(i)
	}
	line, col := Position(w.data, start)
	known := make([]string, 0, len(fields))
	for k := range fields {
		known = append(known, k)
	}
	sort.Strings(known)
	where := "the top level"
	if path != "" {
		where = path
	}
	w.errs = append(w.errs, &Error{File: w.file, Line: line, Column: col, Path: where,
		Problem: fmt.Sprintf("unknown field %q", key),
		Fix:     "known fields here: " + strings.Join(known, ", ")})
}

// unmarshaler is json.Unmarshaler's type.
var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

// jsonFields maps a struct's JSON names to their types, as encoding/json
// names them (tag name, else the Go name; "-" and unexported skipped; the
// fields of an untagged embedded struct as its own).
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous && f.Tag.Get("json") == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range jsonFields(ft) {
					if _, shadowed := out[k]; !shadowed {
						out[k] = v
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		name := f.Name
		if tag, ok := f.Tag.Lookup("json"); ok {
			n, _, _ := strings.Cut(tag, ",")
			if n == "-" {
				continue
			}
			if n != "" {
				name = n
			}
		}
		out[name] = f.Type
	}
	return out
}

// Locate returns the line and column of the value at path in data (e.g.
// "shards[1].shard", "shards[2]"), so that a check made after decoding can
// point at what it refuses; ok is false when path is not in data.
func Locate(data []byte, path string) (line, column int, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var found int64 = -1
	var walk func(p string) bool // consumes one value; false on a syntax error
	walk = func(p string) bool {
		start := skipSpace(data, dec.InputOffset())
		if start < int64(len(data)) && data[start] == ',' || start < int64(len(data)) && data[start] == ':' {
			start = skipSpace(data, start+1)
		}
		if p == path && found < 0 {
			found = start
		}
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		d, isDelim := tok.(json.Delim)
		if !isDelim {
			return true
		}
		switch d {
		case '[':
			for i := 0; dec.More(); i++ {
				if !walk(p + "[" + strconv.Itoa(i) + "]") {
					return false
				}
			}
		case '{':
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return false
				}
				key, _ := k.(string)
				sub := key
				if p != "" {
					sub = p + "." + key
				}
				if !walk(sub) {
					return false
				}
			}
		}
		_, err = dec.Token()
		return err == nil
	}
	walk("")
	if found < 0 {
		return 0, 0, false
	}
	line, column = Position(data, found)
	return line, column, true
}
