package tests

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/api"
	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/kafkaconn"
	"github.com/tributary/tributary/internal/loader"
	"github.com/tributary/tributary/internal/query"
	"github.com/tributary/tributary/internal/reader"
	"github.com/tributary/tributary/internal/tables"
)

// pipeline is a whole Tributary pipeline for one test: unique source
// tables, publication, slots, topics, consumer group and ClickHouse
// database, all removed at cleanup.
type pipeline struct {
	t       *testing.T
	stack   *Stack
	suffix  string
	shards  []int
	brokers []string
	// kafka is the TLS and SASL of every Kafka client of the pipeline
	// (the zero value: plaintext, as the stack's TRIBUTARY_KAFKA_BROKERS).
	kafkaSec kafkaconn.Security
	tables   *tables.Config
	chDB     string
	store    *chstore.Store
	api      *httptest.Server
	// apiClient is how getDoc and getRevenue reach the API (nil:
	// http.DefaultClient, for the plain-HTTP test server).
	apiClient *http.Client
	log       *slog.Logger
	// owned, when set, is the revenue oracle's ownership: the accounts
	// (workspaces) whose rows count on a shard, as under a ring map.
	owned func(shard int) []int64
	// preagg: the loader runs the revenue aggregator, so whole-day revenue
	// requests must be answered from the pre-aggregates.
	preagg bool
	// revAfter, when set, is sent as after= with compareRevenue's requests.
	revAfter []string

	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
}

func randSuffix() string {
	b := make([]byte, 4)
	rand.Read(b) //nolint:errcheck // never fails
	return hex.EncodeToString(b)
}

// docsDDL is the per-test documents table (same shape as the demo's).
const docsDDL = `CREATE TABLE %s (
	id bigint PRIMARY KEY DEFAULT tributary.next_id(),
	workspace_id bigint NOT NULL,
	title text NOT NULL,
	body text,
	amount numeric(12,2),
	created_at timestamptz NOT NULL DEFAULT now()
)`

// setupPipeline creates per-test tables on the given shards, the
// ClickHouse database and the API; unless external, it also starts a reader
// per shard and one loader in-process (external: the test runs them, e.g.
// as processes it can kill).
func setupPipeline(t *testing.T, shards []int, brokers []string, external bool) *pipeline {
	t.Helper()
	return setupPipelineWith(t, shards, brokers, external, "docs_",
		`{"topic_prefix":"e2e_%[1]s.","tables":[{"name":%[2]q,"id_column":"id","id_layout":"seed000","shard_key":"workspace_id"}]}`,
		docsDDL,
		// Out of line and uncompressed, so that a large body is always
		// TOASTed and an update that keeps it sends "unchanged".
		"ALTER TABLE %s ALTER COLUMN body SET STORAGE EXTERNAL")
}

// setupPipelineWith is setupPipeline for any table: its name is prefix and
// the test's suffix, cfgJSON its table configuration (%[1]s: the suffix,
// %[2]q: the table name), ddl the statements that create it on each shard
// (%s: the table name).
func setupPipelineWith(t *testing.T, shards []int, brokers []string, external bool, prefix, cfgJSON string, ddl ...string) *pipeline {
	t.Helper()
	return setupPipelineOn(t, loadStack(t), shards, brokers, external, prefix, cfgJSON, ddl...)
}

