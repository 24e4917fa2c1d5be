package tests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tributary/tributary/internal/loadgen"
	"github.com/tributary/tributary/internal/verify"
)

// sparseStack is the stack with its first len(numbers) shards numbered
// numbers instead of 0, 1, ...: ShardDSNs[numbers[i]] is the stack's shard
// i, the other entries are empty. The readers, the move log and every tool
// then see only these numbers.
func sparseStack(t *testing.T, numbers []int) *Stack {
	t.Helper()
	st := loadStack(t)
	if len(st.ShardDSNs) < len(numbers) {
		t.Skipf("needs %d shards, the stack has %d", len(numbers), len(st.ShardDSNs))
	}
	out := *st
	size := slices.Max(numbers) + 1
	out.ShardDSNs, out.ReplDSNs = make([]string, size), make([]string, size)
	for i, n := range numbers {
		out.ShardDSNs[n], out.ReplDSNs[n] = st.ShardDSNs[i], st.ReplDSNs[i]
	}
	return &out
}

// writeFleet writes a fleet file numbering the shards numbers, each DSN in
// the variable SPARSE_<n>_DSN, and returns its path and those variables.
func writeFleet(t *testing.T, dir, name string, numbers []int, dsns map[int]string) (string, []string) {
	t.Helper()
	var entries []string
	var env []string
	for _, n := range numbers {
		entries = append(entries, fmt.Sprintf(`{"shard": %d, "name": "s%d", "dsn_env": "SPARSE_%d_DSN"}`, n, n, n))
		if d, ok := dsns[n]; ok {
			env = append(env, fmt.Sprintf("SPARSE_%d_DSN=%s", n, d))
		}
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(`{"shards": [`+strings.Join(entries, ",\n")+"]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, env
}

// TestFleetSparseVerify: a fleet numbered 1, 5 and 17 — readers started
// with those numbers (17 a cdc-reader process given only --fleet and
// --shard 17), loadgen's traffic (documents, invoices, saga moves
// logging from_shard/to_shard 1, 5, 17) written through its DSNs by number —
// is checked by the verify binary from a fleet file alone and passes, every
// shard of every table compared. The same DSNs numbered 0, 1, 2 (what
// TRIBUTARY_SHARD_0..N-1_DSN gave before there was a fleet file) do not
// pass; a fleet file naming a variable that is not set stops verify with
// exit status 2, naming the file, the shard and the variable, before it
// connects.
func TestFleetSparseVerify(t *testing.T) {
	t.Parallel()
	numbers := []int{1, 5, 17}
	f := setupLoadgenFleet(t, numbers, "fleetdocs_")
	p, dsns, dir, fleetFile, tablesFile, env := f.p, f.dsns, f.dir, f.fleetFile, f.tablesFile, f.env
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	runCtx, runCancel := context.WithCancel(context.Background())
	defer runCancel()
	// Shards 1 and 5 in-process; 17 is a cdc-reader process that finds its
	// DSN in the fleet file by its number alone.
	for _, s := range numbers[:2] {
		p.startReader(runCtx, s)
	}
	rd, rlog := fleetReaderProcess(t, p, 17, fleetFile, tablesFile, env)
	defer stopReaderProcess(t, rd, rlog)
	p.startLoader(runCtx, "l1")
	for _, s := range numbers {
		p.waitSlotStreaming(ctx, s)
	}

	// Traffic by shard number, with moves between 1, 5 and 17.
	ring, err := loadgen.DefaultRing(numbers)
	if err != nil {
		t.Fatal(err)
	}
	gen, err := loadgen.New(ctx, loadgen.Config{DSNs: dsns, Ring: ring, Workspaces: 30, Workers: 4, BodyBytes: 4000,
		MoveShare: 0.1, HalfDoneShare: 0.3,
		Tables: loadgen.Tables{Documents: p.table(), Invoices: p.table() + "_inv", Moves: p.table() + "_moves"}}, p.log)
	if err != nil {
		t.Fatal(err)
	}
	defer gen.Close()
	if err := gen.RunFor(ctx, 100, 4*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := gen.Stats.Errors.Load(); n != 0 || gen.Stats.DocsCreated.Load() == 0 || gen.Stats.MovesDone.Load() == 0 {
		t.Fatalf("traffic: %d errors, %d documents created, %d moves done", n, gen.Stats.DocsCreated.Load(), gen.Stats.MovesDone.Load())
	}
	for _, s := range numbers {
		if n := p.countSource(ctx, s, "SELECT count(*) FROM "+pgx.Identifier{p.table()}.Sanitize()); n == 0 {
			t.Fatalf("shard %d: no documents written", s)
		}
	}
	time.Sleep(1500 * time.Millisecond) // unfinished moves past their grace: stuck, on both sides

	bin := filepath.Join(dir, "verify")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../cmd/verify").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	runVerify := func(fleetFile string, env []string, wait string) (*verify.Report, int, string) {
		return verifyBinary(ctx, t, bin, p, fleetFile, tablesFile, env, wait)
	}

	rep, code, stderr := runVerify(fleetFile, env, "60s")
	if code != 0 || !rep.Passed {
		t.Fatalf("verify of the sparse fleet: exit %d, mismatches %+v, differences %+v\n%s", code, rep.Mismatches, rep.Differences, stderr)
	}
	if len(rep.Tables) != 3 {
		t.Fatalf("verify checked tables %+v, want the three configured", rep.Tables)
	}
	for _, tr := range rep.Tables {
		var got []int
		for _, sh := range tr.Shards {
			got = append(got, sh.Shard)
			if sh.Sampled || int64(sh.Checked) != sh.SourceRows || sh.ClickHouseRows != sh.SourceRows {
				t.Errorf("table %s shard %d: %+v, want every row checked", tr.Table, sh.Shard, sh)
			}
			if tr.Table == p.table() && sh.Checked == 0 {
				t.Errorf("table %s shard %d: no rows checked", tr.Table, sh.Shard)
			}
		}
		if !slices.Equal(got, numbers) {
			t.Errorf("table %s: shards %v checked, want %v", tr.Table, got, numbers)
		}
	}
	var positions []int
	for _, pos := range rep.Positions {
		positions = append(positions, pos.Shard)
	}
	if !slices.Equal(positions, numbers) {
		t.Errorf("positions of shards %v, want %v", positions, numbers)
	}
	if rep.Moves == nil || rep.Moves.Moves == 0 || rep.Revenue == nil || rep.Revenue.Groups == 0 {
		t.Errorf("moves %+v and revenue %+v: want both compared", rep.Moves, rep.Revenue)
	}

	// The same shards numbered 0..N-1: rows the API has on 1, 5 and 17
	// are nowhere the verifier looks.
	wrong := map[int]string{0: dsns[1], 1: dsns[5], 2: dsns[17]}
	zeroFleet, zeroEnv := writeFleet(t, dir, "zero.json", []int{0, 1, 2}, wrong)
	rep, code, stderr = runVerify(zeroFleet, zeroEnv, "1s") // the API never reports shards 0..2
	if code != 1 || rep.Passed {
		t.Fatalf("verify of the fleet numbered 0..2: exit %d, passed %v, want differences (exit 1)\n%s", code, rep.Passed, stderr)
	}

	// A variable not set: exit 2 before connecting, naming what is missing.
	partial := map[int]string{1: dsns[1], 17: dsns[17]}
	missing, missingEnv := writeFleet(t, dir, "missing.json", numbers, partial)
	started := time.Now()
	_, code, stderr = runVerify(missing, missingEnv, "60s")
	if code != 2 || !strings.Contains(stderr, missing+": shard 5 (s5).dsn_env: $SPARSE_5_DSN is not set") {
		t.Fatalf("verify with $SPARSE_5_DSN unset: exit %d, stderr:\n%s", code, stderr)
	}
	t.Logf("refused in %s: %s", time.Since(started).Round(time.Millisecond), strings.TrimSpace(stderr))
	if n := rd.startCount(); n != 1 {
		t.Errorf("the reader of shard 17 was started %d times, want once (it must find its DSN in the fleet file and keep running)", n)
	}
	if err := p.failed(); err != nil {
		t.Fatal(err)
	}
}

// fleetReaderProcess starts a supervised cdc-reader for shard of p that
// has no $TRIBUTARY_PG_DSN: it reads its DSN from fleetFile, whose
// variables env sets.
func fleetReaderProcess(t *testing.T, p *pipeline, shard int, fleetFile, tablesFile string, env []string) (*supervised, string) {
	t.Helper()
	bin := binaries(t)
	logf, err := os.Create(filepath.Join(t.TempDir(), "reader.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	args := []string{bin + "/cdc-reader", "--fleet", fleetFile, "--shard", strconv.Itoa(shard), "--tables", tablesFile,
		"--kafka-brokers", strings.Join(p.brokers, ","), "--slot", fmt.Sprintf("e2e_%s_%d", p.suffix, shard),
		"--publication", "e2e_" + p.suffix, "--state-topic", "e2e_" + p.suffix + ".state", "--metrics-addr", "",
		"--status-interval", "200ms", "--watermark-interval", "100ms", "--heartbeat-interval", "1s", "--log-level", "info"}
	rd := &supervised{name: "reader", log: logf, done: make(chan struct{}), args: args,
		env: append([]string{"TRIBUTARY_PG_DSN="}, env...)}
	go rd.run()
	return rd, logf.Name()
}

// loadgenFleet is a pipeline over a sparse stack (sparseStack) with
// loadgen's tables, and a fleet file and a tables file that name it.
type loadgenFleet struct {
	st *Stack
	p  *pipeline
	// dir holds the fleet file and the tables file.
	dir, fleetFile, tablesFile string
	// dsns are the shards' DSNs by number; env holds the fleet file's
	// DSN variables.
	dsns map[int]string
	env  []string
}

// setupLoadgenFleet sets up a loadgenFleet on shards numbers, its
// cleanup dropping loadgen's invoices and moves tables after the
// pipeline's stopped the readers.
func setupLoadgenFleet(t *testing.T, numbers []int, prefix string) loadgenFleet {
	t.Helper()
	f := loadgenFleet{st: sparseStack(t, numbers)}
	t.Cleanup(func() { // after p's cleanup stopped the readers
		if f.p == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, s := range f.p.shards {
			if conn, err := pgx.Connect(ctx, f.p.stack.ShardDSNs[s]); err == nil {
				conn.Exec(ctx, fmt.Sprintf("DROP TABLE IF EXISTS %s, %s", //nolint:errcheck
					pgx.Identifier{f.p.table() + "_inv"}.Sanitize(), pgx.Identifier{f.p.table() + "_moves"}.Sanitize()))
				conn.Close(ctx)
			}
		}
	})
	f.p = setupPipelineOn(t, f.st, numbers, nil, true, prefix, loadgenTablesJSON, loadgenDDL...)
	f.dsns = map[int]string{}
	for _, s := range numbers {
		f.dsns[s] = f.st.ShardDSNs[s]
	}
	f.dir = t.TempDir()
	f.fleetFile, f.env = writeFleet(t, f.dir, "fleet.json", numbers, f.dsns)
	f.tablesFile = writeTablesFile(t, f.dir, fmt.Sprintf(loadgenTablesJSON, f.p.suffix, f.p.table()))
	return f
}

// writeTablesFile writes a table config into dir and returns its path.
func writeTablesFile(t *testing.T, dir, config string) string {
	t.Helper()
	path := filepath.Join(dir, "tables.json")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// execSchemaFile runs the SQL file on every shard of numbers, with
// {{sfx}} the pipeline's suffix and {{shard}} the shard's number.
func execSchemaFile(ctx context.Context, t *testing.T, p *pipeline, numbers []int, file string) {
	t.Helper()
	schema, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range numbers {
		p.exec(ctx, s, strings.NewReplacer("{{sfx}}", p.suffix, "{{shard}}", strconv.Itoa(s)).Replace(string(schema)))
	}
}

// shardPools opens a pool on every shard of numbers, closed when the
// test ends.
func shardPools(ctx context.Context, t *testing.T, st *Stack, numbers []int) map[int]*pgxpool.Pool {
	t.Helper()
	pools := map[int]*pgxpool.Pool{}
	for _, s := range numbers {
		pool, err := pgxpool.New(ctx, st.ShardDSNs[s])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		pools[s] = pool
	}
	return pools
}

// trafficOn runs run on every shard of numbers at once until each
// returns; wait waits for them and reports, on the test's goroutine, the
// errors of those that failed before ctx ended.
func trafficOn(ctx context.Context, numbers []int, run func(context.Context, int) error) (wait func(t *testing.T)) {
	var wg sync.WaitGroup
	var opErrs sync.Map
	for _, s := range numbers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(ctx, s); err != nil && ctx.Err() == nil {
				opErrs.Store(s, err)
			}
		}()
	}
	return func(t *testing.T) {
		t.Helper()
		wg.Wait()
		opErrs.Range(func(k, v any) bool { t.Errorf("traffic on shard %v: %v", k, v); return true })
	}
}

// startCheckedFleet builds preflight and verify into dir, requires
// preflight to pass on the fleet's own config (preflightArgs added), then
// starts the fleet's processes (ofStart) and waits until every slot
// streams. It returns the processes and the verify binary.
func startCheckedFleet(ctx context.Context, t *testing.T, p *pipeline, dir, fleetFile, tablesFile string, fleetEnv, preflightArgs []string,
	loaderArgs ...string) (*ofProcs, string) {
	t.Helper()
	preflight, verifyBin := ofBuild(ctx, t, dir)
	code, stdout, stderr := runPreflight(ctx, t, preflight, fleetEnv, append([]string{"--tables", tablesFile, "--fleet", fleetFile}, preflightArgs...)...)
	if code != 0 {
		t.Fatalf("preflight on the fleet's own config: exit %d\n%s%s", code, stdout, stderr)
	}
	t.Logf("preflight: %s", strings.TrimSpace(stdout+stderr))
	procs := ofStart(t, p, fleetFile, tablesFile, fleetEnv, loaderArgs...)
	for _, s := range p.shards {
		p.waitSlotStreaming(ctx, s)
	}
	return procs, verifyBin
}
