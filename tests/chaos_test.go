package tests

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// chaosStack is a pipeline's readers (one per shard) and loader run as
// supervised processes, which a test may SIGKILL.
type chaosStack struct {
	readers []*supervised
	loader  *supervised
	log     *os.File
}

// startChaos writes the pipeline's table config and starts a reader
// process per shard and one loader process, each restarted whenever it
// exits, until the test ends (when their logs are shown if it failed).
func startChaos(t *testing.T, p *pipeline) *chaosStack {
	t.Helper()
	bin := binaries(t)
	dir := t.TempDir()
	tablesFile := filepath.Join(dir, "tables.json")
	if err := os.WriteFile(tablesFile, []byte(fmt.Sprintf(
		`{"topic_prefix":"e2e_%s.","tables":[{"name":%q,"id_column":"id","id_layout":"seed000"}]}`, p.suffix, p.table())), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "procs.log"))
	if err != nil {
		t.Fatal(err)
	}
	brokers := strings.Join(p.brokers, ",")
	cs := &chaosStack{log: logf}
	for _, s := range p.shards {
		cs.readers = append(cs.readers, &supervised{name: fmt.Sprintf("reader-%d", s), log: logf, done: make(chan struct{}),
			args: []string{bin + "/cdc-reader", "--shard", strconv.Itoa(s), "--tables", tablesFile, "--kafka-brokers", brokers,
				"--slot", fmt.Sprintf("e2e_%s_%d", p.suffix, s), "--publication", "e2e_" + p.suffix,
				"--state-topic", "e2e_" + p.suffix + ".state", "--metrics-addr", "", "--status-interval", "200ms",
				"--watermark-interval", "200ms", "--heartbeat-interval", "1s", "--log-level", "warn"},
			env: []string{"TRIBUTARY_PG_DSN=" + p.stack.ShardDSNs[s]}})
	}
	cs.loader = &supervised{name: "loader", log: logf, done: make(chan struct{}),
		args: []string{bin + "/loader", "--tables", tablesFile, "--kafka-brokers", brokers, "--group", p.group(),
			"--dlq-topic", p.dlqTopic(), "--clickhouse-addr", p.stack.ClickHouseAddr, "--clickhouse-db", p.chDB,
			"--metrics-addr", "", "--batch-records", "500", "--batch-wait", "50ms", "--log-level", "info",
			// A restarted loader takes its place in the group at once,
			// instead of waiting for the killed one's session to expire.
			"--instance-id", "chaos-loader"}}
	for _, pr := range cs.procs() {
		go pr.run()
	}
	t.Cleanup(func() {
		for _, pr := range cs.procs() {
			pr.stop()
		}
		if t.Failed() || os.Getenv("TRIBUTARY_TEST_LOG") != "" {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("process logs:\n%s", b)
		}
		logf.Close()
	})
	return cs
}

func (cs *chaosStack) procs() []*supervised { return append(slices.Clone(cs.readers), cs.loader) }

// starts is the number of process starts so far.
func (cs *chaosStack) starts() int {
	n := 0
	for _, pr := range cs.procs() {
		pr.mu.Lock()
		n += pr.starts
		pr.mu.Unlock()
	}
	return n
}

// killEvery SIGKILLs one of victims (chosen at random) every 1-2.5 s until
// ctx ends, and returns the number of kills once it has.
func killEvery(ctx context.Context, victims []*supervised) <-chan int {
	out := make(chan int, 1)
	go func() {
		kills := 0
		defer func() { out <- kills }()
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(1000+rand.IntN(1500)) * time.Millisecond):
			}
			victims[rand.IntN(len(victims))].kill()
			kills++
		}
	}()
	return out
}

// converge waits up to two minutes for ClickHouse to equal the shards and
// for the dead-letter topic to be empty: nothing a crash does may lose an
// update or make a record unappliable.
func (p *pipeline) converge(ctx context.Context) {
	p.t.Helper()
	convStart := time.Now()
	deadline := convStart.Add(2 * time.Minute)
	var diff string
	for time.Now().Before(deadline) {
		if diff = p.compare(ctx, p.table()); diff == "" {
			break
		}
		time.Sleep(time.Second)
	}
	dead := p.dlqRecords(ctx)
	p.t.Logf("dead-letter topic: %d records", dead)
	if dead != 0 {
		p.t.Errorf("the dead-letter topic %s holds %d records after the kills, want 0", p.dlqTopic(), dead)
	}
	if diff != "" {
		p.t.Fatalf("ClickHouse differs from the shards after convergence:\n%s", diff)
	}
	p.t.Logf("converged %s after the workload stopped", time.Since(convStart).Round(100*time.Millisecond))
}

