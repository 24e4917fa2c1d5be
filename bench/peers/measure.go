package peers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/bench/internal/benchwork"
	"github.com/tributary/tributary/internal/envelope"
)

// A run, measured the same way for every system (see docs/peers.md):
//
//   - start: the first poll that finds the system's slot held by a walsender
//     in state catchup or streaming (pg_stat_replication), i.e. after
//     START_REPLICATION. What came before (JVM or Go start-up, connections,
//     checks) is reported separately as start-up.
//   - end: the first poll at which Kafka's high watermarks cover, in every
//     partition, the last change record of the run (found afterwards by
//     reading the topic). With acks=all, a record below the high watermark
//     is acknowledged.
//   - CPU: utime+stime of the process from /proc/<pid>/stat, read at each
//     poll; peak RSS: VmHWM of the process at the end (its whole life).

// sample is one poll during a run.
type sample struct {
	at  time.Time
	cpu time.Duration
	hwm []int64 // per partition
}

// runResult is one measured run of one system on one case.
type runResult struct {
	System          string  `json:"system"`
	Case            string  `json:"case"`
	Changes         int64   `json:"changes"`
	Seconds         float64 `json:"seconds"`
	ChangesPerSec   float64 `json:"changes_per_s"`
	CPUSeconds      float64 `json:"cpu_s"`
	Cores           float64 `json:"cores"`
	CPUSecPerM      float64 `json:"cpu_s_per_m_changes"`
	PeakRSSMB       float64 `json:"peak_rss_mb"`
	StartupSeconds  float64 `json:"startup_s"`
	StartupCPU      float64 `json:"startup_cpu_s"`
	RecordBytes     float64 `json:"avg_record_value_bytes"`
	RecordsInTopic  int64   `json:"records_in_topic"`
	LoadAvgBefore   string  `json:"loadavg_before"`
	LoadAvgAfter    string  `json:"loadavg_after"`
	EndCriterionLag float64 `json:"stop_after_end_s"`
	Error           string  `json:"error,omitempty"` // the run failed (a Debezium variant); no figures
}

// prime runs the system until it streams from its new slot, then stops it:
// slot created, empty table snapshotted, position stored. The measured run
// then resumes like a restarted reader or connector with a backlog.
func (b *bench) prime(ctx context.Context, s *system) error {
	argv, env, err := s.command(b.cfg, true)
	if err != nil {
		return err
	}
	p, err := startProcess(s.name+" (priming)", argv, env, filepath.Join(s.dir, "prime.log"))
	if err != nil {
		return err
	}
	for {
		if err := b.pollWait(ctx, p); err != nil {
			_ = p.stop(time.Minute)
			return fmt.Errorf("%s priming: %w", s.name, err)
		}
		st, err := b.slotState(ctx, s.slot)
		if err != nil {
			_ = p.stop(time.Minute)
			return err
		}
		if st.streaming {
			break
		}
		if time.Since(p.started) > 5*time.Minute {
			_ = p.stop(time.Minute)
			return fmt.Errorf("%s priming: not streaming after 5 min; log %s", s.name, p.logPath)
		}
	}
	if s.kind == "debezium" {
		time.Sleep(1500 * time.Millisecond) // heartbeats and two offset flushes (500 ms) after streaming began
	}
	if err := p.stop(2 * time.Minute); err != nil {
		return err
	}
	return s.primed()
}

// pollWait sleeps one poll interval and fails if the process exited.
func (b *bench) pollWait(ctx context.Context, p *process) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(b.cfg.poll):
	}
	if p.exited() {
		return fmt.Errorf("exited early (%v); last lines of %s: %s", p.exitErr(), p.logPath, logTail(p.logPath, 15))
	}
	return nil
}

// measure runs the system on the committed workload until it is done
// (tributary: its slot confirmed the target, which it does only for changes
// Kafka acknowledged; debezium: the topic holds every change), then derives
// the figures from the samples.
func (b *bench) measure(ctx context.Context, s *system, c *workCase, target envelope.LSN) (runResult, error) {
	res := runResult{System: s.name, Case: c.name, Changes: c.changes, LoadAvgBefore: benchwork.LoadAvg()}
	argv, env, err := s.command(b.cfg, false)
	if err != nil {
		return res, err
	}
	p, err := startProcess(s.name, argv, env, filepath.Join(s.dir, "run.log"))
	if err != nil {
		return res, err
	}
	defer p.stop(2 * time.Minute) //nolint:errcheck // stopped below; this is for errors
	samples, startIdx, err := b.sampleUntilDone(ctx, s, p, c.changes, target)
	if err != nil {
		return res, err
	}
	hwmKB, err := benchwork.StatusKB(p.pid(), "VmHWM")
	if err != nil {
		return res, err
	}
	stopAt := time.Now()
	if err := p.stop(2 * time.Minute); err != nil {
		return res, err
	}
	if err := s.resumed(p); err != nil {
		return res, err
	}
	res.LoadAvgAfter = benchwork.LoadAvg()
	tc, err := b.countChanges(ctx, s, samples[len(samples)-1].hwm)
	if err != nil {
		return res, err
	}
	if tc.changes != c.changes {
		return res, fmt.Errorf("%s: topic %s holds %d changes, want %d", s.name, s.dataTopic, tc.changes, c.changes)
	}
	end := firstCovering(samples, tc.lastChange)
	if end < 0 {
		return res, fmt.Errorf("%s: no sample covers the last change (bench bug)", s.name)
	}
	first, last := samples[startIdx], samples[end]
	window := last.at.Sub(first.at).Seconds()
	res.Seconds = window
	res.ChangesPerSec = float64(c.changes) / window
	res.CPUSeconds = (last.cpu - first.cpu).Seconds()
	res.Cores = res.CPUSeconds / window
	res.CPUSecPerM = res.CPUSeconds / (float64(c.changes) / 1e6)
	res.PeakRSSMB = float64(hwmKB) / 1024
	res.StartupSeconds = first.at.Sub(p.started).Seconds()
	res.StartupCPU = first.cpu.Seconds()
	res.RecordBytes = float64(tc.valueBytes) / float64(tc.changes)
	res.RecordsInTopic = tc.records
	res.EndCriterionLag = stopAt.Sub(last.at).Seconds()
	return res, nil
}

