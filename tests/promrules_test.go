package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPrometheusRules checks the alerting rules with promtool (installed by
// deploy/local/install.sh with Debian's prometheus package), runs their
// unit tests, and makes sure every metric they use is one the code exports.
func TestPrometheusRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("TRIBUTARY_REQUIRE_STACK") == "1" {
			t.Fatal("promtool not found: run deploy/local/install.sh")
		}
		t.Skip("promtool not installed")
	}
	dir := "../deploy/prometheus"
	for _, args := range [][]string{{"check", "rules", "tributary-rules.yml"}, {"test", "rules", "tributary-rules_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	rules, err := os.ReadFile(filepath.Join(dir, "tributary-rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	err = filepath.WalkDir("../internal", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		b, err := os.ReadFile(p)
		src.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	used := regexp.MustCompile(`tributary_[a-z_]+`).FindAllString(string(rules), -1)
	if len(used) == 0 {
		t.Fatal("no tributary_ metrics in the rules")
	}
	for _, m := range used {
		if !strings.Contains(src.String(), `"`+m+`"`) {
			t.Errorf("rules use %s, which no package exports", m)
		}
	}
}
