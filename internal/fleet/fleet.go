// Package fleet is the fleet file: which shards exist, by number, and where
// each one's DSN comes from. It is declared once and read by every tool that
// talks to several shards (verify, loadgen, the benchmarks, the demo, the
// check command) and by cdc-reader to find its own DSN. Nothing assumes
// shards numbered 0..N-1: numbers are whatever the fleet uses (1, 5, 17...),
// the numbers the readers are started with and that every answer names.
//
//	{"shards": [
//	  {"shard": 1, "name": "eu-1", "dsn_env": "EU1_DSN", "reader_dsn_env": "EU1_REPL_DSN"},
//	  {"shard": 5, "dsn_file": "secrets/shard5.dsn"}
//	]}
//
// A DSN holds a password, so the file never holds one: it names an
// environment variable (dsn_env) or a file (dsn_file, relative to the fleet
// file's directory) that does. reader_dsn_env / reader_dsn_file, optional,
// is the reader's least-privilege role; without it the reader uses the
// shard's DSN. Parse checks the structure (numbers, duplicates, unknown
// fields); Resolve and ReaderDSN read the DSNs, and report every variable
// that is not set and every file that cannot be read, before anything
// connects.
package fleet

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/tributary/tributary/internal/configjson"
)

// MaxShard is the largest shard number: cdc-reader's limit (a shard number
// fits the 13 shard bits of the seed000 id layout).
const MaxShard = 8191

// Source says where a DSN comes from: exactly one of Env (an environment
// variable's name) and File (a file holding the DSN on one line).
type Source struct {
	Env, File string
}

// IsZero reports whether no source is given.
func (s Source) IsZero() bool { return s.Env == "" && s.File == "" }

// Shard is one shard of the fleet.
type Shard struct {
	// Number is the shard's number, as its reader is started with.
	Number int
	// Name is an optional label shown next to the number.
	Name string
	// DSN is the shard's DSN for tools (verify, loadgen, check); ReaderDSN
	// the reader's, when it has a role of its own (zero: DSN).
	DSN, ReaderDSN Source
}

// Label is "shard N" or "shard N (name)", for messages.
func (s Shard) Label() string {
	if s.Name != "" {
		return fmt.Sprintf("shard %d (%s)", s.Number, s.Name)
	}
	return fmt.Sprintf("shard %d", s.Number)
}

// Fleet is a parsed fleet file.
type Fleet struct {
	// File is the path the fleet was read from; relative dsn_file paths
	// are relative to its directory.
	File string
	// Shards are ordered by number.
	Shards []Shard
}

// Endpoint is a shard with its DSN read. The DSN may hold a password: it
// never appears in an error or a log line.
type Endpoint struct {
	Number int
	Name   string
	DSN    string
}

// file is the JSON form.
type file struct {
	Shards []entry `json:"shards"`
}

type entry struct {
	Shard         *int   `json:"shard"`
	Name          string `json:"name,omitempty"`
	DSNEnv        string `json:"dsn_env,omitempty"`
	DSNFile       string `json:"dsn_file,omitempty"`
	ReaderDSNEnv  string `json:"reader_dsn_env,omitempty"`
	ReaderDSNFile string `json:"reader_dsn_file,omitempty"`
}

// envName is a portable environment variable name.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Load reads and checks a fleet file (not the DSNs: see Resolve).
func Load(path string) (*Fleet, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("fleet file: %w", err)
	}
	return Parse(path, b)
}

