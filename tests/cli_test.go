package tests

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommandsHelp holds every binary to the same command-line contract:
// --help explains the settings and exits 0; an unknown flag is refused with
// exit status 2 and a message naming it, before anything is started.
func TestCommandsHelp(t *testing.T) {
	bin := t.TempDir()
	out, err := exec.Command("go", "build", "-o", bin+"/", "../cmd/...", "../bench").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	commands := map[string][]string{
		"cdc-reader":     nil,
		"loader":         nil,
		"api":            nil,
		"loadgen":        nil,
		"verify":         nil,
		"preflight":      nil,
		"embedded-kafka": nil,
		"bench":          {"loader"},
	}
	for _, b := range []string{"reader", "api", "latency", "sustain", "peers"} {
		commands["bench "+b] = nil
	}
	for _, a := range []string{"status", "pause", "resume", "dlq list", "dlq replay", "resnapshot", "teardown"} {
		commands["tributaryctl "+a] = nil
	}
	for name := range commands {
		t.Run(name, func(t *testing.T) {
			parts := strings.Fields(name)
			path := filepath.Join(bin, parts[0])
			args := parts[1:]
			if name == "bench" {
				args = []string{"loader"}
			}
			help, err := exec.Command(path, append(args, "--help")...).CombinedOutput()
			if err != nil {
				t.Fatalf("%s --help: %v\n%s", name, err, help)
			}
			if !strings.Contains(string(help), "-") || len(help) < 200 {
				t.Errorf("%s --help explains too little (%d bytes):\n%s", name, len(help), help)
			}
			bad, err := exec.Command(path, append(args, "--no-such-flag")...).CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 {
				t.Errorf("%s --no-such-flag: exit %v, want status 2\n%s", name, err, bad)
			}
			if !strings.Contains(string(bad), "no-such-flag") {
				t.Errorf("%s --no-such-flag does not name the flag:\n%s", name, bad)
			}
		})
	}
}