// setupPipelineOn is setupPipelineWith on st, whose ShardDSNs may number
// the stack's shards otherwise (sparseStack).
func setupPipelineOn(t *testing.T, st *Stack, shards []int, brokers []string, external bool, prefix, cfgJSON string, ddl ...string) *pipeline {
	t.Helper()
	if brokers == nil {
		brokers = st.KafkaBrokers
	}
	p := &pipeline{t: t, stack: st, suffix: randSuffix(), shards: shards, brokers: brokers}
	level := slog.LevelWarn
	if os.Getenv("TRIBUTARY_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	p.log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: level}))
	table := prefix + p.suffix
	cfg, err := tables.Parse([]byte(fmt.Sprintf(cfgJSON, p.suffix, table)))
	if err != nil {
		t.Fatal(err)
	}
	p.tables = cfg
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range shards {
		for _, stmt := range ddl {
			p.exec(ctx, s, fmt.Sprintf(stmt, table))
		}
	}
	t.Cleanup(p.cleanup)

	p.chDB = "e2e_" + p.suffix
	p.store, err = chstore.Open(ctx, chstore.Options{Addr: st.ClickHouseAddr, Database: p.chDB, Cluster: st.ClickHouseCluster})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, runCancel := context.WithCancel(context.Background())
	p.cancel = runCancel
	// As cmd/api with --clickhouse-cluster: /readyz checks every node.
	q := query.New(p.store.Conn(), p.chDB).WithCluster(st.ClickHouseCluster, chstore.DialOptions{})
	p.api = httptest.NewServer(api.New(api.Config{Tables: cfg, DocumentsTable: table, QueryTimeout: 10 * time.Second, Shards: p.shards},
		q, p.log, prometheus.NewRegistry()))
	if !external {
		for _, s := range shards {
			p.startReader(runCtx, s)
		}
		p.startLoader(runCtx, "l1")
	}
	return p
}

// newPipeline creates per-test tables on the given shards and starts a
// reader per shard, one loader and the API, in-process.
func newPipeline(t *testing.T, shards []int, brokers []string) *pipeline {
	return setupPipeline(t, shards, brokers, false)
}

func (p *pipeline) table() string { return p.tables.Tables[0].Name }

func (p *pipeline) goRun(name string, f func() error) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if err := f(); err != nil {
			p.mu.Lock()
			p.errs = append(p.errs, fmt.Errorf("%s: %w", name, err))
			p.mu.Unlock()
		}
	}()
}

func (p *pipeline) startReader(ctx context.Context, shard int) {
	p.startMeteredReader(ctx, shard)
}

// startMeteredReader is startReader with a registry the test can read.
func (p *pipeline) startMeteredReader(ctx context.Context, shard int) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	r := reader.New(p.readerConfig(shard), p.log, reg)
	p.goRun(fmt.Sprintf("reader %d", shard), func() error { return r.Run(ctx) })
	return reg
}

// readerConfig is the configuration of the pipeline's reader of shard.
func (p *pipeline) readerConfig(shard int) reader.Config {
	return reader.Config{
		Shard: shard, DSN: p.stack.ShardDSNs[shard], Slot: fmt.Sprintf("e2e_%s_%d", p.suffix, shard),
		Publication: "e2e_" + p.suffix, Tables: p.tables, Brokers: p.brokers, KafkaSecurity: p.kafkaSec, Partitions: 4,
		StatusInterval: 200 * time.Millisecond, WatermarkInterval: 100 * time.Millisecond,
		HeartbeatInterval: time.Second, MaxBuffered: 10000, StateTopic: "e2e_" + p.suffix + ".state",
		SweepStore: p.sweepStore,
	}
}

// sweepStore opens p's ClickHouse database read only, as cdc-reader does
// for a resnapshot's sweep.
func (p *pipeline) sweepStore(ctx context.Context) (reader.SweepStore, error) {
	s, err := chstore.OpenReadOnly(ctx, chstore.Options{Addr: p.stack.ClickHouseAddr, Database: p.chDB})
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (p *pipeline) startLoader(ctx context.Context, name string) {
	l := loader.New(loader.Config{
		Brokers: p.brokers, KafkaSecurity: p.kafkaSec, Group: "e2e_" + p.suffix, DLQTopic: "e2e_" + p.suffix + ".dlq", Tables: p.tables,
		BatchRecords: 5000, BatchWait: 50 * time.Millisecond,
		DuplicateGrace: 3 * time.Second, AnomalyInterval: 200 * time.Millisecond,
	}, p.store, p.log.With(slog.String("loader", name)), prometheus.NewRegistry())
	p.goRun("loader "+name, func() error { return l.Run(ctx) })
}

// exec runs SQL on a shard as the superuser.
func (p *pipeline) exec(ctx context.Context, shard int, sql string, args ...any) {
	p.t.Helper()
	conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[shard])
	if err != nil {
		p.t.Fatalf("connect shard %d: %v", shard, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		p.t.Fatalf("shard %d: %s: %v", shard, sql, err)
	}
}

// insert adds a document on shard and returns its id (from tributary.next_id()).
func (p *pipeline) insert(ctx context.Context, shard int, ws int64, title, body string) int64 {
	p.t.Helper()
	conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[shard])
	if err != nil {
		p.t.Fatal(err)
	}
	defer conn.Close(ctx)
	var id int64
	err = conn.QueryRow(ctx, fmt.Sprintf("INSERT INTO %s (workspace_id, title, body) VALUES ($1, $2, $3) RETURNING id",
		pgx.Identifier{p.table()}.Sanitize()), ws, title, body).Scan(&id)
	if err != nil {
		p.t.Fatalf("insert on shard %d: %v", shard, err)
	}
	return id
}

