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

// deps lists the module's own packages that pattern (go list syntax,
// relative to the tests directory) depends on, transitively, with the
// module prefix cut.
func deps(t *testing.T, pattern string) map[string]bool {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pattern).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pattern, err, out)
	}
	set := map[string]bool{}
	for _, d := range strings.Fields(string(out)) {
		if p, ok := strings.CutPrefix(d, "github.com/tributary/tributary/"); ok {
			set[p] = true
		}
	}
	return set
}

// TestImportRules enforces the import rules of docs/architecture.md: the
// API links nothing of the reader side nor the loader; the write side (the
// reader, the loader and the pre-aggregator it runs) links nothing of the
// read side (query, api); the reader side and the loader side share only
// the change envelope and the leaves it needs; no package imports a
// command, and nothing outside bench/ imports the benchmarks.
func TestImportRules(t *testing.T) {
	api := deps(t, "../cmd/api")
	for _, p := range []string{"internal/reader", "internal/decode", "internal/identity", "internal/pgdsn", "internal/loader"} {
		if api[p] {
			t.Errorf("cmd/api depends on %s", p)
		}
	}
	shared := map[string]bool{"internal/envelope": true, "internal/rowkey": true, "internal/tables": true, "internal/ids": true,
		"internal/configjson": true, "internal/kafkaconn": true, "internal/flagenv": true}
	reader, loader := deps(t, "../internal/reader"), deps(t, "../internal/loader")
	for side, d := range map[string]map[string]bool{"internal/reader": reader, "internal/loader": loader, "internal/preagg": deps(t, "../internal/preagg")} {
		for _, p := range []string{"internal/query", "internal/api"} {
			if d[p] {
				t.Errorf("%s depends on %s: the write side imports nothing of the read side (names both need live in a leaf)", side, p)
			}
		}
	}
	if !reader["internal/envelope"] || !loader["internal/envelope"] {
		t.Fatal("the reader or the loader does not depend on internal/envelope: go list's output is not what this test expects")
	}
	for p := range reader {
		if strings.HasPrefix(p, "internal/") && loader[p] && !shared[p] {
			t.Errorf("the reader and the loader both depend on %s: only the envelope and its leaves may cross Kafka", p)
		}
	}
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}: {{join .Imports " "}}`, "../...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, ": ")
		for _, imp := range strings.Fields(imports) {
			if strings.HasPrefix(imp, "github.com/tributary/tributary/cmd/") {
				t.Errorf("%s imports the command %s", pkg, imp)
			}
			// The benchmarks measure the product from outside: nothing
			// of the product may lean on them.
			const bench = "github.com/tributary/tributary/bench/"
			if strings.HasPrefix(imp, bench) && !strings.HasPrefix(pkg+"/", bench) {
				t.Errorf("%s imports the benchmark package %s", pkg, imp)
			}
		}
	}
}
