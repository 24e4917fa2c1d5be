package reader

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/tributary/tributary/bench/internal/benchwork"
)

// Measurement for `bench reader`: CPU (process, walsender, machine), peak
// RSS, allocations, and the reader's log milestones that bound a window.
// The /proc readings of a process are benchwork's.

// measure is what a reader run is measured against.
type measure struct {
	profile   bool
	ms0       runtime.MemStats
	broker    time.Duration
	brokerPID int
	busy      benchwork.MachineCPU
}

func (b *bench) beginMeasure(c *workCase, rep int) *measure {
	m := &measure{}
	runtime.GC()
	runtime.ReadMemStats(&m.ms0)
	// Resets VmHWM to the current RSS (Linux >= 4.0).
	os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) //nolint:errcheck // not fatal: VmHWM then covers the process
	b.logs.reset()
	if b.cfg.brokerPID > 0 {
		m.broker, m.brokerPID = benchwork.CPUOf(b.cfg.brokerPID), b.cfg.brokerPID
	}
	m.busy = benchwork.ReadMachineCPU()
	if b.cfg.cpuProfile != "" {
		f, err := os.Create(fmt.Sprintf("%s-%s-%d.pprof", b.cfg.cpuProfile, c.name, rep))
		if err == nil {
			if pprof.StartCPUProfile(f) == nil {
				m.profile = true
			}
		}
	}
	return m
}

// end fills res for the window from (a log mark with its rusage) to done.
func (m *measure) end(res *run, from mark, done time.Time) {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru) //nolint:errcheck // Linux
	if m.profile {
		pprof.StopCPUProfile()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	secs := done.Sub(from.at).Seconds()
	res.Seconds, res.ChangesPerSec = secs, float64(res.Changes)/secs
	res.CPUSeconds = cpuSeconds(from.ru, ru)
	res.Cores = res.CPUSeconds / secs
	res.PeakRSSMB = float64(benchwork.SelfKB("VmHWM")) / 1024
	if m.brokerPID > 0 {
		res.BrokerCPUSeconds = (benchwork.CPUOf(m.brokerPID) - m.broker).Seconds()
	}
	// From the start of the measurement (a little before the window).
	res.MachineBusyCores = benchwork.ReadMachineCPU().BusyCoresSince(m.busy)
	res.AllocBytesPerChange = float64(ms.TotalAlloc-m.ms0.TotalAlloc) / float64(res.Changes)
	res.AllocsPerChange = float64(ms.Mallocs-m.ms0.Mallocs) / float64(res.Changes)
}

func cpuSeconds(a, b syscall.Rusage) float64 {
	return time.Duration(b.Utime.Nano() + b.Stime.Nano() - a.Utime.Nano() - a.Stime.Nano()).Seconds()
}

// procUsage is what a process (the walsender) used so far.
type procUsage struct{ cpu time.Duration }

func readProcUsage(pid int) procUsage { return procUsage{cpu: benchwork.CPUOf(pid)} }

func (u procUsage) fill(res *run) { res.WalsenderCPUSeconds = u.cpu.Seconds() }

// mark is when a log message was first seen, with the process's rusage then.
type mark struct {
	at time.Time
	ru syscall.Rusage
}

// logMarks records the first occurrence of each reader log message: the
// reader says when it starts streaming and when it created its slot, which
// bound the measured windows.
type logMarks struct {
	mu   sync.Mutex
	seen map[string]mark
}

func (l *logMarks) reset() {
	l.mu.Lock()
	l.seen = map[string]mark{}
	l.mu.Unlock()
}

func (l *logMarks) note(msg string) {
	m := mark{at: time.Now()}
	syscall.Getrusage(syscall.RUSAGE_SELF, &m.ru) //nolint:errcheck // Linux
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[string]mark{}
	}
	if _, ok := l.seen[msg]; !ok {
		l.seen[msg] = m
	}
}

// printMarks prints, with --verbose, when the reader logged each message
// relative to the start of the measured window.
func (b *bench) printMarks(from mark, done time.Time) {
	if !b.cfg.verbose {
		return
	}
	b.logs.mu.Lock()
	type line struct {
		at  time.Duration
		msg string
	}
	var ls []line
	for msg, m := range b.logs.seen {
		ls = append(ls, line{m.at.Sub(from.at), msg})
	}
	b.logs.mu.Unlock()
	ls = append(ls, line{done.Sub(from.at), "(target reached)"})
	slices.SortFunc(ls, func(a, b line) int { return int(a.at - b.at) })
	for _, l := range ls {
		fmt.Printf("    %+8.3fs  %s\n", l.at.Seconds(), l.msg)
	}
}

func (l *logMarks) get(msg string) (mark, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m, ok := l.seen[msg]
	return m, ok
}

// markHandler notes every record's message and passes warnings and errors
// on to out.
type markHandler struct {
	marks *logMarks
	out   slog.Handler
}

func (h *markHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *markHandler) Handle(ctx context.Context, r slog.Record) error {
	h.marks.note(r.Message)
	if r.Level >= slog.LevelWarn {
		return h.out.Handle(ctx, r)
	}
	return nil
}

func (h *markHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &markHandler{marks: h.marks, out: h.out.WithAttrs(as)}
}

func (h *markHandler) WithGroup(name string) slog.Handler {
	return &markHandler{marks: h.marks, out: h.out.WithGroup(name)}
}
