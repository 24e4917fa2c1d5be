package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/tributary/tributary/internal/chaos"
	"github.com/tributary/tributary/internal/flagenv"
)

// verdictEnv makes the test binary, run again as a child, exit the way
// the chaos command does with a made-up verdict: "fail" or "pass".
const verdictEnv = "TRIBUTARY_CHAOS_TEST_VERDICT"

func TestMain(m *testing.M) {
	if kind := os.Getenv(verdictEnv); kind != "" {
		v := &chaos.Verdict{Seed: 42, MinFaults: 1} // no fault, verifier not run: fails
		if kind == "pass" {
			v = &chaos.Verdict{Seed: 42, VerifyPassed: true}
		}
		flagenv.Main("chaos", func([]string) (struct{}, error) { return struct{}{}, nil },
			func(context.Context, struct{}) error { return report(os.Stdout, v) })
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestFailedVerdictExitsNonZero: the process exits 1 on a failed verdict,
// after printing it, and 0 on a passing one, so that make chaos and CI
// fail with the soak.
func TestFailedVerdictExitsNonZero(t *testing.T) {
	for _, c := range []struct {
		kind, verdict string
		code          int
	}{{"fail", "VERDICT: FAIL", 1}, {"pass", "VERDICT: PASS", 0}} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), verdictEnv+"="+c.kind)
		out, err := cmd.CombinedOutput()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatalf("%s: %v", c.kind, err)
		}
		if code != c.code || !strings.Contains(string(out), c.verdict) {
			t.Errorf("%s verdict: exit %d, want %d, output with %q:\n%s", c.kind, code, c.code, c.verdict, out)
		}
		if c.code != 0 && !strings.Contains(string(out), "failed verdict (seed 42)") {
			t.Errorf("%s verdict: output does not name the seed:\n%s", c.kind, out)
		}
	}
}
