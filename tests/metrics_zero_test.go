package tests

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tributary/tributary/internal/api"
	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/loader"
	"github.com/tributary/tributary/internal/query"
	"github.com/tributary/tributary/internal/reader"
	"github.com/tributary/tributary/internal/ring"
	"github.com/tributary/tributary/internal/servertls"
	"github.com/tributary/tributary/internal/tables"
	"github.com/tributary/tributary/internal/testcert"
)

// ruleSelector is one metric selector of an alert's expression: the
// metric, its label matchers (= as one value, =~ as its alternatives) and
// the labels the expression groups by.
type ruleSelector struct {
	alert, metric string
	matchers      map[string][]string
	by            []string
}

// ruleSelectors reads every metric selector of the alert rules file.
func ruleSelectors(t *testing.T) []ruleSelector {
	t.Helper()
	b, err := os.ReadFile("../deploy/prometheus/tributary-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	sel := regexp.MustCompile(`(tributary_[a-z_]+)(\{([^}]*)\})?`)
	matcher := regexp.MustCompile(`(\w+)\s*(=~|=)\s*"([^"]*)"`)
	byRe := regexp.MustCompile(`by \(([^)]*)\)`)
	var out []ruleSelector
	blocks := regexp.MustCompile(`(?m)^\s*- alert:\s*`).Split(string(b), -1)[1:]
	for _, blk := range blocks {
		alert := strings.TrimSpace(strings.SplitN(blk, "\n", 2)[0])
		m := regexp.MustCompile(`(?m)^\s*expr:\s*(.*)$`).FindStringSubmatch(blk)
		if m == nil {
			t.Fatalf("alert %s has no expr line", alert)
		}
		expr := m[1]
		var by []string
		for _, g := range byRe.FindAllStringSubmatch(expr, -1) {
			for _, l := range strings.Split(g[1], ",") {
				if l = strings.TrimSpace(l); l != "" && !slices.Contains(by, l) {
					by = append(by, l)
				}
			}
		}
		seen := map[string]bool{}
		for _, s := range sel.FindAllStringSubmatch(expr, -1) {
			if seen[s[0]] {
				continue // the new-series form names a selector three times
			}
			seen[s[0]] = true
			rs := ruleSelector{alert: alert, metric: s[1], matchers: map[string][]string{}, by: by}
			for _, mm := range matcher.FindAllStringSubmatch(s[3], -1) {
				if mm[2] == "=~" {
					rs.matchers[mm[1]] = strings.Split(mm[3], "|")
				} else {
					rs.matchers[mm[1]] = []string{mm[3]}
				}
			}
			out = append(out, rs)
		}
	}
	if len(out) == 0 {
		t.Fatal("no tributary_ selectors in the rules")
	}
	return out
}

// series is one exported series: its labels.
type series map[string]string

func gather(t *testing.T, name string, reg *prometheus.Registry) map[string][]series {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("%s: gather: %v", name, err)
	}
	out := map[string][]series{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			s := series{}
			for _, lp := range m.GetLabel() {
				s[lp.GetName()] = lp.GetValue()
			}
			// A version and a certificate's expiry are readings, not counts.
			if v := metricValue(mf.GetType(), m); v != 0 && !strings.HasPrefix(mf.GetName(), "tributary_ring_map_version") &&
				mf.GetName() != "tributary_tls_certificate_expiry_timestamp_seconds" {
				t.Errorf("%s: %s%v is %v before any event, want 0", name, mf.GetName(), s, v)
			}
			out[mf.GetName()] = append(out[mf.GetName()], s)
		}
	}
	return out
}

func metricValue(typ dto.MetricType, m *dto.Metric) float64 {
	switch typ {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue()
	}
	return 0
}

// unknowable are the metrics whose rule labels take values no config
// names: they appear with their first event, and their rules fire from an
// absent series (the new-series form for counters; gauges need nothing).
var unknowable = map[string]string{
	"tributary_reader_unrouted_changes_total": "relation: a published relation no table config names",
	"tributary_loader_consumer_lag_records":   "partition: known once the group assigns it (a gauge)",
	"tributary_loader_replica_stalled":        "shard, replica: a ClickHouse cluster's nodes, in cluster mode only (a gauge)",
}

