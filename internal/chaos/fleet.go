package chaos

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tributary/tributary/internal/fleet"
)

// stack is what the soak knows of the local stack: its environment
// (stack.env), shards, services' pid files and the demo's ports.
type stack struct {
	repo, home string
	env        map[string]string
	shards     []fleet.Endpoint
	ringMap    string // deploy/local/ringmap.json when the fleet is its shards 0..3, else ""
	offset     int
}

func loadStack(repo, home string) (*stack, error) {
	f, err := os.Open(filepath.Join(home, "stack.env"))
	if err != nil {
		return nil, fmt.Errorf("stack env: %w", err)
	}
	defer f.Close()
	s := &stack{repo: repo, home: home, env: map[string]string{}}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok && !strings.HasPrefix(k, "#") {
			s.env[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("stack env: %w", err)
	}
	if kind := s.env["TRIBUTARY_KAFKA_KIND"]; kind != "real" && kind != "both" {
		return nil, fmt.Errorf("the stack under %s runs Kafka %q: the soak needs real Kafka (TRIBUTARY_KAFKA=real or both)", home, kind)
	}
	if s.offset, err = strconv.Atoi(s.env["TRIBUTARY_PORT_OFFSET"]); err != nil {
		return nil, fmt.Errorf("stack env: TRIBUTARY_PORT_OFFSET: %w", err)
	}
	fl, err := fleet.Load(s.env["TRIBUTARY_FLEET"])
	if err != nil {
		return nil, err
	}
	if s.shards, err = fl.Resolve(func(k string) string { return s.env[k] }); err != nil {
		return nil, err
	}
	if fmt.Sprint(fl.Numbers()) == "[0 1 2 3]" {
		s.ringMap = filepath.Join(repo, "deploy/local/ringmap.json")
	}
	return s, nil
}

// environ is stack.env plus the demo's table config, for every child.
func (s *stack) environ() []string {
	out := []string{"TRIBUTARY_TABLES=" + filepath.Join(s.repo, "deploy/local/tables.json")}
	for k, v := range s.env {
		out = append(out, k+"="+v)
	}
	return out
}

// The demo's ports (deploy/local/demo.sh), shifted by the stack's offset.
func (s *stack) apiAddr() string       { return fmt.Sprintf("127.0.0.1:%d", 8080+s.offset) }
func (s *stack) loaderMetrics() string { return fmt.Sprintf("127.0.0.1:%d", 9101+s.offset) }
func (s *stack) readerMetrics(shard int) string {
	return fmt.Sprintf("127.0.0.1:%d", 9110+s.offset+shard)
}

// Pid files of the stack's services (deploy/local/stack.d).
func (s *stack) kafkaPidFile() string { return filepath.Join(s.home, "kafka", "kafka.pid") }
func (s *stack) clickhousePidFile() string {
	return filepath.Join(s.home, "clickhouse", "clickhouse-server.pid")
}
func (s *stack) pgDir(shard int) string {
	return filepath.Join(s.home, "pg", fmt.Sprintf("shard%d", shard))
}

// fleetProcs are the demo's processes, as deploy/local/demo.sh starts them.
type fleetProcs struct {
	readers map[int]*proc
	loader  *proc
	api     *proc
	traffic []*proc // loadgen: single-row operations with moves, and bulk transactions
}

func (f *fleetProcs) all() []*proc {
	out := []*proc{f.loader, f.api}
	for _, r := range f.readers {
		out = append(out, r)
	}
	return append(out, f.traffic...)
}

func startFleet(s *stack, cfg Config, log *os.File) *fleetProcs {
	bin := func(b string) string { return filepath.Join(s.repo, "bin", b) }
	env := s.environ()
	f := &fleetProcs{readers: map[int]*proc{}}
	var metrics []string
	for _, sh := range s.shards {
		n := strconv.Itoa(sh.Number)
		f.readers[sh.Number] = newProc("reader-"+n, log, append(env, "TRIBUTARY_PG_DSN="),
			bin("cdc-reader"), "--fleet", s.env["TRIBUTARY_FLEET"], "--shard", n, "--metrics-addr", s.readerMetrics(sh.Number))
		metrics = append(metrics, "http://"+s.readerMetrics(sh.Number)+"/metrics")
	}
	loaderArgs := []string{bin("loader"), "--metrics-addr", s.loaderMetrics(), "--revenue-aggregate-interval", "1s",
		// A restarted loader takes the killed one's place in the group at
		// once instead of waiting for its session to expire.
		"--instance-id", "chaos-loader"}
	ringArgs := []string{}
	if s.ringMap != "" {
		loaderArgs = append(loaderArgs, "--ring-map", s.ringMap)
		ringArgs = []string{"--ring-map", s.ringMap}
	}
	f.loader = newProc("loader", log, env, loaderArgs...)
	f.api = newProc("api", log, env, bin("api"), "--listen", s.apiAddr(), "--fleet", s.env["TRIBUTARY_FLEET"],
		"--component-metrics", strings.Join(append([]string{"http://" + s.loaderMetrics() + "/metrics"}, metrics...), ","))
	// loadgen exits when a shard goes away under it; the supervisor starts
	// it again, leaving the moves it was in half-done, as a crashed
	// application would.
	f.traffic = append(f.traffic, newProc("loadgen", log, env, append([]string{bin("loadgen"), "--rate", strconv.Itoa(cfg.Rate), "--duration", "0",
		"--move-percent", "3", "--half-done-percent", "10", "--legacy-percent", "3"}, ringArgs...)...))
	if cfg.BulkRate > 0 {
		f.traffic = append(f.traffic, newProc("loadgen-bulk", log, env, append([]string{bin("loadgen"), "--rate", strconv.Itoa(cfg.BulkRate),
			"--rows-per-op", strconv.Itoa(cfg.BulkRows), "--duration", "0", "--workers", "2"}, ringArgs...)...))
	}
	for _, p := range f.all() {
		go p.run()
	}
	return f
}
