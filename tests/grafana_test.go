package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/api"
	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/loader"
	"github.com/tributary/tributary/internal/query"
	"github.com/tributary/tributary/internal/reader"
	"github.com/tributary/tributary/internal/ring"
	"github.com/tributary/tributary/internal/tables"
)

// describer is a prometheus.Registerer that keeps what each collector
// describes: every metric name a binary can export and its label names,
// including vectors that have no series yet.
type describer struct{ labels map[string][]string }

var (
	descName   = regexp.MustCompile(`fqName: "([^"]+)"`)
	descConst  = regexp.MustCompile(`constLabels: \{([^}]*)\}`)
	descVar    = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
	descLabel  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)(=|,|$)`)
	promMetric = regexp.MustCompile(`\btributary_[a-z0-9_]+\b`)
)

func (d *describer) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for desc := range ch {
		s := desc.String()
		m := descName.FindStringSubmatch(s)
		if m == nil {
			continue
		}
		var labels []string
		for _, re := range []*regexp.Regexp{descConst, descVar} {
			if g := re.FindStringSubmatch(s); g != nil {
				for _, l := range descLabel.FindAllStringSubmatch(g[1], -1) {
					labels = append(labels, l[1])
				}
			}
		}
		d.labels[m[1]] = labels
	}
	return nil
}

func (d *describer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		d.Register(c) //nolint:errcheck // never fails
	}
}

func (d *describer) Unregister(prometheus.Collector) bool { return true }

// exportedMetrics builds the cdc-reader, the loader (with a ring map and
// the revenue aggregator, so that every optional metric is there) and the
// API as their binaries do, and returns every tributary_ metric they
// register with its labels.
func exportedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	cfg, err := tables.Load("../deploy/local/tables.json")
	if err != nil {
		t.Fatal(err)
	}
	rm, err := ring.Load("../deploy/local/ringmap.json")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	d := &describer{labels: map[string][]string{}}
	reader.New(reader.Config{Shard: 7, Tables: cfg, Slot: "s", Publication: "p"}, log, d)
	loader.New(loader.Config{Tables: cfg, Ring: rm, RevenueAggregator: true, CompactInterval: time.Minute}, &chstore.Store{}, log, d)
	api.New(api.Config{Tables: cfg, DocumentsTable: cfg.Moves.DocumentsTable, QueryTimeout: time.Second}, query.New(nil, "tributary"), log, d)
	if len(d.labels) == 0 {
		t.Fatal("no metric described")
	}
	return d.labels
}

// grafanaVariables are the dashboard's variables and Grafana's, replaced
// by values PromQL can parse.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h", "${shard}", ".*", "$shard", ".*")

// dashboardQueries returns every "expr" of the dashboard (panel targets,
// at any depth) and every label_values() query of its variables.
func dashboardQueries(t *testing.T, path string) (exprs, labelValues []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if s, ok := e.(string); ok && k == "expr" {
					exprs = append(exprs, s)
				}
				if s, ok := e.(string); ok && (k == "query" || k == "definition") && strings.HasPrefix(s, "label_values(") {
					labelValues = append(labelValues, s)
				}
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(doc)
	return exprs, labelValues
}

// TestGrafanaDashboard checks deploy/grafana/tributary.json: every PromQL
// expression parses (promtool, over a rules file made of them) and names
// only metrics, and labels, that the binaries export.
func TestGrafanaDashboard(t *testing.T) {
	const path = "../deploy/grafana/tributary.json"
	exprs, labelValues := dashboardQueries(t, path)
	if len(exprs) < 10 {
		t.Fatalf("%s has %d expressions; the dashboard is missing", path, len(exprs))
	}
	exported := exportedMetrics(t)
	// base is the metric a series name belongs to: a histogram's
	// _bucket, _sum and _count series are its own.
	base := func(name string) (string, bool) {
		if _, ok := exported[name]; ok {
			return name, true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suffix); ok {
				if _, ok := exported[b]; ok {
					return b, true
				}
			}
		}
		return "", false
	}
	selector := regexp.MustCompile(`\b(tributary_[a-z0-9_]+)\b(\{([^}]*)\})?`)
	matcher := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)`)
	grouping := regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	for _, e := range exprs {
		var labels []string
		for _, s := range selector.FindAllStringSubmatch(e, -1) {
			b, ok := base(s[1])
			if !ok {
				t.Errorf("expression %q names %s, which no binary exports", e, s[1])
				continue
			}
			labels = append(labels, exported[b]...)
			if strings.HasSuffix(s[1], "_bucket") {
				labels = append(labels, "le")
			}
			for _, m := range matcher.FindAllStringSubmatch(s[3], -1) {
				if !slices.Contains(exported[b], m[1]) {
					t.Errorf("expression %q matches label %q, which %s does not have (labels %v)", e, m[1], s[1], exported[b])
				}
			}
		}
		if len(labels) == 0 && !promMetric.MatchString(e) {
			t.Errorf("expression %q reads no tributary_ metric", e)
		}
		for _, g := range grouping.FindAllStringSubmatch(e, -1) {
			for _, l := range strings.Split(g[1], ",") {
				if l = strings.TrimSpace(l); l != "" && !slices.Contains(labels, l) {
					t.Errorf("expression %q groups by %q, which none of its metrics has", e, l)
				}
			}
		}
	}
	lv := regexp.MustCompile(`^label_values\((tributary_[a-z0-9_]+),\s*([a-z_]+)\)$`)
	for _, q := range labelValues {
		m := lv.FindStringSubmatch(q)
		if m == nil {
			t.Errorf("variable query %q is not label_values(<tributary metric>, <label>)", q)
			continue
		}
		if !slices.Contains(exported[m[1]], m[2]) {
			t.Errorf("variable query %q: %s has no label %s (labels %v)", q, m[1], m[2], exported[m[1]])
		}
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("TRIBUTARY_REQUIRE_STACK") == "1" {
			t.Fatal("promtool not found: run deploy/local/install.sh")
		}
		t.Skip("promtool not installed: expressions not parsed")
	}
	// promtool checks rules files, not bare expressions: one recording
	// rule per expression (a JSON string is a YAML double-quoted scalar).
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, e := range exprs {
		q, _ := json.Marshal(grafanaVariables.Replace(e))
		fmt.Fprintf(&rules, "      - record: dashboard:expr_%d\n        expr: %s\n", i, q)
	}
	file := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(file, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules over the dashboard's expressions: %v\n%s\n%s", err, out, rules.String())
	}
}
