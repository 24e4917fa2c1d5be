// Package charttest checks the Helm chart in ../tributary: helm lint finds
// nothing, and the manifests it renders, with the default values and with
// each example's, decode strictly into Kubernetes API types (an unknown or
// misspelt field fails) and hold what the chart promises: every shard of
// the fleet in exactly one reader set, probes and resource requests on
// every container, disruption budgets for the loaders and the API, and no
// secret in a manifest. It is its own Go module, so that Helm's
// dependencies stay out of the product's build.
package charttest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const chartDir = "../tributary"

// valueSets are the values the chart is checked with: its defaults and
// every example's values file.
func valueSets(t *testing.T) map[string]string {
	t.Helper()
	sets := map[string]string{"defaults": ""}
	files, err := filepath.Glob("../../examples/*/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no example values under deploy/examples/*/values.yaml")
	}
	for _, f := range files {
		sets[f] = f
	}
	return sets
}

func loadValues(t *testing.T, file string) map[string]any {
	t.Helper()
	if file == "" {
		return map[string]any{}
	}
	v, err := chartutil.ReadValuesFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestChartLints(t *testing.T) {
	for name, file := range valueSets(t) {
		t.Run(name, func(t *testing.T) {
			res := lint.AllWithKubeVersion(chartDir, loadValues(t, file), "tributary", nil)
			for _, m := range res.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("helm lint: %s", m)
				}
			}
		})
	}
}

// rendered is one rendered chart: its objects by kind.
type rendered struct {
	deployments  []appsv1.Deployment
	statefulSets []appsv1.StatefulSet
	services     []corev1.Service
	configMaps   []corev1.ConfigMap
	pdbs         []policyv1.PodDisruptionBudget
}

