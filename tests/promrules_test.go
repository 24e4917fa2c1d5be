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

// TestAlertRunbooks: every alert links its section of docs/runbook.md, and
// every section there is an alert's, so on-call never follows a dead link
// and the runbook never describes an alert that no longer exists.
func TestAlertRunbooks(t *testing.T) {
	rules, err := os.ReadFile("../deploy/prometheus/tributary-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	runbook, err := os.ReadFile("../docs/runbook.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{} // GitHub-style anchors of "## " headings
	for _, line := range strings.Split(string(runbook), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			sections[strings.ToLower(strings.ReplaceAll(strings.TrimSpace(h), " ", "-"))] = true
		}
	}
	// An alert's block runs from its "- alert:" line to the next one.
	blocks := regexp.MustCompile(`(?m)^\s*- alert:\s*`).Split(string(rules), -1)[1:]
	if len(blocks) == 0 {
		t.Fatal("no alerts in the rules")
	}
	linked := map[string]bool{}
	for _, b := range blocks {
		name := strings.TrimSpace(strings.SplitN(b, "\n", 2)[0])
		m := regexp.MustCompile(`runbook_url:\s*"docs/runbook\.md#([a-z0-9-]+)"`).FindStringSubmatch(b)
		switch {
		case m == nil:
			t.Errorf("alert %s has no runbook_url to docs/runbook.md", name)
		case m[1] != strings.ToLower(name):
			t.Errorf("alert %s links #%s, not its own section #%s", name, m[1], strings.ToLower(name))
		case !sections[m[1]]:
			t.Errorf("alert %s links #%s, which docs/runbook.md has no section for", name, m[1])
		default:
			linked[m[1]] = true
		}
	}
	for s := range sections {
		if !linked[s] {
			t.Errorf("docs/runbook.md has a section #%s that no alert links", s)
		}
	}
}

// TestAlertsFireFromAbsentAndZero: every alert has a promtool test in
// which it fires on one of its metrics' series that starts absent (the
// way a label value appears at its first event) and one in which it fires
// on a series that starts at 0 (the way the binaries export what their
// config knows). promtool runs them in TestPrometheusRules; this checks
// none is missing, so a new rule cannot skip the case that once did not
// fire.
func TestAlertsFireFromAbsentAndZero(t *testing.T) {
	rules, err := os.ReadFile("../deploy/prometheus/tributary-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile("../deploy/prometheus/tributary-rules_test.yml")
	if err != nil {
		t.Fatal(err)
	}
	metricRe := regexp.MustCompile(`tributary_[a-z_]+`)
	uses := map[string][]string{} // alert -> metrics its expression reads
	for _, b := range regexp.MustCompile(`(?m)^\s*- alert:\s*`).Split(string(rules), -1)[1:] {
		name := strings.TrimSpace(strings.SplitN(b, "\n", 2)[0])
		expr := regexp.MustCompile(`(?m)^\s*expr:\s*(.*)$`).FindStringSubmatch(b)
		if expr == nil {
			t.Fatalf("alert %s has no expr", name)
		}
		uses[name] = metricRe.FindAllString(expr[1], -1)
	}
	// A test group runs from one "- interval:" line to the next.
	groups := regexp.MustCompile(`(?m)^  - interval:`).Split(string(tests), -1)[1:]
	seriesRe := regexp.MustCompile(`(?m)^\s*- series:\s*'([a-z_]+)[^']*'\s*\n\s*values:\s*'([^']*)'`)
	firingRe := regexp.MustCompile(`(?m)^\s*alertname:\s*(\w+)\s*\n\s*exp_alerts:\s*\n\s*- exp_labels`)
	from := map[string]map[string]bool{} // alert -> "_" / "0" -> seen
	for _, g := range groups {
		starts := map[string]map[string]bool{} // metric -> first values
		for _, s := range seriesRe.FindAllStringSubmatch(g, -1) {
			if starts[s[1]] == nil {
				starts[s[1]] = map[string]bool{}
			}
			starts[s[1]][strings.TrimLeft(s[2], " ")[:1]] = true
		}
		for _, f := range firingRe.FindAllStringSubmatch(g, -1) {
			for _, m := range uses[f[1]] {
				for first := range starts[m] {
					if from[f[1]] == nil {
						from[f[1]] = map[string]bool{}
					}
					from[f[1]][first] = true
				}
			}
		}
	}
	if len(uses) == 0 {
		t.Fatal("no alerts in the rules")
	}
	for alert := range uses {
		if !from[alert]["_"] {
			t.Errorf("alert %s has no promtool test in which it fires on a series that starts absent ('_')", alert)
		}
		if !from[alert]["0"] {
			t.Errorf("alert %s has no promtool test in which it fires on a series that starts at 0", alert)
		}
	}
}
