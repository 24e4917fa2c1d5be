package tests

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAPIHasNoPostgresDependency enforces DESIGN.md invariant 4: the api
// binary cannot touch a shard because it does not link a PostgreSQL client.
func TestAPIHasNoPostgresDependency(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "../cmd/api").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Split(string(out), "\n")
	if len(deps) < 20 {
		t.Fatalf("suspiciously few dependencies listed (%d): %s", len(deps), out)
	}
	for _, d := range deps {
		for _, bad := range []string{"github.com/jackc/", "github.com/lib/pq", "internal/reader", "internal/decode"} {
			if strings.Contains(d, bad) {
				t.Errorf("cmd/api depends on %s (via %q): the API must never reach a shard", bad, d)
			}
		}
	}
}
