package tests

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/tributary/tributary/internal/loadgen"
	"github.com/tributary/tributary/internal/ring"
	"github.com/tributary/tributary/internal/verify"
)

// The demo's tables (schema/postgres/10_demo.sql) under per-test names:
// %s is the documents table; invoices and the move log are named after it.
var loadgenDDL = []string{
	`CREATE TABLE %s (
		id bigint PRIMARY KEY DEFAULT tributary.next_id(),
		workspace_id bigint NOT NULL,
		title text NOT NULL,
		body text,
		created_at timestamptz NOT NULL DEFAULT now(),
		updated_at timestamptz NOT NULL DEFAULT now())`,
	// Every body over ~2 kB out of line: a retitle keeps it as unchanged TOAST.
	`ALTER TABLE %s ALTER COLUMN body SET STORAGE EXTERNAL`,
	`CREATE TABLE %s_inv (
		id bigint PRIMARY KEY DEFAULT tributary.next_id(),
		workspace_id bigint NOT NULL,
		amount numeric(12,2) NOT NULL,
		currency text NOT NULL,
		status text NOT NULL CHECK (status IN ('issued', 'paid', 'refunded', 'void')),
		issued_at timestamptz NOT NULL,
		paid_at timestamptz)`,
	strings.Replace(movesDDL, "%s", "%s_moves", 1), // the move log, as TestMoves has it
}

// loadgenTablesJSON is the demo's table config (deploy/local/tables.json)
// for those tables, with a grace period of 1 s for moves.
const loadgenTablesJSON = `{"topic_prefix": "e2e_%[1]s.", "tables": [
	{"name": %[2]q, "id_column": "id", "id_layout": "seed000", "shard_key": "workspace_id"},
	{"name": "%[2]s_inv", "id_column": "id", "id_layout": "seed000", "shard_key": "workspace_id"},
	{"name": "%[2]s_moves", "id_column": "move_id", "id_layout": "uuidv4"}],
	"revenue": {"table": "%[2]s_inv", "amount_column": "amount", "currency_column": "currency",
		"time_column": "issued_at", "status_column": "status", "workspace_column": "workspace_id",
		"count_statuses": ["paid"], "refund_statuses": ["refunded"]},
	"moves": {"table": "%[2]s_moves", "documents_table": %[2]q, "document_column": "document_id",
		"from_shard_column": "from_shard", "to_shard_column": "to_shard",
		"from_workspace_column": "from_workspace", "to_workspace_column": "to_workspace",
		"state_column": "state", "in_progress_states": ["started", "copied"], "done_states": ["done"],
		"started_column": "started_at", "finished_column": "finished_at", "grace": "1s"}}`

