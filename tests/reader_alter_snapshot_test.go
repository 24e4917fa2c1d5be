package tests

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestSnapshotAlterTableDuringCopy: ADD COLUMN and DROP COLUMN land in
// the middle of the initial copy while the table takes writes. The copy's
// "SELECT *" then returns another number of columns than the reader
// planned for, and the reader stops loudly ("values for columns"); its
// supervisor restarts it, and the restarted reader resumes the copy with
// the new columns and streams. ClickHouse must then equal the shard: every
// row, its values, and the added column exactly (rows whose last change
// is a copy carry the value the copy read; later changes are streamed).
func TestSnapshotAlterTableDuringCopy(t *testing.T) {
	const shard, rows, chunk, rate = 1, 60000, 500, 8000
	p := setupPipeline(t, []int{shard}, nil, true)
	tbl := p.table()
	q := pgx.Identifier{tbl}.Sanitize()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p.exec(ctx, shard, fmt.Sprintf("INSERT INTO %s (workspace_id, title, body, amount) SELECT g %% 10, 't' || g, 'b' || g, g FROM generate_series(1, %d) g",
		q, rows))
	p.exec(ctx, shard, "ANALYZE "+q)

	loaderCtx, stopLoader := context.WithCancel(context.Background())
	t.Cleanup(stopLoader) // before the pipeline's cleanup waits for the loader
	p.startLoader(loaderCtx, "l1")
	slot := fmt.Sprintf("e2e_%s_%d", p.suffix, shard)
	stateTopic := "e2e_" + p.suffix + ".state"
	rd, logFile := readerProcess(t, p, shard, fmt.Sprintf(
		`{"topic_prefix":"e2e_%s.","tables":[{"name":%q,"id_column":"id","id_layout":"seed000"}]}`, p.suffix, tbl),
		"--snapshot-workers", "2", "--snapshot-chunk-rows", strconv.Itoa(chunk),
		"--snapshot-max-rows-per-second", strconv.Itoa(rate), "--snapshot-progress-interval", "1s")
	defer stopReaderProcess(t, rd, logFile)

	wctx, stopWrites := context.WithCancel(ctx)
	defer stopWrites()
	churned := make(chan error, 1)
	go func() { churned <- churn(wctx, p.stack.ShardDSNs[shard], tbl, shard) }()

	// waitRecorded waits until the reader (started at least starts
	// times) has recorded n rows of the copy, and returns how many.
	waitRecorded := func(n int64, starts int) int64 {
		st := p.waitCopying(ctx, stateTopic, slot, n, "the ALTER", func() bool { return rd.startCount() >= starts })
		done, _, _ := st.rows()
		return done
	}
	at := waitRecorded(5*chunk, 1)
	p.exec(ctx, shard, fmt.Sprintf("ALTER TABLE %s ADD COLUMN extra text", q))
	setExtra(ctx, t, p, shard, q, 20)
	t.Logf("ADD COLUMN during the copy, %d rows recorded", at)
	// The DROP once the restarted reader copies with the added column:
	// 6 chunks past where it resumed, which may be well past at (the
	// stopped reader recorded what it copied until it read the ALTER).
	resumed := waitRecorded(0, 2)
	at = waitRecorded(resumed+6*chunk, 2)
	p.exec(ctx, shard, fmt.Sprintf("ALTER TABLE %s DROP COLUMN amount", q))
	setExtra(ctx, t, p, shard, q, 20)
	t.Logf("DROP COLUMN during the copy, %d rows recorded", at)

	p.waitSnapshotDone(ctx, stateTopic, slot)
	setExtra(ctx, t, p, shard, q, 50) // streamed
	time.Sleep(time.Second)
	stopWrites()
	if err := <-churned; err != nil {
		t.Fatalf("writes: %v", err)
	}

	deadline := time.Now().Add(time.Minute)
	var diff string
	for time.Now().Before(deadline) {
		if diff = p.compare(ctx, tbl); diff == "" {
			if diff = p.compareExtra(ctx, shard, tbl); diff == "" {
				break
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	if diff != "" {
		t.Fatalf("ClickHouse differs from the shard:\n%s", diff)
	}

	// It happened as described: stopped loudly, restarted, resumed.
	logs, _ := os.ReadFile(logFile)
	if !regexp.MustCompile(`values for \d+ columns \(did the table change\?\)`).Match(logs) {
		t.Error("the reader did not stop on the changed column count")
	}
	if n := rd.startCount(); n < 3 {
		t.Errorf("the reader was started %d times: it did not stop at both ALTERs", n)
	}
	if !strings.Contains(string(logs), "start: resume snapshot") {
		t.Error(`the restarted reader did not log "start: resume snapshot"`)
	}
	if strings.Contains(string(logs), "dropping the slot") {
		t.Error("a restarted reader dropped the slot")
	}
	t.Logf("reader started %d times", rd.startCount())
	for _, l := range strings.Split(string(logs), "\n") {
		if strings.Contains(l, "values for") || strings.Contains(l, "msg=\"start:") || strings.Contains(l, "snapshot complete") {
			t.Log(l)
		}
	}
	if err := p.failed(); err != nil {
		t.Fatal(err)
	}
}

// setExtra sets the added column of n random rows (one transaction).
func setExtra(ctx context.Context, t *testing.T, p *pipeline, shard int, q string, n int) {
	t.Helper()
	p.exec(ctx, shard, fmt.Sprintf("UPDATE %s SET extra = 'e%d-' || id WHERE id IN (SELECT id FROM %s ORDER BY random() LIMIT %d)",
		q, rand.IntN(1e6), q, n))
}

// compareExtra compares the added column, NULLs included, between the
// shard and ClickHouse's live rows.
func (p *pipeline) compareExtra(ctx context.Context, shard int, tbl string) string {
	want, err := p.shardPairs(ctx, shard, "SELECT id::text, coalesce('v:' || extra, 'NULL') FROM "+pgx.Identifier{tbl}.Sanitize())
	if err != nil {
		return err.Error()
	}
	crows, err := p.store.Conn().Query(ctx, fmt.Sprintf(
		"SELECT toString(id), extra FROM `%s`.`%s` FINAL WHERE _deleted = 0 AND _shard = %d", p.chDB, tbl, shard))
	if err != nil {
		return err.Error()
	}
	defer crows.Close()
	var diffs []string
	seen := 0
	for crows.Next() {
		var id string
		var v *string
		if err := crows.Scan(&id, &v); err != nil {
			return err.Error()
		}
		seen++
		g := "NULL"
		if v != nil {
			g = "v:" + *v
		}
		if w, ok := want[id]; ok && w != g && len(diffs) < 10 {
			diffs = append(diffs, fmt.Sprintf("extra of %s: source %s, ClickHouse %s", id, w, g))
		}
	}
	if seen != len(want) {
		diffs = append(diffs, fmt.Sprintf("%d live rows in ClickHouse, %d at the source", seen, len(want)))
	}
	return strings.Join(diffs, "\n")
}
