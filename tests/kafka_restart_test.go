package tests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestKafkaKilledComesBack: the stack's broker is killed with -9 under a
// running pipeline and brought back by `stack.sh up`, as an operator (or
// the chaos soak) would; the broker runs again with the start-up flags of
// stack.d/kafka.sh, and the pipeline carries on: rows written before, and
// after, are in ClickHouse exactly as on the shards. It prints how long
// `up` took (deploy/local/README.md, "A killed Kafka comes back in
// seconds"); no assertion on the time, which the machine's load decides.
func TestKafkaKilledComesBack(t *testing.T) {
	p := newPipeline(t, []int{0, 1}, nil)
	home := p.stack.Env["TRIBUTARY_HOME"]
	if home == "" || p.stack.Env["TRIBUTARY_KAFKA_KIND"] == "embedded" {
		t.Skip("the stack runs no Apache Kafka of its own (TRIBUTARY_KAFKA=embedded)")
	}
	if n := p.stack.Env["TRIBUTARY_KAFKA_BROKERS_COUNT"]; n != "" && n != "1" {
		t.Skipf("the stack runs %s Kafka nodes; this test kills the single node", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for i := range 50 {
		p.insert(ctx, p.shards[i%2], int64(i%5), fmt.Sprintf("before %d", i), "")
	}
	p.waitFor(ctx, 2*time.Minute, "the rows written before the kill in ClickHouse", func() bool { return p.compare(ctx, p.table()) == "" })

	pidFile := filepath.Join(home, "kafka", "kafka.pid")
	pid := readPidFile(t, pidFile)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 kafka (pid %d): %v", pid, err)
	}
	for processAlive(pid) {
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("kafka (pid %d) killed", pid)
	// Written while Kafka is down: the readers hold them until it is back.
	for i := range 20 {
		p.insert(ctx, p.shards[i%2], int64(i%5), fmt.Sprintf("during %d", i), "")
	}

	start := time.Now()
	up := exec.CommandContext(ctx, "../deploy/local/stack.sh", "up")
	up.Env = append(os.Environ(), "TRIBUTARY_HOME="+home, "TRIBUTARY_KAFKA="+p.stack.Env["TRIBUTARY_KAFKA_KIND"],
		"TRIBUTARY_SHARDS="+p.stack.Env["TRIBUTARY_SHARDS"], "TRIBUTARY_WAIT_TIMEOUT=300")
	out, err := up.CombinedOutput()
	if err != nil {
		t.Fatalf("stack.sh up after kill -9 of kafka: %v\n%s", err, out)
	}
	took := time.Since(start)
	newPid := readPidFile(t, pidFile)
	t.Logf("stack.sh up brought kafka back (pid %d) in %s, the broker using %s of CPU to ready; load %s",
		newPid, took.Round(100*time.Millisecond), cpuOf(newPid), loadAvg())

	// The restarted broker runs with the fast-start flags: C1 only, and the
	// class-data archive when the jar cache has one (else it records its
	// classes for it).
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", newPid))
	if err != nil {
		t.Fatalf("kafka's command line: %v", err)
	}
	args := strings.Split(string(cmdline), "\x00")
	if os.Getenv("TRIBUTARY_KAFKA_JIT") == "" && !hasArg(args, "-XX:TieredStopAtLevel=1") {
		t.Errorf("restarted kafka runs without -XX:TieredStopAtLevel=1: %q", args)
	}
	if !hasArgPrefix(args, "-XX:SharedArchiveFile=") && !hasArgPrefix(args, "-XX:DumpLoadedClassList=") {
		t.Errorf("restarted kafka neither uses nor records a class-data archive: %q", args)
	}
	props, err := os.ReadFile(filepath.Join(home, "kafka", "server.properties"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"broker.heartbeat.interval.ms=500", "broker.session.timeout.ms=3000"} {
		if !strings.Contains(string(props), "\n"+want+"\n") {
			t.Errorf("kafka's server.properties lacks %s", want)
		}
	}

	for i := range 50 {
		p.insert(ctx, p.shards[i%2], int64(i%5), fmt.Sprintf("after %d", i), "")
	}
	p.waitFor(ctx, 3*time.Minute, "every row (before, during and after the kill) in ClickHouse", func() bool { return p.compare(ctx, p.table()) == "" })
	if err := p.failed(); err != nil {
		t.Fatalf("a component failed across the Kafka restart: %v", err)
	}
}

func readPidFile(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil || pid <= 0 {
		t.Fatalf("pid file %s: %q", file, b)
	}
	return pid
}

// processAlive: pid runs and is not a zombie.
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z"
}

// cpuOf is the CPU time (user and system) pid has used so far.
func cpuOf(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "?"
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return "?"
	}
	u, _ := strconv.Atoi(f[11])
	k, _ := strconv.Atoi(f[12])
	return (time.Duration(u+k) * 10 * time.Millisecond).String() // USER_HZ is 100 on Linux
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.Join(strings.Fields(string(b))[:min(3, len(strings.Fields(string(b))))], " ")
}

func hasArg(args []string, a string) bool {
	for _, x := range args {
		if x == a {
			return true
		}
	}
	return false
}

func hasArgPrefix(args []string, pre string) bool {
	for _, x := range args {
		if strings.HasPrefix(x, pre) {
			return true
		}
	}
	return false
}