// TestLoadgenBulk: loadgen's bulk traffic (100-row transactions of
// multi-row inserts, retitles keeping TOASTed bodies, deletes, pays and
// refunds) on every shard, then a little single-row traffic with moves
// (some left half-done, some lost), through readers, Kafka, the loader and
// the API: the verifier must pass — every row of every table equal, counts
// equal, revenue equal to the cent, the stuck and lost moves listed — and
// the bulk rows must really be there: the live rows, and the invoices'
// counts and sums by status, in ClickHouse equal the shards', read here
// without the verifier.
func TestLoadgenBulk(t *testing.T) {
	t.Parallel()
	var p *pipeline
	t.Cleanup(func() { // after p's cleanup (registered later, run earlier) stopped the readers
		if p == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, s := range p.shards {
			if conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[s]); err == nil {
				conn.Exec(ctx, fmt.Sprintf("DROP TABLE IF EXISTS %s, %s",
					pgx.Identifier{p.table() + "_inv"}.Sanitize(), pgx.Identifier{p.table() + "_moves"}.Sanitize())) //nolint:errcheck
				conn.Close(ctx)
			}
		}
	})
	st := loadStack(t)
	shards := make([]int, min(4, len(st.ShardDSNs)))
	for i := range shards {
		shards[i] = i
	}
	if len(shards) < 2 {
		t.Skip("needs two shards")
	}
	p = setupPipelineWith(t, shards, nil, true, "lgdocs_", loadgenTablesJSON, loadgenDDL...)
	docs, inv := p.table(), p.table()+"_inv"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	runCtx, runCancel := context.WithCancel(context.Background())
	defer runCancel()
	for _, s := range shards {
		p.startReader(runCtx, s)
	}
	p.startLoader(runCtx, "l1")
	// Traffic only once every slot is consistent: what commits before
	// would arrive by the readers' initial copy, not as the transactions
	// streamed, which are what this test is about.
	for _, s := range shards {
		p.waitSlotStreaming(ctx, s)
	}

	rs := make([]ring.Shard, len(shards))
	for i, s := range shards {
		rs[i] = ring.Shard{ID: s}
	}
	m, err := ring.New(1, rs, 64)
	if err != nil {
		t.Fatal(err)
	}
	names := loadgen.Tables{Documents: docs, Invoices: inv, Moves: p.table() + "_moves"}
	gen := func(cfg loadgen.Config) *loadgen.Generator {
		cfg.DSNs = map[int]string{}
		for _, s := range shards {
			cfg.DSNs[s] = p.stack.ShardDSNs[s]
		}
		cfg.Ring, cfg.Tables, cfg.Workspaces, cfg.Workers = m, names, 30, 4
		g, err := loadgen.New(ctx, cfg, p.log)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(g.Close)
		return g
	}
	// Bulk: 100-row transactions, bodies of 3 kB (TOASTed, so a retitle
	// replicates them as unchanged).
	const rowsPerOp = 100
	bulk := gen(loadgen.Config{RowsPerOp: rowsPerOp, BulkBodyBytes: 3000})
	if err := bulk.RunFor(ctx, 20, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	s := &bulk.Stats
	t.Logf("bulk: %d operations, %d rows: documents +%d ~%d -%d, invoices issued %d paid %d refunded %d",
		s.Ops.Load(), s.Rows.Load(), s.DocsCreated.Load(), s.DocsEdited.Load(), s.DocsDel.Load(),
		s.InvIssued.Load(), s.InvPaid.Load(), s.InvRefunded.Load())
	// An operation cut off by the end of the run is counted but changes
	// nothing (rolled back); every other one changes rowsPerOp rows.
	if ops, rows := s.Ops.Load(), s.Rows.Load(); s.Errors.Load() != 0 || ops < 10 || rows%rowsPerOp != 0 || rows < (ops-4)*rowsPerOp {
		t.Fatalf("bulk traffic: %d operations, %d errors, %d rows changed (want %d per operation)",
			ops, s.Errors.Load(), rows, rowsPerOp)
	}
	for what, n := range map[string]int64{"retitled": s.DocsEdited.Load(), "deleted": s.DocsDel.Load(),
		"paid": s.InvPaid.Load(), "refunded": s.InvRefunded.Load()} {
		if n == 0 {
			t.Fatalf("bulk traffic %s no rows: it did not exercise its updates and deletes", what)
		}
	}
	// Then single-row traffic with moves: some complete, some left
	// half-done, some lost. A completed move makes the document movable
	// again, so one document may move twice within a second, which ties in
	// ClickHouse's whole-second DateTime (internal/query/movetie.go).
	single := gen(loadgen.Config{BodyBytes: 4000, MoveShare: 0.2, HalfDoneShare: 0.4, LoseShare: 0.3})
	if err := single.RunFor(ctx, 100, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := single.Stats.Errors.Load(); n != 0 {
		t.Fatalf("single-row traffic: %d errors", n)
	}
	if single.Stats.MovesDone.Load() == 0 || single.Stats.MovesHalfDone.Load() == 0 {
		t.Fatalf("single-row traffic completed %d moves and left %d half-done: want some of each",
			single.Stats.MovesDone.Load(), single.Stats.MovesHalfDone.Load())
	}
	moved := single.Stats.MovesDone.Load() + single.Stats.MovesHalfDone.Load() + single.Stats.MovesLost.Load()
	time.Sleep(1500 * time.Millisecond) // every unfinished move past the grace period: listed as stuck

	// Most rows compared with ClickHouse's bulk read, 30 per table and
	// shard through the API.
	const apiSample = 30
	rep := p.runVerifyAPISample(ctx, apiSample)
	if err := p.failed(); err != nil {
		t.Fatal(err)
	}
	if !rep.Passed {
		t.Fatalf("verify failed after bulk traffic: mismatches %+v, differences %+v", rep.Mismatches, rep.Differences)
	}
	for _, tr := range rep.Tables {
		checked, viaAPI := 0, 0
		for _, sh := range tr.Shards {
			// At least the sample through the API (more when an id of
			// another shard's sample is live here too: a half-done move).
			want := min(apiSample, sh.Checked)
			if tr.Table == p.table()+"_moves" {
				want = sh.Checked // uuids: all through the API
			}
			if sh.Sampled || int64(sh.Checked) != sh.SourceRows || sh.ViaAPI < want || sh.ViaAPI > sh.Checked {
				t.Errorf("table %s shard %d: %d of %d rows compared, %d through the API; want all, at least %d", tr.Table, sh.Shard,
					sh.Checked, sh.SourceRows, sh.ViaAPI, want)
			}
			checked, viaAPI = checked+sh.Checked, viaAPI+sh.ViaAPI
		}
		if tr.Table == docs && viaAPI >= checked {
			t.Errorf("table %s: all %d rows through the API, none read from ClickHouse in bulk", tr.Table, checked)
		}
	}
	if rep.Revenue == nil || rep.Revenue.Groups == 0 {
		t.Errorf("revenue not compared: %+v", rep.Revenue)
	}
	if rep.Moves == nil || int64(rep.Moves.Moves) < moved || moved == 0 {
		t.Errorf("moves: %+v, want the %d the traffic made (and any it started when its run ended)", rep.Moves, moved)
	}

	// Without the verifier: the bulk rows arrived, all of them.
	for _, table := range []string{docs, inv} {
		var src int64
		for _, sh := range shards {
			n := p.countSource(ctx, sh, "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize())
			if n == 0 {
				t.Errorf("%s: no live rows on shard %d", table, sh)
			}
			src += n
		}
		var ch uint64
		if err := p.store.Conn().QueryRow(ctx, fmt.Sprintf("SELECT count() FROM `%s`.`%s` FINAL WHERE _deleted = 0", p.chDB, table)).Scan(&ch); err != nil {
			t.Fatal(err)
		}
		if int64(ch) != src {
			t.Errorf("%s: %d live rows in ClickHouse, %d on the shards", table, ch, src)
		}
	}
	want := map[string]string{}
	for _, sh := range shards {
		conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[sh])
		if err != nil {
			t.Fatal(err)
		}
		rows, err := conn.Query(ctx, "SELECT status, count(*), sum(amount)::text FROM "+pgx.Identifier{inv}.Sanitize()+" GROUP BY status")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var status, sum string
			var n int64
			if err := rows.Scan(&status, &n, &sum); err != nil {
				t.Fatal(err)
			}
			want[fmt.Sprintf("%d/%s", sh, status)] = fmt.Sprintf("%d %s", n, decimal.RequireFromString(sum))
		}
		conn.Close(ctx)
	}
	got := map[string]string{}
	rows, err := p.store.Conn().Query(ctx, fmt.Sprintf("SELECT _shard, status, count(), sum(amount) FROM `%s`.`%s` FINAL WHERE _deleted = 0 GROUP BY _shard, status", p.chDB, inv))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var shard uint16
		var status string
		var n uint64
		var sum decimal.Decimal
		if err := rows.Scan(&shard, &status, &n, &sum); err != nil {
			t.Fatal(err)
		}
		got[fmt.Sprintf("%d/%s", shard, status)] = fmt.Sprintf("%d %s", n, sum)
	}
	rows.Close()
	if fmt.Sprint(got) != fmt.Sprint(want) || !strings.Contains(fmt.Sprint(want), "/refunded") {
		t.Errorf("invoices by shard and status (count, sum) in ClickHouse:\n%v\non the shards:\n%v", got, want)
	}

	// A title corrupted behind the pipeline's back (a newer version of the
	// row in ClickHouse): the bulk comparison finds it, the API confirms it.
	var id int64
	var shard uint16
	if err := p.store.Conn().QueryRow(ctx, fmt.Sprintf("SELECT id, _shard FROM `%s`.`%s` FINAL WHERE _deleted = 0 AND id NOT IN (SELECT document_id FROM `%s`.`%s`) ORDER BY cityHash64(id) LIMIT 1",
		p.chDB, docs, p.chDB, p.table()+"_moves")).Scan(&id, &shard); err != nil {
		t.Fatal(err)
	}
	p.corruptTitle(ctx, docs, id, int(shard))
	rep = p.runVerifyAPISample(ctx, 1)
	if rep.Mismatches != (verify.Mismatches{WrongValue: 1}) || len(rep.Differences) != 1 ||
		rep.Differences[0].ID != fmt.Sprint(id) || rep.Differences[0].Column != "title" || rep.Differences[0].API != `"corrupted"` {
		t.Fatalf("after corrupting the title of %d: mismatches %+v, differences %+v", id, rep.Mismatches, rep.Differences)
	}
}