func render(t *testing.T, vals map[string]any) rendered {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: "prod", Namespace: "tributary", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	out, err := engine.Render(ch, rv)
	if err != nil {
		t.Fatal(err)
	}
	var r rendered
	names := make([]string, 0, len(out))
	for n := range out {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		for i, doc := range strings.Split(out[n], "\n---") {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			where := fmt.Sprintf("%s, document %d", n, i)
			var meta struct{ Kind string }
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			strict := func(v any) {
				if err := yaml.UnmarshalStrict([]byte(doc), v); err != nil {
					t.Fatalf("%s (%s) does not decode strictly: %v\n%s", where, meta.Kind, err, doc)
				}
			}
			switch meta.Kind {
			case "Deployment":
				var d appsv1.Deployment
				strict(&d)
				r.deployments = append(r.deployments, d)
			case "StatefulSet":
				var s appsv1.StatefulSet
				strict(&s)
				r.statefulSets = append(r.statefulSets, s)
			case "Service":
				var s corev1.Service
				strict(&s)
				r.services = append(r.services, s)
			case "ConfigMap":
				var c corev1.ConfigMap
				strict(&c)
				r.configMaps = append(r.configMaps, c)
			case "PodDisruptionBudget":
				var p policyv1.PodDisruptionBudget
				strict(&p)
				r.pdbs = append(r.pdbs, p)
			default:
				t.Fatalf("%s: unexpected kind %q (a Secret must never be rendered: secrets are the operator's)", where, meta.Kind)
			}
		}
	}
	return r
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func TestChartRendersValidObjects(t *testing.T) {
	for name, file := range valueSets(t) {
		t.Run(name, func(t *testing.T) {
			vals := loadValues(t, file)
			r := render(t, vals)
			if len(r.statefulSets) != 1 || len(r.configMaps) != 1 {
				t.Fatalf("%d statefulsets, %d configmaps; want one loader statefulset and one config", len(r.statefulSets), len(r.configMaps))
			}
			var readers, api []appsv1.Deployment
			for _, d := range r.deployments {
				switch d.Spec.Template.Labels["app.kubernetes.io/component"] {
				case "reader":
					readers = append(readers, d)
				case "api":
					api = append(api, d)
				default:
					t.Errorf("deployment %s has no known component", d.Name)
				}
			}
			checkReaders(t, r.configMaps[0], readers)
			pods := append([]corev1.PodTemplateSpec{r.statefulSets[0].Spec.Template}, api[0].Spec.Template)
			for _, d := range readers {
				pods = append(pods, d.Spec.Template)
			}
			for _, p := range pods {
				checkPod(t, p)
			}
			var budgets []string
			for _, p := range r.pdbs {
				budgets = append(budgets, p.Spec.Selector.MatchLabels["app.kubernetes.io/component"])
			}
			slices.Sort(budgets)
			if want := []string{"api", "loader"}; !slices.Equal(budgets, want) && *api[0].Spec.Replicas > 1 {
				t.Errorf("disruption budgets for %v, want %v", budgets, want)
			}
		})
	}
}

// checkReaders: every shard of the fleet file is in exactly one reader
// set's --shards, and each reader is one pod that never overlaps its
// successor (a second reader of a slot is refused).
func checkReaders(t *testing.T, cm corev1.ConfigMap, readers []appsv1.Deployment) {
	t.Helper()
	var fleet struct {
		Shards []struct {
			Shard int `json:"shard"`
		} `json:"shards"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["fleet.json"]), &fleet); err != nil {
		t.Fatalf("fleet.json: %v", err)
	}
	owner := map[int]string{}
	for _, d := range readers {
		if *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
			t.Errorf("reader %s: %d replicas, strategy %q; want 1 and Recreate", d.Name, *d.Spec.Replicas, d.Spec.Strategy.Type)
		}
		set, chUser := "", ""
		for _, a := range d.Spec.Template.Spec.Containers[0].Args {
			if v, ok := strings.CutPrefix(a, "--shards="); ok {
				set = v
			}
			if v, ok := strings.CutPrefix(a, "--clickhouse-user="); ok {
				chUser = v
			}
		}
		// The sweep that ends a resnapshot --where reads ClickHouse, as the
		// read-only user: without it such resnapshots are refused.
		if chUser == "" || strings.Contains(chUser, "loader") {
			t.Errorf("reader %s: --clickhouse-user=%q; want the read-only user (the sweep reads ClickHouse)", d.Name, chUser)
		}
		shards, err := parseSet(set)
		if err != nil {
			t.Fatalf("reader %s: --shards=%q: %v", d.Name, set, err)
		}
		for _, s := range shards {
			if o, dup := owner[s]; dup {
				t.Errorf("shard %d is in reader sets %s and %s", s, o, d.Name)
			}
			owner[s] = d.Name
		}
	}
	for _, s := range fleet.Shards {
		if owner[s.Shard] == "" {
			t.Errorf("shard %d of the fleet has no reader", s.Shard)
		}
		delete(owner, s.Shard)
	}
	for s, o := range owner {
		t.Errorf("reader %s serves shard %d, which is not in the fleet", o, s)
	}
}

// parseSet reads "0-15,20,22-23".
func parseSet(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, err
			}
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out, nil
}

// checkPod: probes, requests and limits, a read-only non-root container,
// and no secret value on the command line or in the environment.
func checkPod(t *testing.T, p corev1.PodTemplateSpec) {
	t.Helper()
	for _, c := range p.Spec.Containers {
		if c.LivenessProbe == nil || c.ReadinessProbe == nil {
			t.Errorf("container %s lacks a liveness or readiness probe", c.Name)
		}
		if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("container %s lacks a memory request or limit", c.Name)
		}
		if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			t.Errorf("container %s is not read-only and non-root", c.Name)
		}
		for _, a := range c.Args {
			if strings.Contains(a, "password=") || strings.Contains(a, "postgres://") {
				t.Errorf("container %s has a secret on its command line: %s", c.Name, a)
			}
		}
		for _, e := range c.Env {
			if e.Value != "" && (strings.Contains(strings.ToLower(e.Name), "password") || strings.Contains(e.Name, "DSN")) {
				t.Errorf("container %s has secret %s in its environment as a literal", c.Name, e.Name)
			}
		}
	}
}

func TestExampleFleetFileIsTheChartFleet(t *testing.T) {
	// The example's fleet.json (for the systemd layout) and its chart
	// values describe the same shards.
	for _, dir := range []string{"../../examples/fleet-32"} {
		raw, err := os.ReadFile(filepath.Join(dir, "fleet.json"))
		if err != nil {
			t.Fatal(err)
		}
		var file, vals struct {
			Shards []map[string]any `json:"shards"`
		}
		if err := yaml.Unmarshal(raw, &file); err != nil {
			t.Fatal(err)
		}
		v := loadValues(t, filepath.Join(dir, "values.yaml"))
		b, _ := yaml.Marshal(v["fleet"])
		if err := yaml.Unmarshal(b, &vals); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(file.Shards) != fmt.Sprint(vals.Shards) || len(file.Shards) != 32 {
			t.Errorf("%s: fleet.json has %d shards, values.yaml %d, or they differ", dir, len(file.Shards), len(vals.Shards))
		}
	}
}
