package reader

import (
	"fmt"
	"github.com/tributary/tributary/bench/internal/benchwork"
	"io"
	"slices"
)

// Output of `bench reader`: per-run lines, the summary table, JSON records.

// run is one measured run of one client.
type run struct {
	Case   string `json:"case"`
	Client string `json:"client"` // tributary, pg_recvlogical, pg_select
	Rep    int    `json:"rep"`
	Kafka  string `json:"kafka,omitempty"`
	// Changes is the number of row changes (or snapshot rows) the run moved.
	Changes  int64   `json:"changes"`
	WALBytes int64   `json:"wal_bytes,omitempty"`
	LoadAvg1 float64 `json:"load_avg_1m"`
	// Seconds is the measured window: for the reader, from START_REPLICATION
	// (or, for the snapshot, from the slot's creation) to the target; for
	// pg_recvlogical from its start to its exit at --endpos.
	Seconds float64 `json:"seconds"`
	// StartupSeconds is the reader's own start-up before that window
	// (connections, topics, state topic, slot); not in Seconds.
	StartupSeconds float64 `json:"startup_seconds,omitempty"`
	ChangesPerSec  float64 `json:"changes_per_second"`
	// CPUSeconds is user+system CPU of this process (reader) or of the
	// pg_recvlogical process, over Seconds.
	CPUSeconds float64 `json:"cpu_seconds"`
	Cores      float64 `json:"cores"`
	// WalsenderCPUSeconds is the walsender backend's CPU (server side).
	WalsenderCPUSeconds float64 `json:"walsender_cpu_seconds,omitempty"`
	// BrokerCPUSeconds is the local Kafka broker's CPU (--broker-pid).
	BrokerCPUSeconds float64 `json:"broker_cpu_seconds,omitempty"`
	// MachineBusyCores is how many of the machine's cores were busy on
	// average (everything, other users included), from /proc/stat.
	MachineBusyCores    float64 `json:"machine_busy_cores"`
	PeakRSSMB           float64 `json:"peak_rss_mb,omitempty"`
	AllocBytesPerChange float64 `json:"alloc_bytes_per_change,omitempty"`
	AllocsPerChange     float64 `json:"allocs_per_change,omitempty"`
}

// summary is one (case, client) over its repetitions.
type summary struct {
	Case               string    `json:"case"`
	Client             string    `json:"client"`
	Reps               int       `json:"reps"`
	Changes            int64     `json:"changes"`
	MedianPerSec       float64   `json:"median_changes_per_second"`
	MinPerSec          float64   `json:"min_changes_per_second"`
	MaxPerSec          float64   `json:"max_changes_per_second"`
	MedianSeconds      float64   `json:"median_seconds"`
	MedianCores        float64   `json:"median_cores"`
	MedianCPUPerM      float64   `json:"median_cpu_seconds_per_million"`
	MaxPeakRSSMB       float64   `json:"max_peak_rss_mb,omitempty"`
	MedianWalsenderCPU float64   `json:"median_walsender_cpu_seconds,omitempty"`
	MedianBrokerCPU    float64   `json:"median_broker_cpu_seconds,omitempty"`
	MachineBusyCores   []float64 `json:"machine_busy_cores"`
	// Ratio is this client's median changes/s over the reference's
	// (pg_recvlogical, or pg_select for the snapshot); set on tributary rows.
	Ratio   float64   `json:"ratio_to_reference,omitempty"`
	LoadAvg []float64 `json:"load_avg_1m"`
}