// sampleUntilDone polls CPU, the slot and Kafka's high watermarks every
// --poll until the system is done. It returns the samples and the index of
// the first one taken while the system streamed.
func (b *bench) sampleUntilDone(ctx context.Context, s *system, p *process, changes int64, target envelope.LSN) ([]sample, int, error) {
	var samples []sample
	startIdx := -1
	for {
		if err := b.pollWait(ctx, p); err != nil {
			return nil, 0, fmt.Errorf("%s: %w", s.name, err)
		}
		now := time.Now()
		cpu, err := benchwork.CPU(p.pid())
		if err != nil {
			return nil, 0, err
		}
		st, err := b.slotState(ctx, s.slot)
		if err != nil {
			return nil, 0, err
		}
		hwm, err := b.endOffsets(ctx, s.dataTopic)
		if err != nil {
			return nil, 0, err
		}
		samples = append(samples, sample{at: now, cpu: cpu, hwm: hwm})
		if startIdx < 0 && st.streaming {
			startIdx = len(samples) - 1
		}
		if startIdx >= 0 && b.done(s, st, hwm, changes, target) {
			return samples, startIdx, nil
		}
		if time.Since(p.started) > b.cfg.timeout {
			return nil, 0, fmt.Errorf("%s: not done after %s (streaming: %v); log %s", s.name, b.cfg.timeout, startIdx >= 0, p.logPath)
		}
	}
}

func (b *bench) done(s *system, st slotState, hwm []int64, changes int64, target envelope.LSN) bool {
	if s.kind == "tributary" {
		return st.confirmed >= target
	}
	var n int64
	for _, h := range hwm {
		n += h
	}
	return n >= changes
}

// firstCovering is the index of the first sample whose high watermarks are
// past last (per partition; -1: no change there), or -1.
func firstCovering(samples []sample, last []int64) int {
	for i, smp := range samples {
		ok := len(smp.hwm) == len(last)
		for p := 0; ok && p < len(last); p++ {
			ok = smp.hwm[p] > last[p]
		}
		if ok {
			return i
		}
	}
	return -1
}

// topicCount is what a run left in its data topic.
type topicCount struct {
	records, changes, valueBytes int64
	lastChange                   []int64 // per partition: offset of the last change, -1 if none
}

// countChanges reads the data topic up to the given end offsets: it checks
// that every change is there and finds the last one in each partition.
func (b *bench) countChanges(ctx context.Context, s *system, ends []int64) (topicCount, error) {
	tc := topicCount{lastChange: make([]int64, len(ends))}
	parts := map[int32]kgo.Offset{}
	remaining := 0
	for p, e := range ends {
		tc.lastChange[p] = -1
		if e > 0 {
			parts[int32(p)] = kgo.NewOffset().AtStart()
			remaining++
		}
	}
	if remaining == 0 {
		return tc, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(b.cfg.brokers, ",")...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{s.dataTopic: parts}),
		kgo.FetchMaxBytes(64<<20))
	if err != nil {
		return tc, err
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	finished := map[int32]bool{}
	for len(finished) < remaining {
		fs := cl.PollFetches(cctx)
		if err := cctx.Err(); err != nil {
			return tc, fmt.Errorf("read back %s: %w", s.dataTopic, err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = errors.Join(ferr, err) })
		if ferr != nil {
			return tc, fmt.Errorf("read back %s: %w", s.dataTopic, ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= ends[r.Partition] {
				return
			}
			tc.records++
			if s.isChange(r.Value) {
				tc.changes++
				tc.valueBytes += int64(len(r.Value))
				tc.lastChange[r.Partition] = r.Offset
			}
			if r.Offset == ends[r.Partition]-1 {
				finished[r.Partition] = true
			}
		})
	}
	return tc, nil
}

// logTail is the last n lines of a log file, for error messages.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return benchwork.LastLines(string(b), n)
}
