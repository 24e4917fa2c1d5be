package tests

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/tributary/tributary/internal/verify"
)

// runVerify runs the verifier over the pipeline's shards, API and
// ClickHouse database.
func (p *pipeline) runVerify(ctx context.Context) *verify.Report {
	p.t.Helper()
	return p.runVerifyWait(ctx, 60*time.Second)
}

// runVerifyWait is runVerify with the verifier's wait for positions.
func (p *pipeline) runVerifyWait(ctx context.Context, wait time.Duration) *verify.Report {
	p.t.Helper()
	return p.runVerifyWith(ctx, func(c *verify.Config) { c.Wait = wait })
}

// runVerifyWith runs the verifier with the tests' configuration (every id
// up to 100,000 per table and shard, every one through the API), changed
// by mod, and logs its report.
func (p *pipeline) runVerifyWith(ctx context.Context, mod func(*verify.Config)) *verify.Report {
	p.t.Helper()
	var shards []verify.Shard
	for _, s := range p.shards {
		shards = append(shards, verify.Shard{ID: s, DSN: p.stack.ShardDSNs[s]})
	}
	cfg := verify.Config{
		Shards: shards, Tables: p.tables, APIURL: p.api.URL,
		ClickHouse: verify.ClickHouse{Addr: p.stack.ClickHouseAddr, Database: p.chDB},
		Sample:     100000, Wait: 60 * time.Second, Concurrency: 8, ShardTimeout: 30 * time.Second,
		MaxDifferences: 50, Log: p.log,
	}
	mod(&cfg)
	rep, err := verify.Run(ctx, cfg)
	if err != nil {
		p.t.Fatalf("verify: %v", err)
	}
	var b strings.Builder
	rep.WriteText(&b) //nolint:errcheck // a strings.Builder
	p.t.Logf("verify report:\n%s", b.String())
	return rep
}

// liveRows counts the rows of the pipeline's table on a shard.
func (p *pipeline) liveRows(ctx context.Context, shard int) int {
	p.t.Helper()
	conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[shard])
	if err != nil {
		p.t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{p.table()}.Sanitize()).Scan(&n); err != nil {
		p.t.Fatal(err)
	}
	return n
}

// chRow is a row of the pipeline's ClickHouse table, as the loader wrote it.
type chRow struct {
	workspaceID *int64
	title, body *string
	amount      *decimal.Decimal
	createdAt   *time.Time
	createdUS   *uint32 // created_at's microseconds (chstore.MicrosColumn)
	version     uint64
	commitLSN   uint64
	commitTS    time.Time
}

// readCH reads the live version of (id, shard) straight from ClickHouse.
func (p *pipeline) readCH(ctx context.Context, id int64, shard int) chRow {
	p.t.Helper()
	var r chRow
	err := p.store.Conn().QueryRow(ctx, fmt.Sprintf(
		"SELECT workspace_id, title, body, amount, created_at, _us_created_at, _version, _commit_lsn, _commit_ts FROM `%s`.`%s` FINAL WHERE id = ? AND _shard = ? AND _deleted = 0",
		p.chDB, p.table()), id, uint16(shard)).Scan(&r.workspaceID, &r.title, &r.body, &r.amount, &r.createdAt, &r.createdUS, &r.version, &r.commitLSN, &r.commitTS)
	if err != nil {
		p.t.Fatalf("read ClickHouse row %d on shard %d: %v", id, shard, err)
	}
	return r
}

// writeCH writes a row version straight into ClickHouse, bypassing the
// pipeline: the corruption the verifier must find.
func (p *pipeline) writeCH(ctx context.Context, id int64, shard int, r chRow, deleted bool) {
	p.t.Helper()
	b, err := p.store.Conn().PrepareBatch(ctx, fmt.Sprintf(
		"INSERT INTO `%s`.`%s` (id, workspace_id, title, body, amount, created_at, _us_created_at, _shard, _version, _deleted, _commit_lsn, _commit_ts, _loaded_at)",
		p.chDB, p.table()))
	if err != nil {
		p.t.Fatal(err)
	}
	var del uint8
	if deleted {
		del = 1
	}
	if err := b.Append(id, r.workspaceID, r.title, r.body, r.amount, r.createdAt, r.createdUS, uint16(shard), r.version, del,
		r.commitLSN, r.commitTS, time.Now().UTC()); err != nil {
		p.t.Fatal(err)
	}
	if err := b.Send(); err != nil {
		p.t.Fatalf("write ClickHouse row: %v", err)
	}
}

