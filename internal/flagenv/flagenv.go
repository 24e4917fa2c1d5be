// Package flagenv registers command-line flags whose defaults come from
// environment variables, so that every setting of a Tributary binary can be
// given either way and secrets (DSNs with passwords, tokens) never need to
// appear in argv. Precedence: flag, then environment, then built-in default.
package flagenv

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Set wraps a flag.FlagSet and remembers environment parse errors, which
// Err reports after registration.
type Set struct {
	*flag.FlagSet
	errs []string
}

// New returns a Set for a binary; usage is printed above the flag list.
func New(name, usage string) *Set {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	s := &Set{FlagSet: fs}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "%s\n\nFlags (each also settable by the environment variable shown):\n", strings.TrimSpace(usage))
		fs.PrintDefaults()
	}
	return s
}

func (s *Set) env(env string) (string, bool) {
	if env == "" {
		return "", false
	}
	v, ok := os.LookupEnv(env)
	return v, ok && v != ""
}

func withEnv(usage, env string) string {
	if env == "" {
		return usage
	}
	return usage + " [$" + env + "]"
}

// String registers a string flag.
func (s *Set) String(p *string, name, env, def, usage string) {
	if v, ok := s.env(env); ok {
		def = v
	}
	s.StringVar(p, name, def, withEnv(usage, env))
}

// Secret registers a string that may only come from the environment (or a
// file named by a flag the caller adds): it is not a flag, so it never
// appears in argv or ps output.
func (s *Set) Secret(p *string, env string) {
	if v, ok := s.env(env); ok {
		*p = v
	}
}

// Int registers an int flag.
func (s *Set) Int(p *int, name, env string, def int, usage string) {
	if v, ok := s.env(env); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			s.errs = append(s.errs, fmt.Sprintf("$%s=%q: not an integer", env, v))
		} else {
			def = n
		}
	}
	s.IntVar(p, name, def, withEnv(usage, env))
}

// Duration registers a duration flag.
func (s *Set) Duration(p *time.Duration, name, env string, def time.Duration, usage string) {
	if v, ok := s.env(env); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			s.errs = append(s.errs, fmt.Sprintf("$%s=%q: not a duration (e.g. 500ms, 2s)", env, v))
		} else {
			def = d
		}
	}
	s.DurationVar(p, name, def, withEnv(usage, env))
}

// Bool registers a boolean flag.
func (s *Set) Bool(p *bool, name, env string, def bool, usage string) {
	if v, ok := s.env(env); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			s.errs = append(s.errs, fmt.Sprintf("$%s=%q: not a boolean (true or false)", env, v))
		} else {
			def = b
		}
	}
	s.BoolVar(p, name, def, withEnv(usage, env))
}

// Parse parses args and reports environment errors found while registering.
func (s *Set) Parse(args []string) error {
	if err := s.FlagSet.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &UsageError{err}
	}
	if len(s.errs) > 0 {
		return &UsageError{fmt.Errorf("bad environment: %s", strings.Join(s.errs, "; "))}
	}
	if s.NArg() > 0 {
		return &UsageError{fmt.Errorf("unexpected arguments: %v", s.Args())}
	}
	return nil
}

// Required is the error of a required setting left empty: "--flag (or
// $ENV) is required", then ": why" when why is not empty; nil when v is
// set.
func Required(v, flag, env, why string) error {
	if v != "" {
		return nil
	}
	if why != "" {
		why = ": " + why
	}
	return fmt.Errorf("--%s (or $%s) is required%s", flag, env, why)
}

// AtLeast is the error of flag's value v below min ("--flag must be >=
// min, got v"); nil when v >= min.
func AtLeast(flag string, v, min int) error {
	if v >= min {
		return nil
	}
	return fmt.Errorf("--%s must be >= %d, got %d", flag, min, v)
}

// NotNegative is the error of flag's value v below 0 ("--flag must be >=
// 0, got v"); nil otherwise.
func NotNegative[T int | time.Duration](flag string, v T) error {
	if v >= 0 {
		return nil
	}
	return fmt.Errorf("--%s must be >= 0, got %v", flag, v)
}

// Positive is the error of flag's value v not above 0 ("--flag must be >
// 0, got v"); nil otherwise.
func Positive[T int | time.Duration](flag string, v T) error {
	if v > 0 {
		return nil
	}
	return fmt.Errorf("--%s must be > 0, got %v", flag, v)
}

// UsageError is a setting Parse refused (an unknown flag, a bad value, a
// bad environment variable, a stray argument): the command was called
// wrongly and should exit with status 2.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// List splits a comma-separated value, dropping empty items.
func List(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Main is the body of every Tributary binary's main: parse the settings
// (exit 2 with the reason, or 0 for --help), run until SIGINT/SIGTERM, exit
// 1 with the error run returned.
func Main[C any](name string, parse func([]string) (C, error), run func(context.Context, C) error) {
	cfg, err := parse(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n(run with --help for all settings)\n", name, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, cfg)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}
