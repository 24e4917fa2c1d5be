package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary/tributary/internal/loadgen"
	"github.com/tributary/tributary/internal/query"
)

// TestReaderManyShards: one cdc-reader process serves shards 1, 5 and 17
// of a fleet file (--shards 1-5,17: the fleet's own numbers, a range and a
// list). Under loadgen's traffic the verify binary passes, every row of
// every shard compared. Then shard 5's PostgreSQL is stopped: the process
// keeps running, shows shard 5 down (tributary_reader_up{shard="5"} 0, its
// restarts counted) and shards 1 and 17 keep streaming — rows written on
// them after the stop are served, and their watermarks pass the stop.
// While it is down its slot is dropped (PostgreSQL started on another
// port, the slot dropped, stopped again), so it comes back with its slot
// lost; started on its port again, shard 5 recovers alone (a new copy), and
// verify passes on all three again. The process was started once.
func TestReaderManyShards(t *testing.T) {
	numbers := []int{1, 5, 17}
	f := setupLoadgenFleet(t, numbers, "manyshards_")
	st, p, dsns, dir, fleetFile, tablesFile, env := f.st, f.p, f.dsns, f.dir, f.fleetFile, f.tablesFile, f.env
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	runCtx, runCancel := context.WithCancel(context.Background())
	defer runCancel()
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	rd, rlog := manyShardsReader(t, p, "1-5,17", fleetFile, tablesFile, metricsAddr, env)
	defer stopReaderProcess(t, rd, rlog)
	p.startLoader(runCtx, "l1")
	for _, s := range numbers {
		p.waitSlotStreaming(ctx, s)
	}

	ring, err := loadgen.DefaultRing(numbers)
	if err != nil {
		t.Fatal(err)
	}
	gen, err := loadgen.New(ctx, loadgen.Config{DSNs: dsns, Ring: ring, Workspaces: 30, Workers: 4, BodyBytes: 2000,
		Tables: loadgen.Tables{Documents: p.table(), Invoices: p.table() + "_inv", Moves: p.table() + "_moves"}}, p.log)
	if err != nil {
		t.Fatal(err)
	}
	defer gen.Close()
	if err := gen.RunFor(ctx, 100, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := gen.Stats.Errors.Load(); n != 0 || gen.Stats.DocsCreated.Load() == 0 {
		t.Fatalf("traffic: %d errors, %d documents created", n, gen.Stats.DocsCreated.Load())
	}
	bin := filepath.Join(dir, "verify")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../cmd/verify").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	verifyAll := func(when string) {
		t.Helper()
		rep, code, stderr := verifyBinary(ctx, t, bin, p, fleetFile, tablesFile, env, "90s")
		if code != 0 || !rep.Passed {
			t.Fatalf("verify %s: exit %d, mismatches %+v, differences %+v\n%s", when, code, rep.Mismatches, rep.Differences, stderr)
		}
		for _, tr := range rep.Tables {
			if len(tr.Shards) != len(numbers) {
				t.Errorf("verify %s: table %s checked shards %+v, want %v", when, tr.Table, tr.Shards, numbers)
			}
			for _, sh := range tr.Shards {
				if sh.Sampled || int64(sh.Checked) != sh.SourceRows || sh.ClickHouseRows != sh.SourceRows {
					t.Errorf("verify %s: table %s shard %d: %+v, want every row checked", when, tr.Table, sh.Shard, sh)
				}
			}
		}
		t.Logf("verify %s: passed, %d rows checked", when, rep.Checked())
	}
	verifyAll("with all three shards streaming")

	// Shard 5's PostgreSQL goes away.
	down := pgCluster(ctx, t, st.ShardDSNs[5])
	slot := fmt.Sprintf("e2e_%s_%d", p.suffix, 5)
	down.stop(ctx, t)
	stopped := time.Now()
	restarted := false
	defer func() {
		if !restarted { // never leave the stack's shard down, even after ctx ended
			sctx, scancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer scancel()
			if down.port != "" {
				down.stop(sctx, t)
			}
			down.start(sctx, t, "")
		}
	}()
	waitMetric(ctx, t, metricsAddr, `tributary_reader_restarts_total{shard="5"}`, func(v float64) bool { return v >= 1 })
	if v := readMetric(t, metricsAddr, `tributary_reader_up{shard="5"}`); v != 0 {
		t.Errorf("shard 5 up = %v while its PostgreSQL is stopped, want 0", v)
	}
	// The others keep streaming and stay fresh.
	for _, s := range []int{1, 17} {
		id := p.insert(ctx, s, 7, fmt.Sprintf("while shard 5 is down, on %d", s), "b")
		p.waitDoc(ctx, id, fmt.Sprintf("written on shard %d while shard 5 is down", s), func(code int, _ docAnswer) bool { return code == 200 })
	}
	p.waitFor(ctx, 90*time.Second, "watermarks of shards 1 and 17 past shard 5's stop", func() bool {
		f := shardsFreshness(ctx, t, p)
		return f[1].CommitTS.After(stopped) && f[17].CommitTS.After(stopped)
	})
	for _, s := range []string{"1", "17"} {
		if v := readMetric(t, metricsAddr, `tributary_reader_up{shard="`+s+`"}`); v != 1 {
			t.Errorf("shard %s up = %v while shard 5 is down, want 1", s, v)
		}
		if v := readMetric(t, metricsAddr, `tributary_reader_restarts_total{shard="`+s+`"}`); v != 0 {
			t.Errorf("shard %s restarted %v times, want never: only shard 5 failed", s, v)
		}
	}
	if f := shardsFreshness(ctx, t, p); !f[5].CommitTS.Before(stopped) {
		t.Errorf("shard 5's watermark %s is after its PostgreSQL stopped (%s)", f[5].CommitTS, stopped)
	}

	// Its slot is lost meanwhile: dropped on a port the reader does not know.
	down.start(ctx, t, strconv.Itoa(freePort(t)))
	down.exec(ctx, t, "SELECT pg_drop_replication_slot($1)", slot)
	down.stop(ctx, t)
	down.start(ctx, t, "")
	restarted = true
	p.waitSlotStreaming(ctx, 5)
	waitMetric(ctx, t, metricsAddr, `tributary_reader_up{shard="5"}`, func(v float64) bool { return v == 1 })
	if err := gen.RunFor(ctx, 100, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	verifyAll("after shard 5 came back with its slot lost")
	b, _ := os.ReadFile(rlog)
	for _, want := range []string{"shard failed; retrying it alone", "shard=5"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("reader log lacks %q", want)
		}
	}
	if n := rd.startCount(); n != 1 {
		t.Errorf("the reader process was started %d times, want once: shard 5's failure must not end it", n)
	}
	if err := p.failed(); err != nil {
		t.Fatal(err)
	}
}

