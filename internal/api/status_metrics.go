package api

// The status page's view of the other components: it scrapes the metrics
// endpoints the API is configured with (Config.ComponentMetrics: cdc-reader
// and loader /metrics URLs), server-side, each with a short timeout. An
// endpoint that does not answer, or answers something that is not the
// Prometheus text format, is shown as failed with its error; the page
// never fails because of it.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// componentScrapeTimeout bounds one metrics endpoint's answer: the page
// waits for the slowest endpoint, so a dead one costs this much at most.
const componentScrapeTimeout = 2 * time.Second

// componentClient scrapes the endpoints; each request has its own deadline.
var componentClient = &http.Client{Timeout: componentScrapeTimeout}

// maxMetricsBytes bounds what is read of one endpoint's answer.
const maxMetricsBytes = 8 << 20

// endpointResult is one endpoint's scrape: its families, or why not.
type endpointResult struct {
	URL      string `json:"url"`
	Err      string `json:"error,omitempty"`
	families map[string]*dto.MetricFamily
}

// scrapeComponents fetches every URL at once and returns the results in
// the order of urls.
func scrapeComponents(ctx context.Context, client *http.Client, urls []string) []endpointResult {
	out := make([]endpointResult, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fams, err := scrapeOne(ctx, client, u)
			out[i] = endpointResult{URL: u, families: fams}
			if err != nil {
				out[i].Err = err.Error()
			}
		}()
	}
	wg.Wait()
	return out
}

