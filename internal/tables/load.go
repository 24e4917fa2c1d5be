package tables

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/tributary/tributary/internal/configjson"
)

// Load reads and validates a configuration file. Every error names the
// file; mistakes in its JSON (syntax, a field of the wrong type, an unknown
// field) also the line and column, the field's path and the fix, and the
// configuration's own problems the table and field (see Validate). All
// are reported at once.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("table config: %w", err)
	}
	return parse(path, b)
}

// Parse decodes and validates configuration JSON, filling defaults; errors
// name the file "table config".
func Parse(b []byte) (*Config, error) {
	return parse("table config", b)
}

func parse(file string, b []byte) (*Config, error) {
	var c Config
	if err := configjson.Decode(file, b, &c); err != nil {
		return nil, err
	}
	if c.TopicPrefix == "" {
		c.TopicPrefix = "tributary."
	}
	if err := c.Validate(); err != nil {
		return nil, inFile(file, err)
	}
	return &c, nil
}

// inFile prefixes every one of the (joined) errors err holds with file, so
// that each line of the message says where it comes from.
func inFile(file string, err error) error {
	var out []error
	for _, e := range flatten(err) {
		out = append(out, fileError{file: file, err: e})
	}
	return errors.Join(out...)
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

// fileError is a configuration error with the file it is in.
type fileError struct {
	file string
	err  error
}

func (e fileError) Error() string {
	msg := strings.TrimPrefix(e.err.Error(), "table config: ")
	return e.file + ": " + msg
}

func (e fileError) Unwrap() error { return e.err }