// TestVerify: after inserts, updates (large TOASTed bodies kept and
// replaced), deletes and a duplicate id on two shards, the verifier passes;
// after ClickHouse is corrupted behind the pipeline's back, it reports
// exactly the corruption.
func TestVerify(t *testing.T) {
	p := newPipeline(t, []int{0, 1}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	tbl := pgx.Identifier{p.table()}.Sanitize()

	big := strings.Repeat("toast me ", 2000) // ~18 KB, stored out of line
	var ids [2][]int64
	for i := 0; i < 40; i++ {
		shard, body := i%2, "small body"
		if i%3 == 0 {
			body = big + fmt.Sprint(i)
		}
		ids[shard] = append(ids[shard], p.insert(ctx, shard, int64(100+i%5), fmt.Sprintf("doc %d", i), body))
	}
	for shard := 0; shard < 2; shard++ {
		own := ids[shard]
		// Title only: the big body is unchanged TOAST downstream.
		p.exec(ctx, shard, fmt.Sprintf("UPDATE %s SET title = 'retitled' WHERE id = ANY($1)", tbl), own[0:4])
		// A new large body, an amount with a trailing zero, a NULL body.
		p.exec(ctx, shard, fmt.Sprintf("UPDATE %s SET body = $2, amount = 12.50 WHERE id = $1", tbl), own[4], strings.Repeat("new body ", 1500))
		p.exec(ctx, shard, fmt.Sprintf("UPDATE %s SET body = NULL, amount = -0.10 WHERE id = $1", tbl), own[5])
		// Sub-second timestamps: ClickHouse keeps seconds.
		p.exec(ctx, shard, fmt.Sprintf("UPDATE %s SET created_at = '2024-02-29 23:59:59.999999+00' WHERE id = $1", tbl), own[6])
		// Two updates of one row in one transaction, then deletes.
		p.exec(ctx, shard, fmt.Sprintf("BEGIN; UPDATE %[1]s SET title = 'x' WHERE id = %[2]d; UPDATE %[1]s SET title = 'y' WHERE id = %[2]d; COMMIT", tbl, own[7]))
		p.exec(ctx, shard, fmt.Sprintf("DELETE FROM %s WHERE id = ANY($1)", tbl), own[8:11])
	}
	// The same id live on both shards.
	dup := ids[0][12]
	p.exec(ctx, 1, fmt.Sprintf("INSERT INTO %s (id, workspace_id, title, body) VALUES ($1, 7, 'a copy', $2)", tbl), dup, big)

	rep := p.runVerify(ctx)
	if !rep.Passed {
		t.Fatalf("verify failed on an intact pipeline: %+v", rep.Differences)
	}
	live := [2]int{p.liveRows(ctx, 0), p.liveRows(ctx, 1)}
	if len(rep.Tables) != 1 || len(rep.Tables[0].Shards) != 2 {
		t.Fatalf("report tables = %+v", rep.Tables)
	}
	for i, s := range rep.Tables[0].Shards {
		if s.Checked != live[i] || s.SourceRows != int64(live[i]) || s.ClickHouseRows != int64(live[i]) || s.Sampled {
			t.Errorf("shard %d: %+v, want %d rows checked", i, s, live[i])
		}
	}

	// Corrupt one copy of the duplicate: a newer version with a wrong
	// title, every other column kept.
	r := p.readCH(ctx, dup, 0)
	wrong := "corrupted"
	r.title, r.version = &wrong, r.version+1
	p.writeCH(ctx, dup, 0, r, false)

	rep = p.runVerify(ctx)
	want := verify.Difference{Kind: verify.KindWrongValue, Table: p.table(), ID: fmt.Sprint(dup), Shard: 0,
		Column: "title", Source: `"doc 24"`, API: `"corrupted"`}
	if rep.Passed || rep.Mismatches != (verify.Mismatches{WrongValue: 1}) || len(rep.Differences) != 1 {
		t.Fatalf("after corrupting one title: mismatches %+v, differences %+v", rep.Mismatches, rep.Differences)
	}
	if got := rep.Differences[0]; got.Kind != want.Kind || got.Table != want.Table || got.ID != want.ID ||
		got.Shard != want.Shard || got.Column != want.Column || got.Source != want.Source || got.API != want.API {
		t.Fatalf("difference = %+v, want %+v", got, want)
	}
	if rep.Rechecked != 1 {
		t.Errorf("re-checked %d, want the one differing id", rep.Rechecked)
	}

	// A tombstone for a live row and a row no shard has, on the same
	// shard: the counts agree, the id checks must not.
	gone := ids[1][13]
	r = p.readCH(ctx, gone, 1)
	r.version++
	p.writeCH(ctx, gone, 1, r, true)
	const phantom = 4242
	p.writeCH(ctx, phantom, 1, r, false)

	rep = p.runVerify(ctx)
	if rep.Mismatches != (verify.Mismatches{Missing: 1, Extra: 1, WrongValue: 1}) {
		t.Fatalf("after a tombstone and a phantom: mismatches %+v, differences %+v", rep.Mismatches, rep.Differences)
	}
	found := map[verify.Kind]string{}
	for _, d := range rep.Differences {
		found[d.Kind] = fmt.Sprintf("%s/%d", d.ID, d.Shard)
	}
	if found[verify.KindMissing] != fmt.Sprintf("%d/1", gone) || found[verify.KindExtra] != fmt.Sprintf("%d/1", phantom) {
		t.Fatalf("differences %+v: want %d missing and %d extra on shard 1", rep.Differences, gone, phantom)
	}
}
