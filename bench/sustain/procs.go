package sustain

// The processes a step measures, found from the stack's and the demo's
// pid files, and their CPU and memory from /proc.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tributary/tributary/bench/internal/benchwork"
)

// process is one measured process: pid, the group it is reported in,
// and whether its resident memory means anything alone (PostgreSQL's is
// mostly shared buffers, counted once per backend).
type process struct {
	group string
	pid   int
	tree  bool // add its children's CPU (PostgreSQL's backends)
	rss   bool
}

// cpu is the process's CPU so far; with tree, its children's too (live
// ones, and those it has reaped).
func (p process) cpu() time.Duration {
	if !p.tree {
		return benchwork.CPUOf(p.pid)
	}
	total, _ := benchwork.CPUWithReaped(p.pid)
	for _, c := range benchwork.Children(p.pid) {
		total += benchwork.CPUOf(c)
	}
	return total
}

func (p process) rssKB() int64 {
	n, _ := benchwork.StatusKB(p.pid, "VmRSS")
	return n
}

// procs finds the pipeline's and the stack's processes from pid files.
func procs(home string) ([]process, error) {
	var out []process
	add := func(group, file string, tree, rss bool) {
		b, err := os.ReadFile(file)
		if err != nil {
			return
		}
		line, _, _ := strings.Cut(string(b), "\n")
		pid, err := strconv.Atoi(strings.TrimSpace(line))
		if err != nil || !alive(pid) {
			return
		}
		out = append(out, process{group: group, pid: pid, tree: tree, rss: rss})
	}
	demo, _ := filepath.Glob(filepath.Join(home, "demo", "*.pid"))
	slices.Sort(demo)
	for _, f := range demo {
		name := strings.TrimSuffix(filepath.Base(f), ".pid")
		if strings.HasPrefix(name, "reader-") {
			name = "readers" // cores: all of them; MB: the largest
		}
		add(name, f, false, true)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no demo processes in %s/demo: start the pipeline with make demo", home)
	}
	pgs, _ := filepath.Glob(filepath.Join(home, "pg", "shard*", "postmaster.pid"))
	for _, f := range pgs {
		add("postgresql (all shards)", f, true, false)
	}
	add("kafka", filepath.Join(home, "kafka", "kafka.pid"), false, true)
	add("embedded kafka", filepath.Join(home, "embedded-kafka", "embedded-kafka.pid"), false, true)
	add("clickhouse", filepath.Join(home, "clickhouse", "clickhouse-server.pid"), false, true)
	out = append(out, process{group: "bench (loadgen)", pid: os.Getpid(), rss: true})
	return out, nil
}

func procNames(ps []process) []string {
	var out []string
	for _, p := range ps {
		out = append(out, fmt.Sprintf("%s %d", p.group, p.pid))
	}
	return out
}

func alive(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}