func summarize(runs []run) []summary {
	var out []summary
	idx := map[[2]string]int{}
	groups := map[[2]string][]run{}
	for _, r := range runs {
		k := [2]string{r.Case, r.Client}
		if _, ok := idx[k]; !ok {
			idx[k] = len(idx)
		}
		groups[k] = append(groups[k], r)
	}
	keys := make([][2]string, len(idx))
	for k, i := range idx {
		keys[i] = k
	}
	for _, k := range keys {
		g := groups[k]
		s := summary{Case: k[0], Client: k[1], Reps: len(g), Changes: g[0].Changes}
		pick := func(f func(run) float64) []float64 {
			v := make([]float64, len(g))
			for i, r := range g {
				v[i] = f(r)
			}
			return v
		}
		per := pick(func(r run) float64 { return r.ChangesPerSec })
		s.MedianPerSec, s.MinPerSec, s.MaxPerSec = median(per), slices.Min(per), slices.Max(per)
		s.MedianSeconds = median(pick(func(r run) float64 { return r.Seconds }))
		s.MedianCores = median(pick(func(r run) float64 { return r.Cores }))
		s.MedianCPUPerM = median(pick(func(r run) float64 { return r.CPUSeconds / float64(r.Changes) * 1e6 }))
		s.MaxPeakRSSMB = slices.Max(pick(func(r run) float64 { return r.PeakRSSMB }))
		s.MedianWalsenderCPU = median(pick(func(r run) float64 { return r.WalsenderCPUSeconds }))
		s.MedianBrokerCPU = median(pick(func(r run) float64 { return r.BrokerCPUSeconds }))
		s.LoadAvg = pick(func(r run) float64 { return r.LoadAvg1 })
		s.MachineBusyCores = pick(func(r run) float64 { return r.MachineBusyCores })
		out = append(out, s)
	}
	for i := range out {
		if out[i].Client != "tributary" {
			continue
		}
		for _, ref := range out {
			if ref.Case == out[i].Case && (ref.Client == "pg_recvlogical" || ref.Client == "pg_select") && ref.MedianPerSec > 0 {
				out[i].Ratio = out[i].MedianPerSec / ref.MedianPerSec
			}
		}
	}
	return out
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func printRun(r run) {
	fmt.Printf("  %-15s rep %d: %9.0f changes/s  %7.2f s  cpu %6.2f s (%.2f cores)", r.Client, r.Rep, r.ChangesPerSec, r.Seconds, r.CPUSeconds, r.Cores)
	if r.WalsenderCPUSeconds > 0 {
		fmt.Printf("  walsender cpu %.2f s", r.WalsenderCPUSeconds)
	}
	if r.PeakRSSMB > 0 {
		fmt.Printf("  peak RSS %.0f MB  alloc %.0f B / %.1f objects per change  startup %.2f s", r.PeakRSSMB, r.AllocBytesPerChange, r.AllocsPerChange, r.StartupSeconds)
	}
	if r.BrokerCPUSeconds > 0 {
		fmt.Printf("  broker cpu %.2f s", r.BrokerCPUSeconds)
	}
	fmt.Printf("  machine busy %.2f cores  load %.2f\n", r.MachineBusyCores, r.LoadAvg1)
}

func printSummary(w io.Writer, sum []summary) {
	opt := func(v float64, f string) string {
		if v <= 0 {
			return ""
		}
		return fmt.Sprintf(f, v)
	}
	benchwork.Table(w, "case\tclient\treps\tchanges\tchanges/s (median)\tmin..max\ts\tcores\tCPU s/M\tpeak RSS MB\twalsender CPU s\tbroker CPU s\tmachine busy\tratio\t", sum, func(s summary) string {
		return fmt.Sprintf("%s\t%s\t%d\t%d\t%.0f\t%.0f..%.0f\t%.2f\t%.2f\t%.2f\t%s\t%s\t%s\t%.1f..%.1f\t%s\t", s.Case, s.Client, s.Reps, s.Changes,
			s.MedianPerSec, s.MinPerSec, s.MaxPerSec, s.MedianSeconds, s.MedianCores, s.MedianCPUPerM,
			opt(s.MaxPeakRSSMB, "%.0f"), opt(s.MedianWalsenderCPU, "%.2f"), opt(s.MedianBrokerCPU, "%.2f"),
			slices.Min(s.MachineBusyCores), slices.Max(s.MachineBusyCores), opt(s.Ratio, "%.2f"))
	})
}