// httpClient is the client that reaches p.api.
func (p *pipeline) httpClient() *http.Client {
	if p.apiClient != nil {
		return p.apiClient
	}
	return http.DefaultClient
}

// failed returns errors the components returned so far.
func (p *pipeline) failed() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.errs) == 0 {
		return nil
	}
	return fmt.Errorf("%v", p.errs)
}

func (p *pipeline) cleanup() {
	if p.api != nil {
		p.api.Close()
	}
	if p.cancel != nil {
		p.cancel()
	}
	p.wg.Wait()
	if err := p.failed(); err != nil {
		p.t.Errorf("component failed: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range p.shards {
		conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[s])
		if err != nil {
			p.t.Errorf("cleanup connect shard %d: %v", s, err)
			continue
		}
		slot := fmt.Sprintf("e2e_%s_%d", p.suffix, s)
		// The slot may still be marked active for a moment after the reader closed.
		for i := 0; i < 50; i++ {
			_, err = conn.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", slot)
			if err == nil || !strings.Contains(err.Error(), "is active") {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			p.t.Errorf("drop slot %s: %v", slot, err)
		}
		conn.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{"e2e_" + p.suffix}.Sanitize()) //nolint:errcheck
		conn.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{p.table()}.Sanitize())               //nolint:errcheck
		conn.Close(ctx)
	}
	if p.store != nil {
		p.dropDatabase()
		p.store.Close()
	}
	if cl, err := kgo.NewClient(kgo.SeedBrokers(p.brokers...)); err == nil {
		topics := append(p.tables.Topics(), "e2e_"+p.suffix+".dlq", "e2e_"+p.suffix+".state")
		kadm.NewClient(cl).DeleteTopics(ctx, topics...) //nolint:errcheck
		cl.Close()
	}
}

// dropDatabase drops the pipeline's ClickHouse database, on every node in
// cluster mode, with a context of its own (the slots' cleanup may have used
// up the other). A pooled connection to a node that a test restarted fails
// once, so each try is repeated; in cluster mode a database left on a node
// fails the test (it would be left there for good: DROP DATABASE is not
// replicated).
func (p *pipeline) dropDatabase() {
	var err error
	for try := 0; try < 3; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err = p.store.DropDatabase(ctx)
		cancel()
		if err == nil {
			return
		}
	}
	if p.store.Cluster() != "" {
		p.t.Errorf("cleanup: %v", err)
	}
}

// testWriter sends component logs to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

var _ io.Writer = testWriter{}

// oneShardPipeline is setupPipeline over shard 0 with the contexts most
// tests need: ctx ends after timeout, runCtx (the components') at cleanup,
// which then waits for every component to stop.
func oneShardPipeline(t *testing.T, timeout time.Duration) (p *pipeline, ctx, runCtx context.Context) {
	t.Helper()
	p = setupPipeline(t, []int{0}, nil, true)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	runCtx, stop := context.WithCancel(ctx)
	t.Cleanup(func() { stop(); p.wg.Wait(); cancel() })
	return p, ctx, runCtx
}

// shardPairs reads the two text columns of the rows sql selects on shard
// into a map from the first to the second.
func (p *pipeline) shardPairs(ctx context.Context, shard int, sql string) (map[string]string, error) {
	conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[shard])
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, rows.Err()
}

// checkResumedRun reads the "snapshot complete" line of a reader's logs
// and fails the test when the run it ends copied every row again instead
// of continuing after the doneRows recorded before it: it returns the
// rows that run copied and the snapshot's total.
func checkResumedRun(t *testing.T, logs []byte, doneRows int64) (thisRun, total int64) {
	t.Helper()
	m := regexp.MustCompile(`msg="snapshot complete" shard=\d+ rows=(\d+) rows_this_run=(\d+)`).FindSubmatch(logs)
	if m == nil {
		t.Fatal(`no "snapshot complete" log line`)
	}
	total, _ = strconv.ParseInt(string(m[1]), 10, 64)
	thisRun, _ = strconv.ParseInt(string(m[2]), 10, 64)
	if thisRun >= total || thisRun > total-doneRows {
		t.Errorf("the resumed run copied %d of %d rows, with %d recorded before the kill: it started over", thisRun, total, doneRows)
	}
	return thisRun, total
}