// TestKillNineAnywhere is DESIGN.md invariant 1 under fire: readers and the
// loader run as processes and are SIGKILLed at random moments while two
// shards take inserts, updates (TOASTed bodies), deletes and multi-row
// transactions. After the last restart the ClickHouse table must equal the
// shards exactly: same live rows, same shard, same values, no extras; and
// no record went to the dead-letter topic.
func TestKillNineAnywhere(t *testing.T) {
	t.Parallel()
	p := setupPipeline(t, []int{0, 1}, nil, true)
	tbl := p.table()
	cs := startChaos(t, p)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	workload := 20 * time.Second
	wctx, wcancel := context.WithTimeout(ctx, workload)
	defer wcancel()

	// Chaos: SIGKILL a random process every 1-2.5 s while traffic runs.
	kills := killEvery(wctx, cs.procs())

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
	n := <-kills
	opErrs.Range(func(k, v any) bool { t.Errorf("workload on shard %v: %v", k, v); return true })
	t.Logf("workload done: %d SIGKILLs, %d process starts", n, cs.starts())

	// Converge: ClickHouse must equal the shards exactly.
	p.converge(ctx)
	stopStart := time.Now()
	defer func() { t.Logf("processes stopped in %s", time.Since(stopStart).Round(100*time.Millisecond)) }()
}

// TestKillNineLoaderToast: the loader alone is SIGKILLed every 1-2.5 s
// while the readers stay up and two shards take TOAST-heavy traffic: rows
// with multi-kilobyte (TOASTed) bodies whose small columns are edited, so
// that most updates arrive with the body unchanged and take it from an
// earlier version; rows edited and then moved to the other shard at once
// (copied there, deleted here: the order a replay after a kill found
// superseded); bodies rewritten, inserts and deletes. After the last
// restart no record is in the dead-letter topic and every row equals its
// shard's.
func TestKillNineLoaderToast(t *testing.T) {
	t.Parallel()
	p := setupPipeline(t, []int{0, 1}, nil, true)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for _, s := range p.shards {
		// Large rows first: the edits below are of these.
		p.exec(ctx, s, fmt.Sprintf("INSERT INTO %s (workspace_id, title, body) SELECT $1, 'seed ' || g, repeat(md5(g::text), 100 + g %% 100) FROM generate_series(1, 200) g",
			pgx.Identifier{p.table()}.Sanitize()), s*100+1)
	}
	cs := startChaos(t, p)
	workload := 20 * time.Second
	wctx, wcancel := context.WithTimeout(ctx, workload)
	defer wcancel()
	kills := killEvery(wctx, []*supervised{cs.loader})

	var wg sync.WaitGroup
	var opErrs sync.Map
	var moved atomic.Int64
	for i, s := range p.shards {
		other := p.shards[(i+1)%len(p.shards)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := toastChurn(wctx, p.stack.ShardDSNs[s], p.stack.ShardDSNs[other], p.table(), s, &moved); err != nil && wctx.Err() == nil {
				opErrs.Store(s, err)
			}
		}()
	}
	wg.Wait()
	n := <-kills
	opErrs.Range(func(k, v any) bool { t.Errorf("workload on shard %v: %v", k, v); return true })
	t.Logf("workload done: %d loader SIGKILLs, %d process starts, %d rows moved", n, cs.starts(), moved.Load())
	if n == 0 {
		t.Fatal("the loader was never killed")
	}
	p.converge(ctx)
}

