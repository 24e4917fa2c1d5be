package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary/tributary/internal/rowkey"
)

// A table keyed by (tenant_id, line_no): its rows are identified by both
// columns (id_columns, id_layout "key"). The helpers below are meant for
// reuse by other end-to-end tests that need a composite-key table.

// compositeDDL creates the table (its name is the %s).
const compositeDDL = `CREATE TABLE %s (tenant_id text NOT NULL, line_no integer NOT NULL, note text, amount numeric(12,2),
	created_at timestamptz NOT NULL DEFAULT '2026-01-01 00:00:00+00', PRIMARY KEY (tenant_id, line_no))`

// compositeTableJSON is the config entry of a table keyed like
// compositeDDL's, named %[2]s (setupPipelineOn's arguments).
const compositeTableJSON = `{"name": %[2]q, "id_columns": ["tenant_id", "line_no"], "id_layout": "key"}`

// compositeTablesJSON is a table config of one composite-key table,
// searchable by created_at (every row has the same: pages are ordered by
// the key alone).
const compositeTablesJSON = `{"topic_prefix": "e2e_%[1]s.", "tables": [
	{"name": %[2]q, "id_columns": ["tenant_id", "line_no"], "id_layout": "key", "search": {"time_column": "created_at"}}]}`

// compositeKey is a row's key text (what the API and the anomalies
// list name it by).
func compositeKey(tenant string, line int) string {
	return rowkey.Encode([]string{tenant, fmt.Sprint(line)})
}

// compositeRows lists the key texts of table's rows on shard.
func (p *pipeline) compositeRows(ctx context.Context, table string, shard int) []string {
	p.t.Helper()
	conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[shard])
	if err != nil {
		p.t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT tenant_id, line_no FROM "+pgx.Identifier{table}.Sanitize()+" ORDER BY 1, 2")
	if err != nil {
		p.t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var tenant string
		var line int
		if err := rows.Scan(&tenant, &line); err != nil {
			p.t.Fatal(err)
		}
		out = append(out, compositeKey(tenant, line))
	}
	if err := rows.Err(); err != nil {
		p.t.Fatal(err)
	}
	return out
}

// compositeRow reads a row of table by its key text through the API: the
// status and the shards of its copies.
func (p *pipeline) compositeRow(ctx context.Context, table, key string) (int, []int, string) {
	p.t.Helper()
	status, _, body := apiGet(ctx, p.t, p.api.URL, "/v1/tables/"+table+"/rows/"+url.PathEscape(key), "")
	var ans struct {
		ID     string `json:"id"`
		Copies []struct {
			Shard int            `json:"shard"`
			Row   map[string]any `json:"row"`
		} `json:"copies"`
	}
	json.Unmarshal(body, &ans) //nolint:errcheck // the status says
	var shards []int
	for _, c := range ans.Copies {
		if c.Row["tenant_id"] == nil || c.Row["line_no"] == nil {
			p.t.Errorf("%s: copy on shard %d without its key columns: %v", key, c.Shard, c.Row)
		}
		shards = append(shards, c.Shard)
	}
	return status, shards, string(body)
}