// runVerifyAPISample runs the verifier over every row, apiSample ids per
// table and shard through the API and the others read from ClickHouse.
func (p *pipeline) runVerifyAPISample(ctx context.Context, apiSample int) *verify.Report {
	p.t.Helper()
	return p.runVerifyWith(ctx, func(c *verify.Config) { c.Sample, c.APISample = 0, apiSample })
}

// corruptTitle writes, straight into ClickHouse, a newer version of a live
// row of table with the title "corrupted" and every other column kept.
func (p *pipeline) corruptTitle(ctx context.Context, table string, id int64, shard int) {
	p.t.Helper()
	rows, err := p.store.Conn().Query(ctx, "SELECT name FROM system.columns WHERE database = ? AND table = ?", p.chDB, table)
	if err != nil {
		p.t.Fatal(err)
	}
	var cols, exprs []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			p.t.Fatal(err)
		}
		e := "`" + c + "`"
		switch c {
		case "title":
			e = "'corrupted'"
		case "_version":
			e = "_version + 1"
		}
		cols, exprs = append(cols, "`"+c+"`"), append(exprs, e)
	}
	rows.Close()
	sql := fmt.Sprintf("INSERT INTO `%[1]s`.`%[2]s` (%[3]s) SELECT %[4]s FROM `%[1]s`.`%[2]s` FINAL WHERE id = %[5]d AND _shard = %[6]d AND _deleted = 0",
		p.chDB, table, strings.Join(cols, ", "), strings.Join(exprs, ", "), id, shard)
	if err := p.store.Conn().Exec(ctx, sql); err != nil {
		p.t.Fatalf("corrupt %d: %v", id, err)
	}
}

// waitSlotStreaming waits until the reader of shard has its slot and
// streams from it (the slot active, at a consistent point).
func (p *pipeline) waitSlotStreaming(ctx context.Context, shard int) {
	p.t.Helper()
	slot := fmt.Sprintf("e2e_%s_%d", p.suffix, shard)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := p.failed(); err != nil {
			p.t.Fatalf("waiting for slot %s: %v", slot, err)
		}
		n := p.countSource(ctx, shard, fmt.Sprintf(
			"SELECT count(*) FROM pg_replication_slots WHERE slot_name = '%s' AND active AND confirmed_flush_lsn IS NOT NULL", slot))
		if n == 1 {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("slot %s not streaming after 60 s", slot)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// countSource runs a count query on a shard.
func (p *pipeline) countSource(ctx context.Context, shard int, sql string) int64 {
	p.t.Helper()
	conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[shard])
	if err != nil {
		p.t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int64
	if err := conn.QueryRow(ctx, sql).Scan(&n); err != nil {
		p.t.Fatalf("shard %d: %s: %v", shard, sql, err)
	}
	return n
}