// TestRuleSeriesExistFromStart builds the reader, the loader and the API
// as their binaries do, before any event, and checks that every series an
// alert rule reads is exported already, at 0, for every table, topic and
// shard the config names. The list comes from the rules file, so a new
// rule cannot forget it: a counter born at its first event shows no
// increase, and its alert would not fire.
func TestRuleSeriesExistFromStart(t *testing.T) {
	cfg, err := tables.Load("../deploy/local/tables.json")
	if err != nil {
		t.Fatal(err)
	}
	rm, err := ring.Load("../deploy/local/ringmap.json")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	const shard = 7 // not 0: nothing may assume the demo's numbering

	regs := map[string]*prometheus.Registry{}
	regs["cdc-reader"] = prometheus.NewRegistry()
	reader.New(reader.Config{Shard: shard, Tables: cfg, Slot: "s", Publication: "p"}, log, regs["cdc-reader"])
	regs["loader"] = prometheus.NewRegistry()
	loader.New(loader.Config{Tables: cfg, Ring: rm, RevenueAggregator: true, CompactInterval: time.Minute},
		&chstore.Store{}, log, regs["loader"])
	// The API over HTTPS exports its certificate's expiry from start-up.
	regs["api (HTTPS)"] = prometheus.NewRegistry()
	certFile, keyFile := filepath.Join(t.TempDir(), "api.crt"), filepath.Join(t.TempDir(), "api.key")
	testcert.NewCA(t, "metrics CA").Server(t, "api").Write(t, certFile, keyFile)
	if _, err := servertls.New(servertls.Options{CertFile: certFile, KeyFile: keyFile}, log, regs["api (HTTPS)"]); err != nil {
		t.Fatal(err)
	}
	// The API's move gauges are counted in ClickHouse at each scrape: with
	// the stack, against a database with nothing in it yet.
	if st := stackIfAny(t); st != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		store, err := chstore.Open(ctx, chstore.Options{Addr: st.ClickHouseAddr, Database: "e2e_zero_" + randSuffix()})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		regs["api"] = prometheus.NewRegistry()
		api.New(api.Config{Tables: cfg, DocumentsTable: cfg.Moves.DocumentsTable, QueryTimeout: 10 * time.Second},
			query.New(store.Conn(), store.Database()), log, regs["api"])
	}
	exported := map[string]map[string][]series{}
	for name, reg := range regs {
		exported[name] = gather(t, name, reg)
	}

	known := map[string][]string{"table": nil, "topic": nil}
	for _, tc := range cfg.Tables {
		known["table"] = append(known["table"], tc.Name)
		known["topic"] = append(known["topic"], tc.Topic)
	}
	var ringShards []string
	for _, s := range rm.Shards() {
		ringShards = append(ringShards, strconv.Itoa(s.ID))
	}

	for _, rs := range ruleSelectors(t) {
		if why, ok := unknowable[rs.metric]; ok {
			t.Logf("%s: %s not checked (%s)", rs.alert, rs.metric, why)
			continue
		}
		var found []series
		var bin string
		for name, ex := range exported {
			if s, ok := ex[rs.metric]; ok {
				found, bin = s, name
			}
		}
		if found == nil {
			if regs["api"] == nil && strings.HasPrefix(rs.metric, "tributary_moves_") {
				continue // needs the stack's ClickHouse
			}
			t.Errorf("%s reads %s, which no binary exports before its first event", rs.alert, rs.metric)
			continue
		}
		// Every combination of the matchers' values must be there, for
		// every known value of the labels the rule groups by.
		want := []series{{}}
		for l, vs := range rs.matchers {
			want = cross(want, l, vs)
		}
		for _, l := range rs.by {
			var vs []string
			switch {
			case l == "shard" && bin == "cdc-reader":
				vs = []string{strconv.Itoa(shard)}
			case l == "shard":
				vs = ringShards
			case l == "table" && strings.HasPrefix(rs.metric, "tributary_misplaced_"):
				for _, tc := range cfg.Tables {
					if tc.ShardKey != "" {
						vs = append(vs, tc.Name)
					}
				}
			case l == "table" && strings.HasPrefix(rs.metric, "tributary_moves_"):
				vs = []string{cfg.Moves.DocumentsTable}
			default:
				vs = known[l]
			}
			if vs != nil {
				want = cross(want, l, vs)
			}
		}
		for _, w := range want {
			if !slices.ContainsFunc(found, func(s series) bool { return matches(s, w) }) {
				t.Errorf("%s reads %s%v: %s exports no such series before its first event (it has %v)", rs.alert, rs.metric, w, bin, found)
			}
		}
		for _, l := range rs.by {
			if !slices.ContainsFunc(found, func(s series) bool { _, ok := s[l]; return ok }) {
				t.Errorf("%s groups %s by %q, a label %s does not export", rs.alert, rs.metric, l, bin)
			}
		}
	}
}

// stackIfAny is the local stack, or nil when there is none and none is
// required.
func stackIfAny(t *testing.T) *Stack {
	t.Helper()
	if os.Getenv("TRIBUTARY_REQUIRE_STACK") != "1" && os.Getenv("TRIBUTARY_STACK_ENV") == "" && os.Getenv("TRIBUTARY_HOME") == "" {
		if _, err := os.Stat("../.stack/stack.env"); err != nil {
			t.Log("no local stack: the API's move gauges are not checked")
			return nil
		}
	}
	return loadStack(t)
}

func cross(in []series, label string, values []string) []series {
	var out []series
	for _, s := range in {
		for _, v := range values {
			n := series{label: v}
			for k, x := range s {
				n[k] = x
			}
			out = append(out, n)
		}
	}
	return out
}

func matches(s, want series) bool {
	for k, v := range want {
		if s[k] != v {
			return false
		}
	}
	return true
}
