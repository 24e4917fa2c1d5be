package tests

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds cdc-reader and loader once per test run.
func binaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "tributary-bin-")
		if buildErr != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", binDir+"/", "../cmd/cdc-reader", "../cmd/loader").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// supervised is a process restarted whenever it exits, until stopped, like
// a service manager would. kill sends SIGKILL: no cleanup runs.
type supervised struct {
	name string
	args []string
	env  []string
	log  *os.File

	mu       sync.Mutex
	cmd      *exec.Cmd
	stopping bool
	starts   int
	done     chan struct{}
}

func (s *supervised) run() {
	defer close(s.done)
	for {
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			return
		}
		cmd := exec.Command(s.args[0], s.args[1:]...)
		cmd.Env = append(os.Environ(), s.env...)
		cmd.Stdout, cmd.Stderr = s.log, s.log
		err := cmd.Start()
		if err == nil {
			s.cmd = cmd
			s.starts++
		}
		s.mu.Unlock()
		if err != nil {
			fmt.Fprintf(s.log, "supervisor: start failed: %v\n", err)
		} else {
			err = cmd.Wait()
			fmt.Fprintf(s.log, "supervisor: %s exited: %v\n", s.name, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func (s *supervised) kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Signal(syscall.SIGKILL) //nolint:errcheck // may have exited already
	}
}

func (s *supervised) stop() {
	s.mu.Lock()
	s.stopping = true
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck
	}
	s.mu.Unlock()
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		s.kill()
		<-s.done
	}
}

