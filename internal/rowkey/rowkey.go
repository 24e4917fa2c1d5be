// Package rowkey is the key text: a row's identity (the values of its key
// columns, in key order) as one string, the event's id, the Kafka record
// key, and the {key} of GET /v1/tables/{table}/rows/{key}. It is a leaf:
// the reader, the loader, the store, the API and the verifier all build or
// split key texts here and nowhere else (docs/design/composite-identity.md).
//
// The form: each column's PostgreSQL text output, with a backslash before
// every `\` and `,` inside a value, joined by `,` — a table keyed
// (tenant_id, line_no) has the key text `7,1`. A one-column key is the
// value itself, unescaped, so one-column tables keep the id they always
// had.
package rowkey

import (
	"errors"
	"fmt"
	"strings"
)

// ErrMalformed is wrapped by Parse's errors.
var ErrMalformed = errors.New("malformed key")

// Encode joins the values of a key's columns, in key order, into its key
// text. One value is returned as it is.
func Encode(values []string) string {
	if len(values) == 1 {
		return values[0]
	}
	var b strings.Builder
	for i, v := range values {
		if i > 0 {
			b.WriteByte(',')
		}
		for j := 0; j < len(v); j++ {
			if v[j] == '\\' || v[j] == ',' {
				b.WriteByte('\\')
			}
			b.WriteByte(v[j])
		}
	}
	return b.String()
}

// Parse splits a key text of a key of n columns into its values, in key
// order. It refuses a text with another number of parts, and a backslash
// that escapes anything but `\` or `,`. With n == 1 the text is the value.
func Parse(text string, n int) ([]string, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: a key has at least one column, not %d", ErrMalformed, n)
	}
	if n == 1 {
		return []string{text}, nil
	}
	out := make([]string, 0, n)
	var b strings.Builder
	for i := 0; i < len(text); i++ {
		switch c := text[i]; c {
		case '\\':
			if i+1 == len(text) || (text[i+1] != '\\' && text[i+1] != ',') {
				return nil, fmt.Errorf("%w: backslash at byte %d escapes neither \\ nor , (write \\\\ or \\,)", ErrMalformed, i)
			}
			i++
			b.WriteByte(text[i])
		case ',':
			out = append(out, b.String())
			b.Reset()
		default:
			b.WriteByte(c)
		}
	}
	out = append(out, b.String())
	if len(out) != n {
		return nil, fmt.Errorf("%w: %d parts, the key has %d columns", ErrMalformed, len(out), n)
	}
	return out, nil
}

// Of is the key text of the columns key in row (an event's After or
// Before: column name to text, nil for NULL). ok is false when a key
// column is absent or NULL.
func Of(key []string, row map[string]*string) (text string, ok bool) {
	vals := make([]string, len(key))
	for i, c := range key {
		v := row[c]
		if v == nil {
			return "", false
		}
		vals[i] = *v
	}
	return Encode(vals), true
}
