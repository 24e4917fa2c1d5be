package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/compact"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/preagg"
	"github.com/tributary/tributary/internal/query"
	"github.com/tributary/tributary/internal/revenueblocks"
	"github.com/tributary/tributary/internal/tables"
)

// The current-ClickHouse compatibility check (docs/design/clickhouse-rules.md, "ClickHouse
// compatibility rule"): the product's own functions (chstore's table
// creation for every mapped type, its inserts, ownership and watermarks;
// query's by-id read, search, duplicates, misplaced and freshness;
// compact's OPTIMIZE) run against a ClickHouse 18.16 of the test's own that
// logs every query (system.query_log); the statements they issued, with
// the rows 18.16 then held, are replayed on chDB (current ClickHouse,
// in-process, from the venv deploy/local/install.sh makes) by
// tests/chdb/replay.py, and every answer must equal 18.16's.

// ownClickHouse is a ClickHouse 18.16 server the test starts for itself:
// the stack's configuration (deploy/local/stack.d/clickhouse.sh) on ports
// of its own, with log_queries on for every query of the default profile.
type ownClickHouse struct {
	dir       string
	tcp, http int
	cmd       *exec.Cmd
}

func startOwnClickHouse(t *testing.T) *ownClickHouse {
	t.Helper()
	if _, err := exec.LookPath("clickhouse-server"); err != nil {
		t.Skip("clickhouse-server not found (run deploy/local/install.sh)")
	}
	c := &ownClickHouse{dir: t.TempDir(), tcp: freePort(t), http: freePort(t)}
	for _, d := range []string{"data", "tmp", "user_files", "format_schemas", "log", "config.d"} {
		if err := os.MkdirAll(filepath.Join(c.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := os.ReadFile("/etc/clickhouse-server/config.xml")
	if err != nil {
		t.Fatal(err)
	}
	users, err := os.ReadFile("/etc/clickhouse-server/users.xml")
	if err != nil {
		t.Fatal(err)
	}
	// The first <default> of users.xml is the default profile.
	if !strings.Contains(string(users), "<default>") {
		t.Fatal("/etc/clickhouse-server/users.xml has no <default> profile")
	}
	users = []byte(strings.Replace(string(users), "<default>", "<default>\n            <log_queries>1</log_queries>", 1))
	over := fmt.Sprintf(`<?xml version="1.0"?>
<yandex>
    <logger><level>warning</level><log>%[1]s/log/server.log</log><errorlog>%[1]s/log/server.err.log</errorlog></logger>
    <listen_host>127.0.0.1</listen_host>
    <tcp_port>%[2]d</tcp_port>
    <http_port>%[3]d</http_port>
    <interserver_http_port>%[4]d</interserver_http_port>
    <path>%[1]s/data/</path>
    <tmp_path>%[1]s/tmp/</tmp_path>
    <user_files_path>%[1]s/user_files/</user_files_path>
    <format_schema_path>%[1]s/format_schemas/</format_schema_path>
    <timezone>UTC</timezone>
    <uncompressed_cache_size>268435456</uncompressed_cache_size>
    <mark_cache_size>268435456</mark_cache_size>
</yandex>
`, c.dir, c.tcp, c.http, freePort(t))
	for name, data := range map[string][]byte{"config.xml": cfg, "users.xml": users, "config.d/test.xml": []byte(over)} {
		if err := os.WriteFile(filepath.Join(c.dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c.cmd = exec.Command("clickhouse-server", "--config-file="+filepath.Join(c.dir, "config.xml"))
	out, err := os.Create(filepath.Join(c.dir, "log", "stdout.log"))
	if err != nil {
		t.Fatal(err)
	}
	c.cmd.Stdout, c.cmd.Stderr = out, out
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.cmd.Process.Signal(syscall.SIGKILL) //nolint:errcheck
		c.cmd.Wait()                          //nolint:errcheck
		out.Close()
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		v, err := c.query("SELECT value FROM system.settings WHERE name = 'log_queries'")
		if err == nil {
			if strings.TrimSpace(v) != "1" {
				t.Fatalf("own clickhouse: log_queries is %q, want 1", v)
			}
			return c
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(c.dir, "log", "server.err.log"))
			t.Fatalf("own clickhouse not ready after 60 s: %v\n%s", err, log)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (c *ownClickHouse) addr() string { return "127.0.0.1:" + strconv.Itoa(c.tcp) }

// query runs sql over HTTP and returns its answer in TabSeparated (the
// HTTP interface's default format).
func (c *ownClickHouse) query(sql string) (string, error) {
	resp, err := http.Post("http://127.0.0.1:"+strconv.Itoa(c.http)+"/", "text/plain", strings.NewReader(sql))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	return string(b), nil
}

// chdbPython is the venv's interpreter install.sh prepares; the test skips
// without it (fails under TRIBUTARY_REQUIRE_STACK=1).
func chdbPython(t *testing.T) string {
	t.Helper()
	venv := os.Getenv("TRIBUTARY_CHDB_VENV")
	if venv == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache")
		}
		venv = filepath.Join(cache, "tributary", "chdb-venv")
	}
	py := filepath.Join(venv, "bin", "python")
	if _, err := os.Stat(py); err != nil {
		msg := "chDB venv missing: " + py + " (run deploy/local/install.sh)"
		if os.Getenv("TRIBUTARY_REQUIRE_STACK") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return py
}

// loggedQuery is one statement of system.query_log.
type loggedQuery struct {
	ID, SQL string
}

// queryLog returns the finished statements that name db and are not in
// seen (which it extends), in the order they started.
func (c *ownClickHouse) queryLog(t *testing.T, db string, seen map[string]bool) []loggedQuery {
	t.Helper()
	if _, err := c.query("SYSTEM FLUSH LOGS"); err != nil {
		t.Fatal(err)
	}
	out, err := c.query(fmt.Sprintf(`SELECT query_id, query FROM system.query_log
		WHERE type = 2 AND is_initial_query AND position(query, '%s') > 0 AND position(query, 'system.query_log') = 0
		ORDER BY query_start_time, event_time FORMAT JSONEachRow`, db))
	if err != nil {
		t.Fatal(err)
	}
	var qs []loggedQuery
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var r struct {
			ID  string `json:"query_id"`
			SQL string `json:"query"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("query_log row %q: %v", line, err)
		}
		if !seen[r.ID] {
			seen[r.ID] = true
			qs = append(qs, loggedQuery(r))
		}
	}
	return qs
}

var (
	reCreateView = regexp.MustCompile(`(?is)^\s*CREATE\s+(MATERIALIZED\s+)?VIEW`)
	reDDL        = regexp.MustCompile(`(?is)^\s*(CREATE|ALTER\s+TABLE\s+\S+\s+(ADD|MODIFY|DROP)\s+COLUMN)`)
	reRead       = regexp.MustCompile(`(?is)^\s*(SELECT|WITH)\b`)
	reOptimize   = regexp.MustCompile(`(?is)^\s*OPTIMIZE\b`)
)

// TestCurrentClickHouseAnswersAlike: every DDL and read the product issued
// to 18.16 runs on chDB with the same rows and answers alike, before and
// after compaction's OPTIMIZE. A difference names the statement and both
// answers.
func TestCurrentClickHouseAnswersAlike(t *testing.T) {
	py := chdbPython(t)
	ch := startOwnClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db := "compat_" + randSuffix()
	store, err := chstore.Open(ctx, chstore.Options{Addr: ch.addr(), Database: db})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	seen := map[string]bool{}
	opened := ch.queryLog(t, db, seen) // Open's own tables

	// Setup: one table with every mapped type, three blocks (so that
	// versions sit in separate parts), placement, watermarks.
	s := func(v string) *string { return &v }
	cols := []envelope.Column{
		{Name: "id", Type: "bigint", OID: 20, Key: true},
		{Name: "ws", Type: "bigint", OID: 20},
		{Name: "title", Type: "text", OID: 25},
		{Name: "created", Type: "timestamp with time zone", OID: 1184},
		{Name: "i2", Type: "smallint", OID: 21},
		{Name: "i4", Type: "integer", OID: 23},
		{Name: "r4", Type: "real", OID: 700},
		{Name: "f8", Type: "double precision", OID: 701},
		{Name: "amount", Type: "numeric(12,2)", OID: 1700},
		{Name: "wide", Type: "numeric(30,4)", OID: 1700},
		{Name: "b", Type: "boolean", OID: 16},
		{Name: "d", Type: "date", OID: 1082},
		{Name: "ts", Type: "timestamp without time zone", OID: 1114},
		{Name: "u", Type: "uuid", OID: 2950},
		{Name: "vc", Type: "character varying(20)", OID: 1043},
		{Name: "js", Type: "jsonb", OID: 3802},
		{Name: "raw", Type: "bytea", OID: 17},
		{Name: "arr", Type: "integer[]", OID: 1007},
		{Name: "cur", Type: "text", OID: 25},
		{Name: "status", Type: "text", OID: 25},
	}
	tab, err := store.EnsureTable(ctx, "t", []string{"id"}, cols)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	row := func(id, shard int, version uint64, deleted bool, title string) *chstore.Row {
		vals := map[string]*string{
			"id": s(strconv.Itoa(id)), "ws": s(strconv.Itoa(id % 3)), "title": s(title),
			"created": s(base.Add(time.Duration(id) * time.Hour).Format("2006-01-02 15:04:05.999999-07")),
			"i2":      s("-7"), "i4": s(strconv.Itoa(id * 1000)), "r4": s("1.25"), "f8": s("-2.5e-3"),
			"amount": s(fmt.Sprintf("%d.%02d", id*10, id)), "wide": s("-12345678901234567890.5"),
			"b": s("t"), "d": s("2026-01-02"), "ts": s("2026-01-02 03:04:05.123456"),
			"u": s(fmt.Sprintf("0190b0a8-0000-7000-8000-%012d", id)), "vc": s("vé"), "js": s(`{"a": [1, "x"]}`),
			"raw": s(`\x00ff`), "arr": s("{1,2,3}"),
			"cur": s([]string{"EUR", "usd"}[id%2]), "status": s("paid"),
		}
		if title == "refunded" {
			vals["status"] = s("refunded")
		}
		if id == 4 {
			for _, c := range []string{"i2", "r4", "amount", "d", "u", "js", "arr"} {
				vals[c] = nil
			}
		}
		return &chstore.Row{Shard: uint16(shard), Version: version, Deleted: deleted, CommitLSN: version,
			CommitTS: base.Add(time.Duration(version) * time.Second), Values: vals}
	}
	insert := func(rows ...*chstore.Row) {
		t.Helper()
		b := tab.NewBlock(len(rows), base)
		idx := make([]int, len(rows))
		for i, r := range rows {
			if err := b.Set(i, r); err != nil {
				t.Fatalf("row %d: %v", i, err)
			}
			idx[i] = i
		}
		if err := store.InsertBlock(ctx, b, idx); err != nil {
			t.Fatal(err)
		}
	}
	insert(row(1, 0, 10, false, "Alpha one"), row(2, 0, 11, false, "beta two"), row(3, 0, 12, false, "gamma"),
		row(4, 1, 13, false, "nulls"), row(5, 1, 14, false, "Alpha five"))
	// Superseded versions in another part: 1 retitled, 2 deleted, 5 paid
	// -> refunded style change of a non-key column.
	insert(row(1, 0, 20, false, "alpha renamed"), row(2, 0, 21, true, "beta two"), row(5, 1, 22, false, "refunded"))
	// 3 live on a second shard too (a duplicate); 6 on the wrong shard.
	insert(row(3, 1, 30, false, "gamma copy"), row(6, 0, 31, false, "misplaced"))
	if err := store.WriteOwnership(ctx, []chstore.Ownership{
		{Table: "t", Key: "0", Owner: 0, RingVersion: 1}, {Table: "t", Key: "1", Owner: 1, RingVersion: 1},
		{Table: "t", Key: "2", Owner: 1, RingVersion: 1},
	}); err != nil {
		t.Fatal(err)
	}
	if err := store.WriteAnomalies(ctx, base, []chstore.Anomaly{{Table: "t", ID: "3", Kind: "duplicate", Shards: []uint16{0, 1},
		FirstSeen: base, LastSeen: base.Add(time.Minute)}}); err != nil {
		t.Fatal(err)
	}
	if err := store.WriteWatermarks(ctx, []chstore.Watermark{
		{Topic: "tp", Partition: 0, Partitions: 2, Shard: 0, CommitLSN: 100, CommitTS: base},
		{Topic: "tp", Partition: 1, Partitions: 2, Shard: 0, CommitLSN: 90, CommitTS: base.Add(-time.Second)},
		{Topic: "tp", Partition: 0, Partitions: 2, Shard: 1, CommitLSN: 70, CommitTS: base},
		{Topic: "tp", Partition: 1, Partitions: 2, Shard: 1, CommitLSN: 80, CommitTS: base},
	}); err != nil {
		t.Fatal(err)
	}
	// Pre-aggregates: the marks table, a mark, and one aggregator round
	// (the first recomputes every block).
	rev := &tables.Revenue{Table: "t", AmountColumn: "amount", CurrencyColumn: "cur", TimeColumn: "created",
		StatusColumn: "status", CountStatuses: []string{"paid"}, RefundStatuses: []string{"refunded"}, WorkspaceColumn: "ws"}
	marks := preagg.NewMarks("t", 2)
	marks.Add(0, "5", 90)
	if err := marks.Write(ctx, store); err != nil {
		t.Fatal(err)
	}
	agg := preagg.New(preagg.Config{Revenue: rev, IDColumn: "id", Topic: "tp", BlockBits: 2}, store,
		slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if outcome, err := agg.Round(ctx); err != nil || outcome != "full" {
		t.Fatalf("pre-aggregation round: %q, %v; want a full round", outcome, err)
	}
	// A composite-key table (tenant_id, line_no): two tenants with the same
	// line numbers, a superseded version, a tombstone, a key on two shards.
	lines, err := store.EnsureTable(ctx, "lines", []string{"tenant_id", "line_no"}, []envelope.Column{
		{Name: "tenant_id", Type: "text", OID: 25, Key: true}, {Name: "line_no", Type: "integer", OID: 23, Key: true},
		{Name: "note", Type: "text", OID: 25}, {Name: "ws", Type: "bigint", OID: 20}})
	if err != nil {
		t.Fatal(err)
	}
	line := func(tenant string, no, shard int, version uint64, deleted bool, note string) *chstore.Row {
		return &chstore.Row{Shard: uint16(shard), Version: version, Deleted: deleted, CommitLSN: version, CommitTS: base,
			Values: map[string]*string{"tenant_id": s(tenant), "line_no": s(strconv.Itoa(no)), "note": s(note), "ws": s(strconv.Itoa(shard + 1))}}
	}
	for _, rows := range [][]*chstore.Row{
		{line("acme, inc", 1, 0, 10, false, "a1"), line("acme, inc", 2, 0, 11, false, "a2"), line("t2", 1, 0, 12, false, "b1"), line("t2", 2, 1, 13, false, "b2")},
		{line("acme, inc", 1, 0, 20, false, "a1 updated"), line("acme, inc", 2, 0, 21, true, "a2"), line("t2", 1, 1, 22, false, "b1 copy")},
	} {
		b := lines.NewBlock(len(rows), base)
		idx := make([]int, len(rows))
		for i, r := range rows {
			if err := b.Set(i, r); err != nil {
				t.Fatal(err)
			}
			idx[i] = i
		}
		if err := store.InsertBlock(ctx, b, idx); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.WriteOwnership(ctx, []chstore.Ownership{
		{Table: "lines", Key: "1", Owner: 1, RingVersion: 1}, {Table: "lines", Key: "2", Owner: 0, RingVersion: 1},
	}); err != nil {
		t.Fatal(err)
	}
	setup := append(opened, ch.queryLog(t, db, seen)...)

	// Reads: the product's query shapes.
	q := query.New(store.Conn(), db)
	for _, id := range []int64{1, 2, 3, 4, 404} {
		if _, err := q.Row(ctx, "t", "id", id); err != nil {
			t.Fatalf("by-id %d: %v", id, err)
		}
	}
	if _, err := q.RowsOf(ctx, "t", "id", []string{"1", "3", "5"}); err != nil {
		t.Fatal(err)
	}
	for _, req := range []query.SearchRequest{
		{Table: "t", IDColumn: "id", TimeColumn: "created", From: base, Limit: 10},
		{Table: "t", IDColumn: "id", TimeColumn: "created", From: base, To: base.Add(5 * time.Hour), Limit: 2,
			TitleColumn: "title", Title: "ALPHA", WorkspaceColumn: "ws", Workspace: "1"},
	} {
		if _, err := q.Search(ctx, req); err != nil {
			t.Fatalf("search %+v: %v", req, err)
		}
	}
	if _, err := q.Duplicates(ctx, query.DuplicatesRequest{Tables: []string{"t"}, State: query.StateAll, Limit: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Misplaced(ctx, query.MisplacedRequest{Tables: []query.PlacedTable{{Name: "t", IDColumn: "id", ShardKey: "ws"}}, Limit: 10}); err != nil {
		t.Fatal(err)
	}
	for _, key := range [][]string{{"acme, inc", "1"}, {"acme, inc", "2"}, {"t2", "1"}, {"t2", "9"}} {
		if _, err := q.KeyRow(ctx, "lines", []string{"tenant_id", "line_no"}, key); err != nil {
			t.Fatalf("by key %q: %v", key, err)
		}
	}
	linesPlaced := query.PlacedTable{Name: "lines", IDColumns: []string{"tenant_id", "line_no"}, ShardKey: "ws"}
	first, err := q.Misplaced(ctx, query.MisplacedRequest{Tables: []query.PlacedTable{linesPlaced}, Limit: 1})
	if err != nil || len(first.Rows) != 1 {
		t.Fatalf("misplaced lines: %+v, %v; want a first page of one", first, err)
	}
	if _, err := q.Misplaced(ctx, query.MisplacedRequest{Tables: []query.PlacedTable{linesPlaced}, Limit: 10,
		After: &query.MisplacedKey{Table: "lines", ID: first.Rows[0].ID, Shard: uint16(first.Rows[0].Shard)}}); err != nil {
		t.Fatalf("misplaced lines after %s: %v", first.Rows[0].ID, err)
	}
	if _, err := store.MisplacedCounts(ctx, tab, "ws"); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Freshness(ctx, []string{"tp"}); err != nil {
		t.Fatal(err)
	}
	st, err := q.ReadPreaggState(ctx, "t")
	if err != nil || st == nil {
		t.Fatalf("pre-aggregate state: %+v, %v", st, err)
	}
	dirty, _, err := q.PreaggDirty(ctx, "t", st, 100)
	if err != nil {
		t.Fatal(err)
	}
	day := base.Truncate(24 * time.Hour)
	if _, err := q.Revenue(ctx, rev, query.RevenueRequest{From: day, To: day.Add(48 * time.Hour), GroupBy: []query.Group{query.GroupDay},
		Preagg: &query.PreaggRead{IDColumn: "id", Kind: st.Kind, Bits: st.Bits, Dirty: dirty}}); err != nil {
		t.Fatalf("pre-aggregated revenue: %v", err)
	}
	for _, req := range []query.RevenueRequest{
		{From: base, To: base.Add(48 * time.Hour), GroupBy: []query.Group{query.GroupDay}},
		{From: base, To: base.Add(48 * time.Hour), GroupBy: []query.Group{query.GroupWorkspace, query.GroupShard},
			Currencies: []string{"EUR"}, Statuses: []string{"paid", "refunded"}},
		{From: base, To: base.Add(48 * time.Hour), GroupBy: []query.Group{query.GroupMonth}, ShardKey: "ws"},
	} {
		if _, err := q.Revenue(ctx, rev, req); err != nil {
			t.Fatalf("revenue %+v: %v", req, err)
		}
	}
	reads := ch.queryLog(t, db, seen)

	keeper := compact.New(compact.Config{Tables: []string{"t"}, MaxParts: 1}, store.Conn(), db, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	// ClickHouse may have merged the parts already: a new part (another
	// version of row 1) gives the keeper something to merge.
	var compaction []loggedQuery
	for try := 0; try < 3 && !hasOptimize(compaction); try++ {
		insert(row(1, 0, uint64(40+try), false, "alpha again"))
		if _, err := keeper.Round(ctx); err != nil {
			t.Fatal(err)
		}
		compaction = append(compaction, ch.queryLog(t, db, seen)...)
	}

	plan := struct {
		Database string            `json:"database"`
		Settings map[string]string `json:"settings"`
		DDL      []string          `json:"ddl"`
		Data     []map[string]any  `json:"data"`
		Views    []string          `json:"views"`
		Reads    []string          `json:"reads"`
		Optimize []string          `json:"optimize"`
	}{Database: db, Settings: map[string]string{
		// The product's connection setting (chstore.Dial).
		"optimize_move_to_prewhere": "0",
		// Text rendering only: 18.16 prints a Decimal's scale in full
		// (12.5000), current ClickHouse drops trailing zeros unless told.
		// The product reads decimals over the native protocol, as values.
		"output_format_decimal_trailing_zeros": "1",
	}}
	for _, l := range setup {
		switch {
		case reCreateView.MatchString(l.SQL):
			plan.Views = append(plan.Views, l.SQL)
		case reDDL.MatchString(l.SQL) && !strings.Contains(l.SQL, "CREATE DATABASE"):
			plan.DDL = append(plan.DDL, l.SQL)
		}
	}
	for _, l := range reads {
		if reRead.MatchString(l.SQL) {
			plan.Reads = append(plan.Reads, l.SQL)
		}
	}
	for _, l := range compaction {
		if reOptimize.MatchString(l.SQL) {
			plan.Optimize = append(plan.Optimize, l.SQL)
		}
	}
	if len(plan.DDL) == 0 || len(plan.Reads) < 13 || len(plan.Optimize) == 0 {
		t.Fatalf("query_log caught too little: %d DDL, %d reads, %d OPTIMIZE", len(plan.DDL), len(plan.Reads), len(plan.Optimize))
	}
	// The shapes that must be among the reads (a product change that drops
	// one from this test's calls fails here, not silently).
	for what, marker := range map[string]string{
		"pre-aggregated revenue": "`" + revenueblocks.BlocksTable("t") + "`", "live revenue": "__revenue_kept",
		"search": "__search_time", "ownership": "_ownership", "watermarks": "_watermarks",
		"by composite key": "PREWHERE `tenant_id` = ", "misplaced by composite key": "id_text1",
	} {
		found := false
		for _, r := range plan.Reads {
			found = found || strings.Contains(r, marker)
		}
		if !found {
			t.Errorf("no %s read (%s) was captured", what, marker)
		}
	}
	tablesTSV, err := ch.query(fmt.Sprintf("SELECT name FROM system.tables WHERE database = '%s' AND engine NOT LIKE '%%View%%' ORDER BY name", db))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range strings.Fields(tablesTSV) {
		vals, err := ch.query(fmt.Sprintf("SELECT * FROM `%s`.`%s` FORMAT Values", db, name))
		if err != nil {
			t.Fatal(err)
		}
		plan.Data = append(plan.Data, map[string]any{"table": name, "values": strings.TrimSpace(vals)})
	}
	// 18.16's answers, after compaction (FINAL answers do not depend on it).
	want := make([]string, len(plan.Reads))
	for i, sql := range plan.Reads {
		if want[i], err = ch.query(sql); err != nil {
			t.Fatalf("18.16 refused the product's own read %q: %v", sql, err)
		}
	}

	planFile := filepath.Join(t.TempDir(), "plan.json")
	b, _ := json.MarshalIndent(plan, "", "  ")
	if err := os.WriteFile(planFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, py, "chdb/replay.py", planFile)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chdb/replay.py: %v", err)
	}
	var got struct {
		Engine                     string
		DDL, Data, Views, Optimize []*string
		Before, After              []struct{ Out, Error *string }
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("chdb/replay.py output: %v\n%s", err, out)
	}
	t.Logf("chDB engine %s: %d DDL, %d tables of rows, %d views, %d reads, %d OPTIMIZE (plan %s)",
		got.Engine, len(plan.DDL), len(plan.Data), len(plan.Views), len(plan.Reads), len(plan.Optimize), planFile)
	refused := func(what string, stmts []string, errs []*string) {
		for i, e := range errs {
			if e != nil {
				t.Errorf("current ClickHouse refused %s %q: %s", what, stmts[i], *e)
			}
		}
	}
	refused("the DDL", plan.DDL, got.DDL)
	refused("the views", plan.Views, got.Views)
	refused("OPTIMIZE", plan.Optimize, got.Optimize)
	for i, e := range got.Data {
		if e != nil {
			t.Errorf("current ClickHouse refused 18.16's rows of %v: %s", plan.Data[i]["table"], *e)
		}
	}
	for phase, answers := range map[string][]struct{ Out, Error *string }{"before OPTIMIZE": got.Before, "after OPTIMIZE": got.After} {
		if len(answers) != len(plan.Reads) {
			t.Fatalf("%s: %d answers for %d reads", phase, len(answers), len(plan.Reads))
		}
		for i, a := range answers {
			switch {
			case a.Error != nil:
				t.Errorf("%s: current ClickHouse refused the read\n%s\n: %s", phase, plan.Reads[i], *a.Error)
			case !sameAnswer(plan.Reads[i], want[i], *a.Out):
				t.Errorf("%s: answers differ for\n%s\n18.16:\n%s\ncurrent:\n%s", phase, plan.Reads[i], want[i], *a.Out)
			}
		}
	}
}

func hasOptimize(qs []loggedQuery) bool {
	for _, q := range qs {
		if reOptimize.MatchString(q.SQL) {
			return true
		}
	}
	return false
}

// sortedLines is text's lines sorted: reads without ORDER BY may return
// rows in any order.
func sortedLines(text string) []string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	sort.Strings(lines)
	return lines
}

var zeroDecimal = regexp.MustCompile(`^-?0(\.0+)?$`)

// sameAnswer compares two TabSeparated answers of sql, ignoring row order.
// One difference between the versions is allowed, in the revenue sums
// only: sumIf over a Nullable Decimal that no row passes is 0 on 18.16 and
// NULL on current ClickHouse; query.scanRevenueRow reads a NULL sum as
// zero, so the product answers alike.
func sameAnswer(sql, old, cur string) bool {
	a, b := sortedLines(old), sortedLines(cur)
	if len(a) != len(b) {
		return false
	}
	sums := strings.Contains(sql, "__revenue_kept")
	for i := range a {
		if a[i] == b[i] {
			continue
		}
		fa, fb := strings.Split(a[i], "\t"), strings.Split(b[i], "\t")
		if !sums || len(fa) != len(fb) {
			return false
		}
		for j := range fa {
			nullVsZero := (fa[j] == `\N` && zeroDecimal.MatchString(fb[j])) || (fb[j] == `\N` && zeroDecimal.MatchString(fa[j]))
			if fa[j] != fb[j] && !nullVsZero {
				return false
			}
		}
	}
	return true
}