// manyShardsReader starts one supervised cdc-reader serving shards (a
// --shards value) of fleetFile, metrics on addr, failed shards retried
// after 200 ms to 1 s.
func manyShardsReader(t *testing.T, p *pipeline, shards, fleetFile, tablesFile, addr string, env []string) (*supervised, string) {
	t.Helper()
	bin := binaries(t)
	logf, err := os.Create(filepath.Join(t.TempDir(), "reader.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	args := []string{bin + "/cdc-reader", "--fleet", fleetFile, "--shards", shards, "--tables", tablesFile,
		"--kafka-brokers", strings.Join(p.brokers, ","), "--slot", "e2e_" + p.suffix + "_{shard}",
		"--publication", "e2e_" + p.suffix, "--state-topic", "e2e_" + p.suffix + ".state", "--metrics-addr", addr,
		"--status-interval", "200ms", "--watermark-interval", "100ms", "--heartbeat-interval", "1s",
		"--retry-min", "200ms", "--retry-max", "1s", "--log-level", "info"}
	rd := &supervised{name: "reader", log: logf, done: make(chan struct{}), args: args,
		env: append([]string{"TRIBUTARY_PG_DSN="}, env...)}
	go rd.run()
	return rd, logf.Name()
}

// shardsFreshness is GET /v1/shards by shard number.
func shardsFreshness(ctx context.Context, t *testing.T, p *pipeline) map[int]query.ShardFreshness {
	t.Helper()
	code, _, body := apiGet(ctx, t, p.api.URL, "/v1/shards", "")
	var out struct{ Shards []query.ShardFreshness }
	if err := json.Unmarshal(body, &out); code != 200 || err != nil {
		t.Fatalf("GET /v1/shards: %d %v %s", code, err, body)
	}
	m := map[int]query.ShardFreshness{}
	for _, f := range out.Shards {
		m[f.Shard] = f
	}
	return m
}

// readMetric is the value of one series (name{labels} exactly as exported)
// on the /metrics of addr; -1 if absent.
func readMetric(t *testing.T, addr, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %q is not a number", series, v)
			}
			return f
		}
	}
	return -1
}

// waitMetric waits until series on addr satisfies ok, at most 90 s.
func waitMetric(ctx context.Context, t *testing.T, addr, series string, ok func(float64) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for {
		v := readMetric(t, addr, series)
		if ok(v) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s is %v: timed out waiting", series, v)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// cluster is one of the stack's PostgreSQL clusters, stopped and started
// with pg_ctl as user postgres (PLATFORM.md), found by its DSN.
type cluster struct {
	dataDir, dsn string
	port         string // while started on another port (start), else ""
}

func pgCluster(ctx context.Context, t *testing.T, dsn string) *cluster {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	c := &cluster{dsn: dsn}
	if err := conn.QueryRow(ctx, "SHOW data_directory").Scan(&c.dataDir); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *cluster) pgCtl(ctx context.Context, t *testing.T, args ...string) {
	t.Helper()
	pgctl := "/usr/lib/postgresql/15/bin/pg_ctl"
	cmd := exec.CommandContext(ctx, "runuser", append([]string{"-u", "postgres", "--", pgctl, "-D", c.dataDir, "-w", "-t", "60"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pg_ctl %v: %v\n%s", args, err, out)
	}
}

func (c *cluster) stop(ctx context.Context, t *testing.T) { c.pgCtl(ctx, t, "-m", "fast", "stop") }

// start starts the cluster on its own port, or on port when not "".
func (c *cluster) start(ctx context.Context, t *testing.T, port string) {
	args := []string{"-l", filepath.Join(c.dataDir, "test-restart.log")}
	if port != "" {
		args = append(args, "-o", "-p "+port)
	}
	c.port = port
	c.pgCtl(ctx, t, append(args, "start")...)
}

// exec runs sql on the cluster at the port it was started on.
func (c *cluster) exec(ctx context.Context, t *testing.T, sql string, args ...any) {
	t.Helper()
	cfg, err := pgx.ParseConfig(c.dsn)
	if err != nil {
		t.Fatal(err)
	}
	if c.port != "" {
		p, _ := strconv.Atoi(c.port)
		cfg.Port = uint16(p)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}
