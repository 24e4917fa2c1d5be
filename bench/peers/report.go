package peers

import (
	"encoding/json"
	"fmt"
	"github.com/tributary/tributary/bench/internal/benchwork"
	"io"
	"os"
	"runtime"
	"strings"
)

func printRun(r runResult) {
	fmt.Printf("  %-15s %9.0f changes/s  %6.2f s  %.2f cores  %6.1f CPU-s/M  peak RSS %7.1f MB  start-up %.2f s (%.2f CPU-s)  %4.0f B/record  load %s\n",
		r.System, r.ChangesPerSec, r.Seconds, r.Cores, r.CPUSecPerM, r.PeakRSSMB, r.StartupSeconds, r.StartupCPU, r.RecordBytes, r.LoadAvgBefore)
}

// ratio compares tributary with one Debezium variant on one case.
type ratio struct {
	Case       string  `json:"case"`
	Versus     string  `json:"versus"`
	Throughput float64 `json:"throughput"`     // tributary changes/s ÷ debezium's (goal >= 2)
	CPUPerChg  float64 `json:"cpu_per_change"` // tributary CPU-s per change ÷ debezium's
	PeakRSS    float64 `json:"peak_rss"`       // tributary peak RSS ÷ debezium's (goal <= 0.05)
}

func ratios(results []runResult) []ratio {
	var out []ratio
	versusDebezium(results, func(r runResult) string { return r.System }, func(t, d runResult) bool { return d.Case == t.Case && d.Error == "" },
		func(t, d runResult) {
			out = append(out, ratio{Case: t.Case, Versus: d.System, Throughput: t.ChangesPerSec / d.ChangesPerSec,
				CPUPerChg: t.CPUSecPerM / d.CPUSecPerM, PeakRSS: t.PeakRSSMB / d.PeakRSSMB})
		})
	return out
}

// versusDebezium calls pair with every tributary result t of rs and every
// Debezium variant's result d that compares with it (same(t, d)).
func versusDebezium[T any](rs []T, system func(T) string, same func(t, d T) bool, pair func(t, d T)) {
	for _, t := range rs {
		if system(t) != "tributary" {
			continue
		}
		for _, d := range rs {
			if strings.HasPrefix(system(d), "debezium") && same(t, d) {
				pair(t, d)
			}
		}
	}
}

func printTable(w io.Writer, results []runResult) {
	if len(results) == 0 {
		return
	}
	fmt.Fprintln(w)
	benchwork.Table(w, "system\tcase\tchanges/s\tCPU cores\tCPU-s per M changes\tpeak RSS MB\tstart-up s\tB/record\tload avg\t", results, func(r runResult) string {
		if r.Error != "" {
			return fmt.Sprintf("%s\t%s\tFAILED\t\t\t\t\t\t%s\t", r.System, r.Case, r.LoadAvgBefore)
		}
		return fmt.Sprintf("%s\t%s\t%.0f\t%.2f\t%.1f\t%.1f\t%.2f\t%.0f\t%s\t",
			r.System, r.Case, r.ChangesPerSec, r.Cores, r.CPUSecPerM, r.PeakRSSMB, r.StartupSeconds, r.RecordBytes, r.LoadAvgBefore)
	})
	rs := ratios(results)
	if len(rs) == 0 {
		return
	}
	fmt.Fprintln(w)
	benchwork.Table(w, "tributary ÷\tcase\tchanges/s (goal ≥ 2)\tCPU-s per change\tpeak RSS (goal ≤ 0.05)\t", rs, func(r ratio) string {
		return fmt.Sprintf("%s\t%s\t%.2f\t%.2f\t%.3f\t", r.Versus, r.Case, r.Throughput, r.CPUPerChg, r.PeakRSS)
	})
}

func writeJSON(c config, results []runResult, lats []latResult) error {
	out := map[string]any{
		"machine": map[string]any{"nproc": runtime.NumCPU(), "go": runtime.Version()},
		"config": map[string]any{"shard": c.shard, "kafka": c.brokers, "cases": c.cases, "systems": c.systems,
			"rows": c.work.Rows, "txn_rows": c.work.TxnRows, "title_bytes": c.work.TitleBytes, "updates": c.work.Updates,
			"update_rows": c.work.UpdateRows, "update_txn_rows": c.work.UpdateTxnRows, "row_bytes": c.work.RowBytes,
			"partitions": c.partitions, "poll": c.poll.String(), "java_opts": c.javaOpts,
			"debezium_tuned": c.tuned, "debezium_lowlat": c.lowlat,
			"latency": map[string]any{"rates": c.lat.rates, "systems": c.lat.systems, "phase": c.lat.phase.String(),
				"warmup": c.lat.warmup.String(), "txn_rows": c.lat.txnRows, "workers": c.lat.workers}},
		"runs": results, "ratios": ratios(results),
		"latency": lats, "latency_ratios": latRatios(lats),
	}
	j, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(c.jsonOut, j, 0o644)
}

func printLatRun(r latResult) {
	fmt.Printf("  %-15s %6d changes/s (%6.0f achieved)  p50 %7.1f  p95 %7.1f  p99 %7.1f  max %7.1f ms  %.2f cores  load %s\n",
		r.System, r.RateTarget, r.RateAchieved, r.P50ms, r.P95ms, r.P99ms, r.MaxMs, r.Cores, r.LoadAvg)
}

// latRatio compares tributary's commit → Kafka latency with one Debezium
// variant's at one target rate.
type latRatio struct {
	Rate   int     `json:"rate"`
	Versus string  `json:"versus"`
	P50    float64 `json:"p50"` // tributary's ÷ debezium's
	P95    float64 `json:"p95"`
	P99    float64 `json:"p99"`
}

func latRatios(lats []latResult) []latRatio {
	var out []latRatio
	versusDebezium(lats, func(r latResult) string { return r.System }, func(t, d latResult) bool { return d.RateTarget == t.RateTarget },
		func(t, d latResult) {
			out = append(out, latRatio{Rate: t.RateTarget, Versus: d.System, P50: t.P50ms / d.P50ms, P95: t.P95ms / d.P95ms, P99: t.P99ms / d.P99ms})
		})
	return out
}

func printLatency(w io.Writer, lats []latResult) {
	if len(lats) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commit → Kafka (LogAppendTime) latency, ms")
	benchwork.Table(w, "system\ttarget changes/s\tachieved\tchanges\tp50\tp95\tp99\tmax\tmean\tCPU cores\tdrain s\tpeak RSS MB\tload avg\t", lats, func(r latResult) string {
		return fmt.Sprintf("%s\t%d\t%.0f\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.2f\t%.2f\t%.1f\t%s\t",
			r.System, r.RateTarget, r.RateAchieved, r.Changes, r.P50ms, r.P95ms, r.P99ms, r.MaxMs, r.MeanMs, r.Cores, r.DrainSeconds, r.PeakRSSMB, r.LoadAvg)
	})
	rs := latRatios(lats)
	if len(rs) == 0 {
		return
	}
	fmt.Fprintln(w)
	benchwork.Table(w, "tributary ÷\tchanges/s\tp50\tp95\tp99\t", rs, func(r latRatio) string {
		return fmt.Sprintf("%s\t%d\t%.3f\t%.3f\t%.3f\t", r.Versus, r.Rate, r.P50, r.P95, r.P99)
	})
}