// TestCompositeIdentity: a table keyed (tenant_id, line_no) on two shards
// numbered 3 and 7, two tenants per shard with the same line numbers, one
// tenant name with a comma in it (escaped in the key text), and the key
// ("dup", 1) on both shards. Copied by the initial snapshot, then
// streamed: inserts, updates of non-key columns (one leaving a TOASTed
// column unchanged, which the loader reads back by key), an update of a key
// column (a delete of the old key and an insert of the new), deletes and a
// truncate of one shard's table followed by new rows. Then: ClickHouse
// sorts by (tenant_id, line_no, _shard); the verifier passes, every row of
// every shard compared; every key of every shard reads through the API
// from the shards that have it, a deleted or changed-away key is a 404
// and a malformed key a 400 naming the key's form; the key on both
// shards is listed once as a duplicate.
func TestCompositeIdentity(t *testing.T) {
	numbers := []int{3, 7}
	st := sparseStack(t, numbers)
	p := setupPipelineOn(t, st, numbers, nil, true, "lines_", compositeTablesJSON, compositeDDL)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	runCtx, runCancel := context.WithCancel(context.Background())
	defer runCancel()
	tbl := pgx.Identifier{p.table()}.Sanitize()
	tenants := map[int][]string{3: {"acme, inc", `t\3`}, 7: {"t7a", "t7b"}}
	insert := func(shard int, tenant string, lines ...int) {
		for _, l := range lines {
			p.exec(ctx, shard, "INSERT INTO "+tbl+" (tenant_id, line_no, note, amount) VALUES ($1, $2, $3, $4)",
				tenant, l, fmt.Sprintf("line %d of %s", l, tenant), fmt.Sprintf("%d.%02d", l, l))
		}
	}
	// Before the readers start: the initial snapshot copies these.
	for _, s := range numbers {
		for _, tn := range tenants[s] {
			insert(s, tn, 1, 2, 3)
		}
		insert(s, "dup", 1)
	}
	for _, s := range numbers {
		p.startReader(runCtx, s)
	}
	_, stopFirst := p.stoppableLoader(runCtx, "l1")
	for _, s := range numbers {
		p.waitSlotStreaming(ctx, s)
	}

	// Streamed changes.
	for _, s := range numbers {
		for _, tn := range tenants[s] {
			insert(s, tn, 4, 5)
			p.exec(ctx, s, "UPDATE "+tbl+" SET note = 'updated', amount = amount + 1 WHERE tenant_id = $1 AND line_no = 2", tn)
			p.exec(ctx, s, "DELETE FROM "+tbl+" WHERE tenant_id = $1 AND line_no = 3", tn)
		}
	}
	// A TOASTed note, then (to a loader started since, whose image cache
	// is empty) an update that leaves it unchanged: pgoutput does not send
	// it, and the loader reads it back from ClickHouse by key.
	p.exec(ctx, 3, "UPDATE "+tbl+" SET note = (SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 300)) WHERE tenant_id = $1 AND line_no = 4", tenants[3][0])
	p.waitFor(ctx, time.Minute, "the TOASTed note in ClickHouse", func() bool {
		return p.chCountOnceCreated(ctx, "SELECT count() FROM %s.%s FINAL WHERE tenant_id = ? AND line_no = 4 AND length(note) > 5000 AND _deleted = 0", tenants[3][0]) == 1
	})
	stopFirst()
	_, stopSecond := p.stoppableLoader(runCtx, "l2")
	defer stopSecond()
	p.exec(ctx, 3, "UPDATE "+tbl+" SET amount = amount + 1 WHERE tenant_id = $1 AND line_no = 4", tenants[3][0])
	// Key columns change on shard 3: (tenant, 5) becomes (tenant, 50),
	// and (other tenant, 4) moves to tenant t3c.
	p.exec(ctx, 3, "UPDATE "+tbl+" SET line_no = 50 WHERE tenant_id = $1 AND line_no = 5", tenants[3][0])
	p.exec(ctx, 3, "UPDATE "+tbl+" SET tenant_id = 't3c' WHERE tenant_id = $1 AND line_no = 4", tenants[3][1])
	gone := []string{compositeKey(tenants[3][0], 5), compositeKey(tenants[3][1], 4), compositeKey(tenants[3][1], 3)}
	// Shard 7's table truncated mid-stream, then written again (the
	// duplicate key among the new rows).
	p.exec(ctx, 7, "TRUNCATE "+tbl)
	insert(7, "t7a", 1, 2)
	insert(7, "dup", 1)
	gone = append(gone, compositeKey("t7b", 5))

	rep := p.runVerify(ctx)
	if !rep.Passed {
		t.Fatalf("verify: mismatches %+v, differences %+v", rep.Mismatches, rep.Differences)
	}
	for _, tr := range rep.Tables {
		var got []int
		for _, sh := range tr.Shards {
			got = append(got, sh.Shard)
			if sh.Sampled || int64(sh.Checked) != sh.SourceRows || sh.ClickHouseRows != sh.SourceRows || sh.Checked == 0 {
				t.Errorf("table %s shard %d: %+v, want every row checked", tr.Table, sh.Shard, sh)
			}
		}
		if !slices.Equal(got, numbers) {
			t.Errorf("table %s: shards %v checked, want %v", tr.Table, got, numbers)
		}
	}

	// The ClickHouse table is sorted by the whole key.
	var sortKey string
	if err := p.store.Conn().QueryRow(ctx, "SELECT sorting_key FROM system.tables WHERE database = ? AND name = ?", p.chDB, p.table()).Scan(&sortKey); err != nil {
		t.Fatal(err)
	}
	if sortKey != "tenant_id, line_no, _shard" {
		t.Errorf("sorting key %q, want tenant_id, line_no, _shard", sortKey)
	}

	// Every key of every shard, by key text through the API.
	where := map[string][]int{}
	for _, s := range numbers {
		for _, k := range p.compositeRows(ctx, p.table(), s) {
			where[k] = append(where[k], s)
		}
	}
	if len(where[compositeKey(tenants[3][0], 50)]) != 1 || len(where[compositeKey("t3c", 4)]) != 1 {
		t.Fatalf("source keys %v: the changed keys are missing", where)
	}
	for k, shards := range where {
		status, got, body := p.compositeRow(ctx, p.table(), k)
		if status != http.StatusOK || !slices.Equal(got, shards) {
			t.Errorf("GET key %q: %d, copies on %v, want 200 on %v\n%s", k, status, got, shards, body)
		}
	}
	if !slices.Equal(where[compositeKey("dup", 1)], numbers) {
		t.Errorf("dup,1 on shards %v, want %v", where[compositeKey("dup", 1)], numbers)
	}
	for _, k := range gone {
		if status, _, body := p.compositeRow(ctx, p.table(), k); status != http.StatusNotFound {
			t.Errorf("GET removed key %q: %d, want 404\n%s", k, status, body)
		}
	}
	form := fmt.Sprintf("%s is keyed by (tenant_id, line_no): /v1/tables/%s/rows/{tenant_id},{line_no}", p.table(), p.table())
	for _, bad := range []string{"t7a", "t7a,1,2", "t7a,one", `t7a\x,1`} {
		status, _, body := p.compositeRow(ctx, p.table(), bad)
		if status != http.StatusBadRequest || !strings.Contains(body, form) {
			t.Errorf("GET malformed key %q: %d %s; want 400 naming %q", bad, status, body, form)
		}
	}

	// Search pages through every live row once, ordered by the key (the
	// times tie), two at a time.
	var searched []string
	cursor := ""
	for page := 0; page < 20; page++ {
		path := "/v1/documents?from=2025-12-31&to=2026-01-02&limit=2"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		status, _, body := apiGet(ctx, t, p.api.URL, path, "")
		var ans struct {
			Documents []struct {
				Shard int            `json:"shard"`
				Row   map[string]any `json:"row"`
			} `json:"documents"`
			Next string `json:"next_cursor"`
		}
		if status != http.StatusOK || json.Unmarshal(body, &ans) != nil {
			t.Fatalf("search %s: %d %s", path, status, body)
		}
		for _, d := range ans.Documents {
			searched = append(searched, fmt.Sprintf("%s@%d", compositeKey(fmt.Sprint(d.Row["tenant_id"]), int(d.Row["line_no"].(float64))), d.Shard))
		}
		if cursor = ans.Next; cursor == "" {
			break
		}
	}
	var all []string
	for k, shards := range where {
		for _, s := range shards {
			all = append(all, fmt.Sprintf("%s@%d", k, s))
		}
	}
	slices.Sort(all)
	if got := slices.Sorted(slices.Values(searched)); !slices.Equal(got, all) || len(searched) != len(all) {
		t.Errorf("search returned %q, want every live row once: %q", searched, all)
	}

	// The key live on both shards is one duplicate, named by its key text.
	var dups []string
	p.waitFor(ctx, 60*time.Second, "the duplicate key listed", func() bool {
		status, _, body := apiGet(ctx, t, p.api.URL, "/v1/anomalies/duplicates?table="+p.table(), "")
		var ans struct {
			Anomalies []struct {
				ID     string `json:"id"`
				Shards []int  `json:"shards"`
			} `json:"anomalies"`
		}
		if status != http.StatusOK || json.Unmarshal([]byte(body), &ans) != nil {
			t.Fatalf("duplicates: %d %s", status, body)
		}
		dups = dups[:0]
		for _, a := range ans.Anomalies {
			dups = append(dups, fmt.Sprintf("%s@%v", a.ID, a.Shards))
		}
		return len(dups) > 0
	})
	if want := []string{"dup,1@[3 7]"}; !slices.Equal(dups, want) {
		t.Errorf("duplicates %q, want %q", dups, want)
	}
	if err := p.failed(); err != nil {
		t.Fatal(err)
	}
}