// TestKillNineAnywhere is DESIGN.md invariant 1 under fire: readers and the
// loader run as processes and are SIGKILLed at random moments while two
// shards take inserts, updates (TOASTed bodies), deletes and multi-row
// transactions. After the last restart the ClickHouse table must equal the
// shards exactly: same live rows, same shard, same values, no extras.
func TestKillNineAnywhere(t *testing.T) {
	bin := binaries(t)
	p := setupPipeline(t, []int{0, 1}, nil, true)
	tbl := p.table()
	dir := t.TempDir()
	tablesFile := filepath.Join(dir, "tables.json")
	if err := os.WriteFile(tablesFile, []byte(fmt.Sprintf(
		`{"topic_prefix":"e2e_%s.","tables":[{"name":%q,"id_column":"id","id_layout":"seed000"}]}`, p.suffix, tbl)), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "procs.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	brokers := strings.Join(p.brokers, ",")
	var procs []*supervised
	for _, s := range p.shards {
		procs = append(procs, &supervised{name: fmt.Sprintf("reader-%d", s), log: logf, done: make(chan struct{}),
			args: []string{bin + "/cdc-reader", "--shard", strconv.Itoa(s), "--tables", tablesFile, "--kafka-brokers", brokers,
				"--slot", fmt.Sprintf("e2e_%s_%d", p.suffix, s), "--publication", "e2e_" + p.suffix,
				"--state-topic", "e2e_" + p.suffix + ".state", "--metrics-addr", "", "--status-interval", "200ms",
				"--watermark-interval", "200ms", "--heartbeat-interval", "1s", "--log-level", "warn"},
			env: []string{"TRIBUTARY_PG_DSN=" + p.stack.ShardDSNs[s]}})
	}
	procs = append(procs, &supervised{name: "loader", log: logf, done: make(chan struct{}),
		args: []string{bin + "/loader", "--tables", tablesFile, "--kafka-brokers", brokers, "--group", "e2e_" + p.suffix,
			"--dlq-topic", "e2e_" + p.suffix + ".dlq", "--clickhouse-addr", p.stack.ClickHouseAddr, "--clickhouse-db", p.chDB,
			"--metrics-addr", "", "--batch-records", "500", "--batch-wait", "50ms", "--log-level", "info",
			// A restarted loader takes its place in the group at once,
			// instead of waiting for the killed one's session to expire.
			"--instance-id", "chaos-loader"}})
	for _, pr := range procs {
		go pr.run()
	}
	defer func() {
		for _, pr := range procs {
			pr.stop()
		}
		if t.Failed() || os.Getenv("TRIBUTARY_TEST_LOG") != "" {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("process logs:\n%s", b)
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	workload := 20 * time.Second
	wctx, wcancel := context.WithTimeout(ctx, workload)
	defer wcancel()

	// Chaos: SIGKILL a random process every 1-2.5 s while traffic runs.
	kills := 0
	chaosDone := make(chan struct{})
	go func() {
		defer close(chaosDone)
		for {
			select {
			case <-wctx.Done():
				return
			case <-time.After(time.Duration(1000+rand.IntN(1500)) * time.Millisecond):
			}
			procs[rand.IntN(len(procs))].kill()
			kills++
		}
	}()

	var wg sync.WaitGroup
	var opErrs sync.Map
	for _, s := range p.shards {
		wg.Add(1)
		go func(shard int) {
			defer wg.Done()
			if err := churn(wctx, p.stack.ShardDSNs[shard], tbl, shard); err != nil && wctx.Err() == nil {
				opErrs.Store(shard, err)
			}
		}(s)
	}
	wg.Wait()
	<-chaosDone
	opErrs.Range(func(k, v any) bool { t.Errorf("workload on shard %v: %v", k, v); return true })
	starts := 0
	for _, pr := range procs {
		pr.mu.Lock()
		starts += pr.starts
		pr.mu.Unlock()
	}
	t.Logf("workload done: %d SIGKILLs, %d process starts", kills, starts)

	// Converge: ClickHouse must equal the shards exactly.
	convStart := time.Now()
	deadline := convStart.Add(2 * time.Minute)
	var diff string
	for time.Now().Before(deadline) {
		if diff = p.compare(ctx, tbl); diff == "" {
			break
		}
		time.Sleep(time.Second)
	}
	if diff != "" {
		t.Fatalf("ClickHouse differs from the shards after convergence:\n%s", diff)
	}
	t.Logf("converged %s after the workload stopped", time.Since(convStart).Round(100*time.Millisecond))
	stopStart := time.Now()
	defer func() { t.Logf("processes stopped in %s", time.Since(stopStart).Round(100*time.Millisecond)) }()
}

// churn writes random inserts, updates and deletes (some in multi-row
// transactions, some with TOASTed bodies) until ctx ends.
func churn(ctx context.Context, dsn, tbl string, shard int) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	q := pgx.Identifier{tbl}.Sanitize()
	for ctx.Err() == nil {
		var err error
		switch op := rand.IntN(10); {
		case op < 4:
			body := "small"
			if rand.IntN(3) == 0 {
				body = strings.Repeat(strconv.Itoa(rand.IntN(10)), 3000+rand.IntN(3000))
			}
			_, err = conn.Exec(ctx, "INSERT INTO "+q+" (workspace_id, title, body) VALUES ($1, $2, $3)", shard*100+rand.IntN(10), "t"+strconv.Itoa(rand.IntN(1e6)), body)
		case op < 6:
			_, err = conn.Exec(ctx, "UPDATE "+q+" SET title = $1 WHERE id = (SELECT id FROM "+q+" ORDER BY random() LIMIT 1)", "u"+strconv.Itoa(rand.IntN(1e6)))
		case op < 7:
			_, err = conn.Exec(ctx, "UPDATE "+q+" SET body = $1 WHERE id = (SELECT id FROM "+q+" ORDER BY random() LIMIT 1)", strings.Repeat("b", 2500+rand.IntN(2000)))
		case op < 8:
			_, err = conn.Exec(ctx, "DELETE FROM "+q+" WHERE id = (SELECT id FROM "+q+" ORDER BY random() LIMIT 1)")
		default: // a multi-row transaction with an update of rows it inserted
			_, err = conn.Exec(ctx, "WITH ins AS (INSERT INTO "+q+" (workspace_id, title, body) SELECT $1, 'batch', 'x' FROM generate_series(1, 50) RETURNING id) SELECT count(*) FROM ins", shard)
		}
		if err != nil && ctx.Err() == nil {
			return err
		}
	}
	return nil
}

// compare returns a description of the first differences between the
// shards and ClickHouse, or "" when they are equal.
func (p *pipeline) compare(ctx context.Context, tbl string) string {
	type row struct{ title, ws, body string }
	want := map[string]row{} // "shard/id"
	for _, s := range p.shards {
		conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[s])
		if err != nil {
			return err.Error()
		}
		rows, err := conn.Query(ctx, "SELECT id::text, title, workspace_id::text, md5(coalesce(body, '')) FROM "+pgx.Identifier{tbl}.Sanitize())
		if err != nil {
			conn.Close(ctx)
			return err.Error()
		}
		for rows.Next() {
			var id string
			var r row
			if err := rows.Scan(&id, &r.title, &r.ws, &r.body); err != nil {
				conn.Close(ctx)
				return err.Error()
			}
			want[fmt.Sprintf("%d/%s", s, id)] = r
		}
		conn.Close(ctx)
	}
	got := map[string]row{}
	rows, err := p.store.Conn().Query(ctx, fmt.Sprintf(
		"SELECT toString(id), _shard, title, toString(workspace_id), ifNull(body, '') FROM `%s`.`%s` FINAL WHERE _deleted = 0", p.chDB, tbl))
	if err != nil {
		return err.Error()
	}
	for rows.Next() {
		var id, title, ws, body string
		var shard uint16
		var tp *string
		_ = title
		if err := rows.Scan(&id, &shard, &tp, &ws, &body); err != nil {
			rows.Close()
			return err.Error()
		}
		sum := md5.Sum([]byte(body))
		r := row{ws: ws, body: hex.EncodeToString(sum[:])}
		if tp != nil {
			r.title = *tp
		}
		got[fmt.Sprintf("%d/%s", shard, id)] = r
	}
	rows.Close()
	var diffs []string
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			diffs = append(diffs, "missing in ClickHouse: "+k)
		case g != w:
			diffs = append(diffs, fmt.Sprintf("differs %s: source %+v, ClickHouse %+v", k, w, g))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, "extra in ClickHouse (deleted at source): "+k)
		}
	}
	if len(diffs) == 0 {
		return ""
	}
	if len(diffs) > 10 {
		diffs = append(diffs[:10], fmt.Sprintf("... and %d more", len(diffs)-10))
	}
	return fmt.Sprintf("%d source rows, %d ClickHouse rows\n%s", len(want), len(got), strings.Join(diffs, "\n"))
}