// Parse checks the fleet file's contents; path names it in errors and
// anchors relative dsn_file paths.
func Parse(path string, data []byte) (*Fleet, error) {
	var f file
	if err := configjson.Decode(path, data, &f); err != nil {
		return nil, err
	}
	fl := &Fleet{File: path}
	var errs []error
	bad := func(i int, field, format string, args ...any) {
		p := fmt.Sprintf("shards[%d]", i)
		if field != "" {
			p += "." + field
		}
		line, col, ok := configjson.Locate(data, p)
		if !ok { // a field that is missing: point at its shard
			line, col, _ = configjson.Locate(data, fmt.Sprintf("shards[%d]", i))
		}
		errs = append(errs, &configjson.Error{File: path, Line: line, Column: col, Path: p, Problem: fmt.Sprintf(format, args...)})
	}
	if len(f.Shards) == 0 {
		errs = append(errs, &configjson.Error{File: path, Path: "shards",
			Problem: "no shards listed", Fix: `list each shard as {"shard": N, "dsn_env": "VAR"}`})
	}
	seen := map[int]int{}     // number -> index
	names := map[string]int{} // name -> index
	for i, e := range f.Shards {
		s := Shard{Name: e.Name, DSN: Source{Env: e.DSNEnv, File: e.DSNFile},
			ReaderDSN: Source{Env: e.ReaderDSNEnv, File: e.ReaderDSNFile}}
		switch {
		case e.Shard == nil:
			bad(i, "shard", "the shard number is missing")
		case *e.Shard < 0 || *e.Shard > MaxShard:
			bad(i, "shard", "shard number %d is out of range 0..%d", *e.Shard, MaxShard)
		default:
			s.Number = *e.Shard
			if j, dup := seen[s.Number]; dup {
				bad(i, "shard", "shard %d is listed twice (also shards[%d]); every shard once", s.Number, j)
			} else {
				seen[s.Number] = i
			}
		}
		if e.Name != "" {
			if strings.TrimSpace(e.Name) != e.Name || len(e.Name) > 64 {
				bad(i, "name", "name %q must be 1..64 characters without surrounding spaces", e.Name)
			}
			if j, dup := names[e.Name]; dup {
				bad(i, "name", "name %q is used twice (also shards[%d])", e.Name, j)
			}
			names[e.Name] = i
		}
		for _, src := range []struct {
			what     string
			s        Source
			required bool
		}{{"dsn", s.DSN, true}, {"reader_dsn", s.ReaderDSN, false}} {
			switch {
			case src.s.Env != "" && src.s.File != "":
				bad(i, src.what+"_env", "set %s_env or %s_file, not both", src.what, src.what)
			case src.s.IsZero() && src.required:
				bad(i, "", "dsn_env or dsn_file is required: the DSN holds a password, so the fleet file names the environment variable or the file that holds it")
			case src.s.Env != "" && !envName.MatchString(src.s.Env):
				bad(i, src.what+"_env", "%q is not an environment variable name", src.s.Env)
			}
		}
		fl.Shards = append(fl.Shards, s)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	slices.SortFunc(fl.Shards, func(a, b Shard) int { return a.Number - b.Number })
	return fl, nil
}

// Numbers lists the shard numbers, ascending.
func (f *Fleet) Numbers() []int {
	out := make([]int, len(f.Shards))
	for i, s := range f.Shards {
		out[i] = s.Number
	}
	return out
}

// Shard returns the shard with the given number.
func (f *Fleet) Shard(number int) (Shard, bool) {
	for _, s := range f.Shards {
		if s.Number == number {
			return s, true
		}
	}
	return Shard{}, false
}

// Resolve reads every shard's DSN; getenv is os.Getenv outside tests. It
// reports every variable not set and file not readable at once.
func (f *Fleet) Resolve(getenv func(string) string) ([]Endpoint, error) {
	var errs []error
	out := make([]Endpoint, 0, len(f.Shards))
	for _, s := range f.Shards {
		dsn, err := f.read(s, "dsn", s.DSN, getenv)
		if err != nil {
			errs = append(errs, err)
		}
		out = append(out, Endpoint{Number: s.Number, Name: s.Name, DSN: dsn})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// ReaderDSN reads the DSN the reader of shard number uses: its
// reader_dsn_env or reader_dsn_file, else its dsn_env or dsn_file.
func (f *Fleet) ReaderDSN(number int, getenv func(string) string) (string, error) {
	s, ok := f.Shard(number)
	if !ok {
		return "", fmt.Errorf("%s: shard %d is not in the fleet (shards %v)", f.File, number, f.Numbers())
	}
	if s.ReaderDSN.IsZero() {
		return f.read(s, "dsn", s.DSN, getenv)
	}
	return f.read(s, "reader_dsn", s.ReaderDSN, getenv)
}

// read reads one DSN source of s; what is the field's prefix (dsn,
// reader_dsn) for errors.
func (f *Fleet) read(s Shard, what string, src Source, getenv func(string) string) (string, error) {
	if src.Env != "" {
		v := getenv(src.Env)
		if v == "" {
			return "", &configjson.Error{File: f.File, Path: fmt.Sprintf("%s.%s_env", s.Label(), what),
				Problem: fmt.Sprintf("$%s is not set", src.Env), Fix: "export it; for the local stack: set -a; . $TRIBUTARY_HOME/stack.env; set +a"}
		}
		return v, nil
	}
	p := src.File
	if !filepath.IsAbs(p) {
		p = filepath.Join(filepath.Dir(f.File), p)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return "", &configjson.Error{File: f.File, Path: fmt.Sprintf("%s.%s_file", s.Label(), what),
			Problem: fmt.Sprintf("cannot read the DSN: %v", err)}
	}
	v := strings.TrimSpace(string(b))
	if v == "" || strings.Contains(v, "\n") {
		return "", &configjson.Error{File: f.File, Path: fmt.Sprintf("%s.%s_file", s.Label(), what),
			Problem: fmt.Sprintf("%s must hold the DSN on one line", p)}
	}
	return v, nil
}
