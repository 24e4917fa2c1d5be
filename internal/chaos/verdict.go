package chaos

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
)

// Verdict is what a soak found. Passed says whether it holds.
type Verdict struct {
	Seed         int64
	Faults       []*fault
	MinFaults    int
	Converged    time.Duration    // from the end of traffic until fresh
	Answers      []answer         // the probe's
	PeakRSS      map[string]int64 // bytes, by component
	VerifyPassed bool
	VerifyTail   string
	LagMax       float64 // the loader's lag metric at the end, largest partition
	LagNonZero   int     // partitions whose lag metric is not 0 at the end
	DLQ          int64
	SlotWAL      map[string]int64 // bytes retained, by "shard/slot"
	Problems     []string         // the soak could not check something
}

// outside5xx counts the probe's 5xx answers (and refused connections)
// outside every outage: from a fault's injection until fresh after it.
func (v *Verdict) outside5xx() (n int, first []string) {
	for _, a := range v.Answers {
		if a.code != 0 && a.code < 500 {
			continue
		}
		inside := false
		for _, f := range v.Faults {
			until := f.at.Add(f.fresh)
			if f.fresh == 0 {
				until = f.at.Add(f.recovered + time.Hour) // never fresh: the rest counts as outage
			}
			if !a.at.Before(f.at) && !a.at.After(until) {
				inside = true
				break
			}
		}
		if !inside {
			n++
			if len(first) < 5 {
				first = append(first, fmt.Sprintf("%s %s %d", a.at.UTC().Format("15:04:05.000"), a.route, a.code))
			}
		}
	}
	return n, first
}

// Passed tells whether the soak's promises held.
func (v *Verdict) Passed() bool { return len(v.failures()) == 0 }

func (v *Verdict) failures() []string {
	var out []string
	if len(v.Faults) < v.MinFaults {
		out = append(out, fmt.Sprintf("%d faults, want at least %d", len(v.Faults), v.MinFaults))
	}
	injected := map[string]bool{}
	for _, f := range v.Faults {
		injected[f.kind] = true
		if f.err != nil {
			out = append(out, fmt.Sprintf("%s %s at %s: %v", f.kind, f.target, f.at.UTC().Format("15:04:05"), f.err))
		}
	}
	// A soak asked for as many faults as there are kinds must have
	// recovered from each kind (the schedule deals them all: draw).
	if v.MinFaults >= len(Kinds) {
		var missing []string
		for _, k := range Kinds {
			if !injected[k] {
				missing = append(missing, k)
			}
		}
		if len(missing) > 0 {
			out = append(out, "no fault of kind "+strings.Join(missing, ", "))
		}
	}
	if !v.VerifyPassed {
		out = append(out, "the verifier found differences (or did not run)")
	}
	if v.DLQ != 0 {
		out = append(out, fmt.Sprintf("%d dead-letter records, want 0", v.DLQ))
	}
	if v.LagNonZero != 0 {
		out = append(out, fmt.Sprintf("the loader's lag metric is not 0 on %d partitions after convergence (max %g)", v.LagNonZero, v.LagMax))
	}
	if n, first := v.outside5xx(); n != 0 {
		out = append(out, fmt.Sprintf("%d API 5xx or refused outside outages: %s", n, strings.Join(first, "; ")))
	}
	return append(out, v.Problems...)
}

// Print writes the verdict.
func (v *Verdict) Print(w io.Writer) {
	fmt.Fprintf(w, "\n──────────────── chaos verdict (seed %d) ────────────────\n", v.Seed)
	fmt.Fprintf(w, "faults: %d (want >= %d)\n", len(v.Faults), v.MinFaults)
	fmt.Fprintf(w, "  %-16s %5s %12s %12s %12s\n", "kind", "n", "back p50", "fresh p50", "fresh max")
	for _, k := range Kinds {
		var back, fresh []time.Duration
		for _, f := range v.Faults {
			if f.kind == k {
				back = append(back, f.recovered)
				if f.fresh > 0 {
					fresh = append(fresh, f.fresh)
				}
			}
		}
		fmt.Fprintf(w, "  %-16s %5d %12s %12s %12s\n", k, len(back), pct(back, 50), pct(fresh, 50), pct(fresh, 100))
	}
	fmt.Fprintf(w, "converged after the traffic: %s\n", v.Converged.Round(time.Millisecond))
	fmt.Fprintf(w, "dead-letter records: %d (want 0)\n", v.DLQ)
	verify := "pass"
	if !v.VerifyPassed {
		verify = "FAIL"
	}
	fmt.Fprintf(w, "verifier: %s\n%s\n", verify, indent(v.VerifyTail))
	n, _ := v.outside5xx()
	fmt.Fprintf(w, "API answers probed: %d; 5xx or refused outside outages: %d (want 0)\n", len(v.Answers), n)
	fmt.Fprintf(w, "  /readyz answers: %s\n", readyCounts(v.Answers))
	fmt.Fprintf(w, "loader lag metric after convergence: max %g, partitions above 0: %d (want 0)\n", v.LagMax, v.LagNonZero)
	fmt.Fprintln(w, "peak RSS:")
	for _, k := range slices.Sorted(maps.Keys(v.PeakRSS)) {
		fmt.Fprintf(w, "  %-14s %7.1f MB\n", k, float64(v.PeakRSS[k])/(1<<20))
	}
	fmt.Fprintln(w, "retained WAL per slot:")
	for _, k := range slices.Sorted(maps.Keys(v.SlotWAL)) {
		fmt.Fprintf(w, "  %-30s %9.1f kB\n", k, float64(v.SlotWAL[k])/1024)
	}
	if fails := v.failures(); len(fails) > 0 {
		fmt.Fprintln(w, "VERDICT: FAIL")
		for _, f := range fails {
			fmt.Fprintln(w, "  - "+f)
		}
		return
	}
	fmt.Fprintln(w, "VERDICT: PASS")
}

// readyCounts counts /readyz answers by code and status.
func readyCounts(answers []answer) string {
	c := map[string]int{}
	for _, a := range answers {
		if a.route == "/readyz" {
			c[fmt.Sprintf("%d %s", a.code, a.status)]++
		}
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(c)) {
		parts = append(parts, fmt.Sprintf("%s: %d", strings.TrimSpace(k), c[k]))
	}
	return strings.Join(parts, ", ")
}

func pct(ds []time.Duration, p int) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s) - 1) * p / 100
	return s[i].Round(10 * time.Millisecond).String()
}

func indent(s string) string {
	if s == "" {
		return "  (no output)"
	}
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}
