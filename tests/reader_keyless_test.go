package tests

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary/tributary/internal/tables"
)

// TestSnapshotKeylessCtidChunksResume: a table without a primary key
// (REPLICA IDENTITY FULL) is copied in ctid (heap block) chunks while it
// takes inserts, updates and deletes; the cdc-reader is SIGKILLed in the
// middle of the copy, and the restarted one resumes it (copies fewer rows
// than the table holds) instead of starting over. ClickHouse must then
// equal the shard exactly.
func TestSnapshotKeylessCtidChunksResume(t *testing.T) {
	const shard, rows, chunk, rate = 3, 40000, 500, 8000
	p := setupPipeline(t, []int{shard}, nil, true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nokey, q, tablesJSON, cfg := keylessTable(ctx, t, p, shard)
	p.tables = cfg // the loader and the cleanup's topic list see both tables
	p.exec(ctx, shard, fmt.Sprintf("INSERT INTO %s (workspace_id, title) SELECT g %% 7, 'k' || g FROM generate_series(1, %d) g", q, rows))
	p.exec(ctx, shard, "ANALYZE "+q) // row estimate: chunks of about `chunk` rows

	loaderCtx, stopLoader := context.WithCancel(context.Background())
	t.Cleanup(stopLoader) // before the pipeline's cleanup waits for the loader
	p.startLoader(loaderCtx, "l1")

	slot := fmt.Sprintf("e2e_%s_%d", p.suffix, shard)
	stateTopic := "e2e_" + p.suffix + ".state"
	rd, logFile := readerProcess(t, p, shard, tablesJSON,
		"--snapshot-workers", "2", "--snapshot-chunk-rows", strconv.Itoa(chunk),
		"--snapshot-max-rows-per-second", strconv.Itoa(rate), "--snapshot-progress-interval", "1s")
	defer stopReaderProcess(t, rd, logFile)

	wctx, stopWrites := context.WithCancel(ctx)
	defer stopWrites()
	churned := make(chan error, 1)
	go func() { churned <- churnKeyless(wctx, p.stack.ShardDSNs[shard], q) }()

	before := p.waitCopying(ctx, stateTopic, slot, 5*chunk, "the test could kill it", nil)
	rd.kill()
	doneRows, ranges, doneRanges := before.rows()
	t.Logf("SIGKILLed the reader with %d rows recorded, %d of %d ranges done", doneRows, doneRanges, ranges)

	p.waitSnapshotDone(ctx, stateTopic, slot)
	time.Sleep(time.Second) // writes after the snapshot, too
	stopWrites()
	if err := <-churned; err != nil {
		t.Fatalf("writes: %v", err)
	}

	p.waitTitlesEqual(ctx, shard, nokey)

	logs, _ := os.ReadFile(logFile)
	if !strings.Contains(string(logs), "copied by ctid (heap block) ranges") {
		t.Error("the reader did not plan the keyless table by ctid ranges")
	}
	if !strings.Contains(string(logs), "start: resume snapshot") {
		t.Error(`the restarted reader did not log "start: resume snapshot"`)
	}
	if ranges < 2 {
		t.Errorf("%d ranges for a %d-row table in %d-row chunks: not chunked", ranges, rows, chunk)
	}
	thisRun, total := checkResumedRun(t, logs, doneRows)
	t.Logf("resumed run copied %d rows of %d; %d recorded before the kill", thisRun, total, doneRows)
	if err := p.failed(); err != nil {
		t.Fatal(err)
	}
}

// churnKeyless inserts, updates and deletes rows of a keyless table (q,
// quoted) until ctx ends. Updates move rows to new tuples, possibly in
// blocks a chunk already copied or not yet planned.
func churnKeyless(ctx context.Context, dsn, q string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for ctx.Err() == nil {
		var err error
		switch op := rand.IntN(10); {
		case op < 4:
			_, err = conn.Exec(ctx, "INSERT INTO "+q+" (workspace_id, title) SELECT g % 7, 'new' || g FROM generate_series(1, 5) g")
		case op < 8:
			_, err = conn.Exec(ctx, "UPDATE "+q+" SET title = $1 WHERE id IN (SELECT id FROM "+q+" ORDER BY random() LIMIT 3)",
				"u"+strconv.Itoa(rand.IntN(1e6)))
		default:
			_, err = conn.Exec(ctx, "DELETE FROM "+q+" WHERE id IN (SELECT id FROM "+q+" ORDER BY random() LIMIT 2)")
		}
		if err != nil && ctx.Err() == nil {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// TestSnapshotKeylessRewriteDuringCopy: CLUSTER rewrites a keyless table
// in reverse order in the middle of its ctid-chunked copy, moving rows
// from blocks not yet copied into blocks already copied. The reader must
// notice the new file and copy the table again; ClickHouse must then
// equal the shard (without that, the moved rows would be lost: they never
// change, so nothing streams them; checked by disabling the check).
func TestSnapshotKeylessRewriteDuringCopy(t *testing.T) {
	const shard, rows, chunk, rate = 3, 30000, 500, 6000
	p := setupPipeline(t, []int{shard}, nil, true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nokey, q, tablesJSON, cfg := keylessTable(ctx, t, p, shard)
	p.tables = cfg
	p.exec(ctx, shard, fmt.Sprintf("INSERT INTO %s (workspace_id, title) SELECT g %% 7, 'k' || g FROM generate_series(1, %d) g", q, rows))
	p.exec(ctx, shard, "ANALYZE "+q)
	// Not a replica identity: the table stays keyless for the reader.
	p.exec(ctx, shard, fmt.Sprintf("CREATE INDEX %s ON %s (id DESC)", pgx.Identifier{nokey + "_desc"}.Sanitize(), q))

	loaderCtx, stopLoader := context.WithCancel(context.Background())
	t.Cleanup(stopLoader)
	p.startLoader(loaderCtx, "l1")
	slot := fmt.Sprintf("e2e_%s_%d", p.suffix, shard)
	stateTopic := "e2e_" + p.suffix + ".state"
	rd, logFile := readerProcess(t, p, shard, tablesJSON,
		"--snapshot-workers", "2", "--snapshot-chunk-rows", strconv.Itoa(chunk),
		"--snapshot-max-rows-per-second", strconv.Itoa(rate), "--snapshot-progress-interval", "1s")
	defer stopReaderProcess(t, rd, logFile)

	p.waitCopying(ctx, stateTopic, slot, 4*chunk, "the rewrite", nil)
	p.exec(ctx, shard, fmt.Sprintf("DELETE FROM %s WHERE id %% 5 = 0", q))
	p.exec(ctx, shard, fmt.Sprintf("CLUSTER %s USING %s", q, pgx.Identifier{nokey + "_desc"}.Sanitize()))
	t.Log("CLUSTER in reverse order during the copy")
	p.exec(ctx, shard, fmt.Sprintf("UPDATE %s SET title = 'after' WHERE workspace_id = 3", q))

	p.waitSnapshotDone(ctx, stateTopic, slot)
	p.waitTitlesEqual(ctx, shard, nokey)
	logs, _ := os.ReadFile(logFile)
	if !strings.Contains(string(logs), "table rewritten during its copy") {
		t.Error("the reader did not notice the rewrite")
	}
	if err := p.failed(); err != nil {
		t.Fatal(err)
	}
}

// keylessTable creates, on shard, a table with no key (REPLICA IDENTITY
// FULL) dropped at cleanup, and returns its name, quoted name, and the
// table config (JSON and parsed) naming the pipeline's table and it.
func keylessTable(ctx context.Context, t *testing.T, p *pipeline, shard int) (nokey, q, tablesJSON string, cfg *tables.Config) {
	t.Helper()
	nokey = "nokey_" + p.suffix
	q = pgx.Identifier{nokey}.Sanitize()
	p.exec(ctx, shard, fmt.Sprintf(`CREATE TABLE %s (id bigint NOT NULL DEFAULT tributary.next_id(), workspace_id bigint NOT NULL, title text)`, q))
	p.exec(ctx, shard, fmt.Sprintf("ALTER TABLE %s REPLICA IDENTITY FULL", q))
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		if conn, err := pgx.Connect(cctx, p.stack.ShardDSNs[shard]); err == nil {
			conn.Exec(cctx, "DROP TABLE IF EXISTS "+q) //nolint:errcheck
			conn.Close(cctx)
		}
	})
	tablesJSON = fmt.Sprintf(`{"topic_prefix":"e2e_%s.","tables":[
		{"name":%q,"id_column":"id","id_layout":"seed000","shard_key":"workspace_id"},
		{"name":%q,"id_column":"id","id_layout":"seed000"}]}`, p.suffix, p.table(), nokey)
	cfg, err := tables.Parse([]byte(tablesJSON))
	if err != nil {
		t.Fatal(err)
	}
	return nokey, q, tablesJSON, cfg
}