func scrapeOne(ctx context.Context, client *http.Client, url string) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(ctx, componentScrapeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("bad URL: %w", err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("answered %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, maxMetricsBytes))
	if err != nil {
		return nil, fmt.Errorf("not Prometheus text format: %w", err)
	}
	return fams, nil
}

// readerView is what one shard's reader reports.
type readerView struct {
	Shard int `json:"shard"`
	// State is streaming, snapshotting (with Progress), resnapshotting
	// (with Resnapshot), or error.
	State          string  `json:"state"`
	Progress       float64 `json:"snapshot_progress"` // 0..1, while snapshotting
	LagBytes       float64 `json:"slot_lag_bytes"`
	LagSeconds     float64 `json:"lag_seconds"`
	RetainedBytes  float64 `json:"retained_wal_bytes"`
	WALStatus      string  `json:"wal_status"`
	Errors         float64 `json:"errors"`
	SnapshotTables int     `json:"snapshot_tables"`
	// Down: the reader reports tributary_reader_up 0 after failed runs
	// (Restarts > 0): it waits to retry the shard.
	Down     bool    `json:"down"`
	Restarts float64 `json:"restarts"`
	// Resnapshots are the running resnapshots, by table (one table per
	// resnapshot; several tables may be copied at once); Resnapshot is the
	// first of them (nil: none).
	Resnapshots []*resnapshotView `json:"resnapshots,omitempty"`
	Resnapshot  *resnapshotView   `json:"resnapshot,omitempty"`

	tables    map[string]float64 // snapshot progress by table
	estimates map[string]float64 // estimated rows by table
}

// resnapshotView is a reader's running resnapshot: one table copied again
// while the shard streams.
type resnapshotView struct {
	Table string `json:"table"`
	// Progress is the fraction copied by the copy's row estimate (0..1);
	// EstimatedRows the estimate (0: unknown).
	Progress      float64 `json:"progress"`
	EstimatedRows float64 `json:"estimated_rows"`
	// SweepPending: copied (with a predicate), and the sweep that deletes
	// the rows the shard no longer has is not done yet.
	SweepPending bool `json:"sweep_pending"`
}

// settle computes the snapshot progress from the tables' (the initial
// snapshot's: a table being copied again counts as its resnapshot's).
func (rv *readerView) settle() {
	for table, p := range rv.tables {
		rv.SnapshotTables++
		if r := rv.resnapshotOf(table); r != nil {
			r.Progress, r.EstimatedRows = p, rv.estimates[table]
			continue
		}
		rv.Progress = min(rv.Progress, p)
	}
}

// partitionLag is the loader group's lag on one partition.
type partitionLag struct {
	Topic     string  `json:"topic"`
	Partition int     `json:"partition"`
	Records   float64 `json:"records"`
}

// stageTime is the loader's time in one stage.
type stageTime struct {
	Stage   string  `json:"stage"`
	Seconds float64 `json:"seconds"`
	Share   float64 `json:"share"` // of all stages, 0..1
}

// deadLetters counts dead letters by reason.
type deadLetters struct {
	Reason string  `json:"reason"`
	Count  float64 `json:"count"`
}

// componentsView is every scraped endpoint, read.
type componentsView struct {
	Configured bool             `json:"configured"`
	Endpoints  []endpointResult `json:"endpoints"`
	// Failed counts the endpoints that did not answer with metrics.
	Failed int `json:"failed"`
	// Readers are in the shards' rows of the JSON answer.
	Readers  map[int]*readerView `json:"-"`
	Lag      []partitionLag      `json:"loader_lag"`
	Stages   []stageTime         `json:"loader_stages"`
	DLQTotal float64             `json:"dead_letters_total"`
	DLQ      []deadLetters       `json:"dead_letters"`
	Loaders  int                 `json:"loaders"`
}

// readComponents turns the scrapes into the page's view: reader metrics
// carry a shard label; loader metrics are summed over loaders.
func readComponents(results []endpointResult) componentsView {
	v := componentsView{Configured: true, Endpoints: results, Readers: map[int]*readerView{}}
	stages := map[string]float64{}
	dlq := map[string]float64{}
	lag := map[partitionLag]float64{}
	for _, r := range results {
		if r.Err != "" {
			v.Failed++
			continue
		}
		if _, ok := r.families["tributary_loader_records_total"]; ok {
			v.Loaders++
		}
		readReaders(v.Readers, r.families)
		for _, m := range metricsOf(r.families, "tributary_loader_stage_seconds_total") {
			stages[label(m, "stage")] += value(m)
		}
		for _, m := range metricsOf(r.families, "tributary_loader_dlq_records_total") {
			dlq[label(m, "reason")] += value(m)
		}
		for _, m := range metricsOf(r.families, "tributary_loader_consumer_lag_records") {
			p, _ := strconv.Atoi(label(m, "partition"))
			lag[partitionLag{Topic: label(m, "topic"), Partition: p}] += value(m)
		}
	}
	for _, rv := range v.Readers {
		rv.settle()
		rv.State = readerState(rv)
	}
	v.Stages = stageTimes(stages)
	v.DLQTotal, v.DLQ = deadLetterCounts(dlq)
	v.Lag = partitionLags(lag)
	return v
}

// readReaders adds one scrape's reader metrics to readers, by their shard
// label (a reader serving many shards has a series per shard).
func readReaders(readers map[int]*readerView, families map[string]*dto.MetricFamily) {
	each := func(name string, f func(rv *readerView, m *dto.Metric)) {
		for _, m := range metricsOf(families, name) {
			shard, err := strconv.Atoi(label(m, "shard"))
			if err != nil {
				continue
			}
			rv := readers[shard]
			if rv == nil {
				rv = &readerView{Shard: shard, State: "streaming", Progress: 1, tables: map[string]float64{}, estimates: map[string]float64{}}
				readers[shard] = rv
			}
			f(rv, m)
		}
	}
	each("tributary_reader_lag_bytes", func(rv *readerView, m *dto.Metric) { rv.LagBytes = value(m) })
	each("tributary_reader_lag_seconds", func(rv *readerView, m *dto.Metric) { rv.LagSeconds = value(m) })
	each("tributary_reader_slot_retained_wal_bytes", func(rv *readerView, m *dto.Metric) { rv.RetainedBytes = value(m) })
	each("tributary_reader_errors_total", func(rv *readerView, m *dto.Metric) { rv.Errors += value(m) })
	each("tributary_reader_slot_wal_status", func(rv *readerView, m *dto.Metric) {
		if value(m) == 1 {
			rv.WALStatus = label(m, "status")
		}
	})
	each("tributary_reader_up", func(rv *readerView, m *dto.Metric) { rv.Down = value(m) == 0 })
	each("tributary_reader_restarts_total", func(rv *readerView, m *dto.Metric) { rv.Restarts = value(m) })
	each("tributary_reader_snapshot_progress_ratio", func(rv *readerView, m *dto.Metric) { rv.tables[label(m, "table")] = value(m) })
	each("tributary_reader_snapshot_estimated_rows", func(rv *readerView, m *dto.Metric) { rv.estimates[label(m, "table")] = value(m) })
	each("tributary_reader_resnapshot_active", func(rv *readerView, m *dto.Metric) {
		if value(m) == 1 {
			rv.Resnapshots = append(rv.Resnapshots, &resnapshotView{Table: label(m, "table")})
			slices.SortFunc(rv.Resnapshots, func(a, b *resnapshotView) int { return strings.Compare(a.Table, b.Table) })
			rv.Resnapshot = rv.Resnapshots[0]
		}
	})
	each("tributary_reader_resnapshot_sweep_pending", func(rv *readerView, m *dto.Metric) {
		if r := rv.resnapshotOf(label(m, "table")); r != nil && value(m) == 1 {
			r.SweepPending = true
		}
	})
}

// resnapshotOf is the running resnapshot of table (nil: none).
func (rv *readerView) resnapshotOf(table string) *resnapshotView {
	for _, r := range rv.Resnapshots {
		if r.Table == table {
			return r
		}
	}
	return nil
}

// readerState is what the page says a reader is doing: an error first,
// then snapshotting, resnapshotting, else its state as read (streaming).
func readerState(rv *readerView) string {
	switch {
	case rv.Down && rv.Restarts > 0:
		return fmt.Sprintf("error: down, retrying (%.0f failed runs)", rv.Restarts)
	case rv.WALStatus == "lost":
		return "error: slot lost"
	case rv.Progress < 1:
		return "snapshotting"
	case rv.Resnapshot != nil:
		return "resnapshotting"
	}
	return rv.State
}

// stageTimes lists the loaders' time by stage, with each stage's share,
// most first.
func stageTimes(stages map[string]float64) []stageTime {
	var total float64
	for _, s := range stages {
		total += s
	}
	var out []stageTime
	for name, s := range stages {
		st := stageTime{Stage: name, Seconds: s}
		if total > 0 {
			st.Share = s / total
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b stageTime) int { return cmpDesc(a.Seconds, b.Seconds, a.Stage, b.Stage) })
	return out
}

// deadLetterCounts sums the dead letters and lists the reasons that have
// any, most first.
func deadLetterCounts(dlq map[string]float64) (total float64, out []deadLetters) {
	for reason, n := range dlq {
		total += n
		if n > 0 {
			out = append(out, deadLetters{Reason: reason, Count: n})
		}
	}
	slices.SortFunc(out, func(a, b deadLetters) int { return cmpDesc(a.Count, b.Count, a.Reason, b.Reason) })
	return total, out
}

// partitionLags lists the consumer lag by topic and partition.
func partitionLags(lag map[partitionLag]float64) []partitionLag {
	var out []partitionLag
	for k, n := range lag {
		k.Records = n
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b partitionLag) int {
		if a.Topic != b.Topic {
			if a.Topic < b.Topic {
				return -1
			}
			return 1
		}
		return a.Partition - b.Partition
	})
	return out
}

// cmpDesc orders by x descending, then by name.
func cmpDesc(x, y float64, a, b string) int {
	switch {
	case x > y:
		return -1
	case x < y:
		return 1
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func metricsOf(fams map[string]*dto.MetricFamily, name string) []*dto.Metric {
	if f, ok := fams[name]; ok {
		return f.GetMetric()
	}
	return nil
}

func label(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}