// toastChurn edits the rows of a shard (dsn) until ctx ends, mostly small
// columns of rows with TOASTed bodies; a row edited twice is then often
// moved to the other shard (toDSN): inserted there with all its values,
// then deleted here, as a move saga does.
func toastChurn(ctx context.Context, dsn, toDSN, tbl string, shard int, moved *atomic.Int64) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	to, err := pgx.Connect(ctx, toDSN)
	if err != nil {
		return err
	}
	defer to.Close(context.Background())
	q := pgx.Identifier{tbl}.Sanitize()
	pick := func() (int64, error) {
		var id int64
		err := conn.QueryRow(ctx, "SELECT id FROM "+q+" WHERE length(body) > 2500 ORDER BY random() LIMIT 1").Scan(&id)
		return id, err
	}
	retitle := func(id int64) error {
		_, err := conn.Exec(ctx, "UPDATE "+q+" SET title = $1, amount = $2 WHERE id = $3",
			"e"+strconv.Itoa(rand.IntN(1e6)), rand.IntN(100000), id)
		return err
	}
	for ctx.Err() == nil {
		var err error
		switch op := rand.IntN(20); {
		case op < 12: // a small column of a large row
			var id int64
			if id, err = pick(); err == nil {
				err = retitle(id)
			}
		case op < 15: // edited twice, then moved to the other shard
			var id int64
			if id, err = pick(); err == nil {
				err = editAndMove(ctx, conn, to, q, id, retitle)
				if err == nil {
					moved.Add(1)
				}
			}
		case op < 17:
			_, err = conn.Exec(ctx, "INSERT INTO "+q+" (workspace_id, title, body) VALUES ($1, $2, $3)",
				shard*100+1, "n"+strconv.Itoa(rand.IntN(1e6)), strings.Repeat(strconv.Itoa(rand.IntN(10)), 3000+rand.IntN(3000)))
		case op < 18: // a new body
			_, err = conn.Exec(ctx, "UPDATE "+q+" SET body = $1 WHERE id = (SELECT id FROM "+q+" ORDER BY random() LIMIT 1)",
				strings.Repeat("b", 2500+rand.IntN(2000)))
		case op < 19:
			_, err = conn.Exec(ctx, "DELETE FROM "+q+" WHERE id = (SELECT id FROM "+q+" ORDER BY random() LIMIT 1)")
		default: // a large row edited twice, and left here
			var id int64
			if id, err = pick(); err == nil {
				if err = retitle(id); err == nil {
					err = retitle(id)
				}
			}
		}
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil // every large row moved away or deleted: the next insert adds one
		}
		if err != nil && ctx.Err() == nil {
			return err
		}
	}
	return nil
}

// editAndMove edits row id twice (its body unchanged), copies it to the
// other shard's connection and deletes it here. Only this shard's worker
// edits its rows, so the copy is the row as it is.
func editAndMove(ctx context.Context, from, to *pgx.Conn, q string, id int64, edit func(int64) error) error {
	for range 2 {
		if err := edit(id); err != nil {
			return err
		}
	}
	var ws int64
	var title, body string
	var amount *string
	var created time.Time
	err := from.QueryRow(ctx, "SELECT workspace_id, title, body, amount::text, created_at FROM "+q+" WHERE id = $1", id).
		Scan(&ws, &title, &body, &amount, &created)
	if err != nil {
		return err
	}
	// DO NOTHING: the other shard's worker may be moving the row back
	// (copied, not yet deleted there); both deletes then remove it.
	if _, err := to.Exec(ctx, "INSERT INTO "+q+" (id, workspace_id, title, body, amount, created_at) VALUES ($1, $2, $3, $4, $5::numeric, $6) ON CONFLICT (id) DO NOTHING",
		id, ws, title, body, amount, created); err != nil {
		return err
	}
	_, err = from.Exec(ctx, "DELETE FROM "+q+" WHERE id = $1", id)
	return err
}

// churn writes random inserts, updates and deletes (some in multi-row
// transactions, some with TOASTed bodies) until ctx ends.
func churn(ctx context.Context, dsn, tbl string, shard int) error {
	return churnPaced(ctx, dsn, tbl, shard, 0)
}

// churnPaced is churn with a pause after each operation, for tests whose
// verification time grows with what was written (0: none).
func churnPaced(ctx context.Context, dsn, tbl string, shard int, pause time.Duration) error {
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
		if pause > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(pause):
			}
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
