package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/reader"
	"github.com/tributary/tributary/internal/tables"
)

// storedState is the part of the reader's state record (internal/reader
// state.go) the snapshot tests look at.
type storedState struct {
	SnapshotDone    bool         `json:"snapshot_done"`
	ConsistentPoint envelope.LSN `json:"consistent_point"`
	SnapshotEnd     envelope.LSN `json:"snapshot_end"`
	Snapshot        *struct {
		Tables []struct {
			Ranges []struct {
				Rows int64 `json:"rows"`
				Done bool  `json:"done"`
			} `json:"ranges"`
		} `json:"tables"`
	} `json:"snapshot"`
}

func (s storedState) rows() (rows int64, ranges, done int) {
	if s.Snapshot == nil {
		return 0, 0, 0
	}
	for _, t := range s.Snapshot.Tables {
		for _, r := range t.Ranges {
			rows += r.Rows
			ranges++
			if r.Done {
				done++
			}
		}
	}
	return rows, ranges, done
}

// readState returns the newest state stored for slot in topic (nil if none).
func readState(ctx context.Context, brokers []string, topic, slot string) (*storedState, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	var st *storedState
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			if stateKeyOf(string(r.Key), slot) && r.Value != nil {
				var v storedState
				if json.Unmarshal(r.Value, &v) == nil {
					st = &v
				}
			}
			if end, ok := want[r.Partition]; ok && r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
	return st, nil
}

// TestSnapshotResumesAfterKill: the initial snapshot of a table large
// enough for many chunks is SIGKILLed midway while the table takes
// inserts, updates (TOASTed bodies too) and deletes. The restarted reader
// must continue the copy (same slot, same consistent point, fewer rows
// copied than the table holds) and ClickHouse must then equal the shard
// exactly.
func TestSnapshotResumesAfterKill(t *testing.T) {
	const rows, chunk, rate = 60000, 500, 15000
	bin := binaries(t)
	p := setupPipeline(t, []int{0}, nil, true)
	tbl := p.table()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p.exec(ctx, 0, fmt.Sprintf("INSERT INTO %s (workspace_id, title, body) SELECT g %% 10, 't' || g, 'b' || g FROM generate_series(1, %d) g",
		pgx.Identifier{tbl}.Sanitize(), rows))
	p.exec(ctx, 0, "ANALYZE "+pgx.Identifier{tbl}.Sanitize()) // estimate and key ranges

	loaderCtx, stopLoader := context.WithCancel(context.Background())
	t.Cleanup(stopLoader) // before the pipeline's cleanup waits for the loader
	p.startLoader(loaderCtx, "l1")

	dir := t.TempDir()
	tablesFile := filepath.Join(dir, "tables.json")
	if err := os.WriteFile(tablesFile, []byte(fmt.Sprintf(
		`{"topic_prefix":"e2e_%s.","tables":[{"name":%q,"id_column":"id","id_layout":"seed000"}]}`, p.suffix, tbl)), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "reader.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	slot := fmt.Sprintf("e2e_%s_0", p.suffix)
	stateTopic := "e2e_" + p.suffix + ".state"
	rd := &supervised{name: "reader-0", log: logf, done: make(chan struct{}),
		args: []string{bin + "/cdc-reader", "--shard", "0", "--tables", tablesFile, "--kafka-brokers", strings.Join(p.brokers, ","),
			"--slot", slot, "--publication", "e2e_" + p.suffix, "--state-topic", stateTopic, "--metrics-addr", "",
			"--status-interval", "200ms", "--watermark-interval", "200ms", "--heartbeat-interval", "1s",
			"--snapshot-workers", "2", "--snapshot-chunk-rows", strconv.Itoa(chunk),
			"--snapshot-max-rows-per-second", strconv.Itoa(rate), "--snapshot-progress-interval", "1s", "--log-level", "info"},
		env: []string{"TRIBUTARY_PG_DSN=" + p.stack.ShardDSNs[0]}}
	go rd.run()
	defer func() {
		rd.stop()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("reader log:\n%s", b)
		}
	}()

	// Writes during the whole snapshot, across the kill.
	wctx, stopWrites := context.WithCancel(ctx)
	defer stopWrites()
	churned := make(chan error, 1)
	go func() { churned <- churn(wctx, p.stack.ShardDSNs[0], tbl, 0) }()

	// Kill once some chunks are recorded, well before the end.
	before := p.waitCopying(ctx, stateTopic, slot, 5*chunk, "the test could kill it", nil)
	rd.kill()
	doneRows, ranges, doneRanges := before.rows()
	t.Logf("SIGKILLed the reader with %d rows recorded, %d of %d ranges done, consistent point %s", doneRows, doneRanges, ranges, before.ConsistentPoint)

	// The restarted reader finishes the snapshot and streams.
	after := p.waitSnapshotDone(ctx, stateTopic, slot)
	time.Sleep(time.Second) // writes after the snapshot, too
	stopWrites()
	if err := <-churned; err != nil {
		t.Fatalf("writes: %v", err)
	}

	deadline := time.Now().Add(time.Minute)
	var diff string
	for time.Now().Before(deadline) {
		if diff = p.compare(ctx, tbl); diff == "" {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if diff != "" {
		t.Fatalf("ClickHouse differs from the shard:\n%s", diff)
	}

	// It resumed: same consistent point (the slot was not dropped and
	// recreated), a log line saying so, and the resumed run copied fewer rows
	// than the table holds.
	if after.ConsistentPoint != before.ConsistentPoint {
		t.Errorf("consistent point %s after the restart, %s before: the slot was recreated", after.ConsistentPoint, before.ConsistentPoint)
	}
	if after.SnapshotEnd < after.ConsistentPoint {
		t.Errorf("snapshot end %s before the consistent point %s", after.SnapshotEnd, after.ConsistentPoint)
	}
	logs, _ := os.ReadFile(logf.Name())
	if !strings.Contains(string(logs), "start: resume snapshot") {
		t.Error(`the restarted reader did not log "start: resume snapshot"`)
	}
	if strings.Contains(string(logs), "dropping the slot") {
		t.Error("the restarted reader dropped the slot")
	}
	thisRun, total := checkResumedRun(t, logs, doneRows)
	t.Logf("resumed run copied %d rows of %d; %d recorded before the kill", thisRun, total, doneRows)

	// No watermark below the copy's end: until the stream passed it, copied
	// rows may be newer than the stream.
	reads, minMark, err := topicSummary(ctx, p.brokers, p.tables.Tables[0].Topic)
	if err != nil {
		t.Fatal(err)
	}
	if minMark == 0 || minMark < after.SnapshotEnd {
		t.Errorf("lowest watermark %s, snapshot end %s: a watermark below the copy's end (or none)", minMark, after.SnapshotEnd)
	}
	t.Logf("%d snapshot records in Kafka for %d rows copied (re-copied after the kill: %d); lowest watermark %s, snapshot end %s",
		reads, total, reads-total, minMark, after.SnapshotEnd)
}

// topicSummary reads a table topic to its end and returns the number of
// snapshot reads and the lowest watermark position (0: none).
func topicSummary(ctx context.Context, brokers []string, topic string) (reads int64, minMark envelope.LSN, err error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return 0, 0, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, 0, err
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return 0, 0, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			if ev, err := envelope.Decode(r.Value); err == nil {
				switch {
				case ev.Kind == envelope.KindWatermark && (minMark == 0 || ev.CommitLSN < minMark):
					minMark = ev.CommitLSN
				case ev.Op == envelope.OpRead:
					reads++
				}
			}
			if end, ok := want[r.Partition]; ok && r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
	return reads, minMark, nil
}

// rowsOrZero is rows() on a possibly nil state.
func (s *storedState) rowsOrZero() (int64, int, int) {
	if s == nil {
		return 0, 0, 0
	}
	return s.rows()
}

// waitCopying polls the reader state until an unfinished copy has recorded
// at least rows rows and ready() holds, and returns that state; a copy
// that finishes first fails the test ("the snapshot finished before
// <before>").
func (p *pipeline) waitCopying(ctx context.Context, stateTopic, slot string, rows int64, before string, ready func() bool) *storedState {
	p.t.Helper()
	for {
		st, err := readState(ctx, p.brokers, stateTopic, slot)
		if err != nil && ctx.Err() != nil {
			p.t.Fatalf("reading the reader state: %v", err)
		}
		if st != nil && st.SnapshotDone {
			p.t.Fatalf("the snapshot finished before %s (slow the copy: --snapshot-max-rows-per-second)", before)
		}
		if n, _, _ := st.rowsOrZero(); n >= rows && (ready == nil || ready()) {
			return st
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitSnapshotDone polls the reader state until the copy is done.
func (p *pipeline) waitSnapshotDone(ctx context.Context, stateTopic, slot string) *storedState {
	p.t.Helper()
	for {
		if st, _ := readState(ctx, p.brokers, stateTopic, slot); st != nil && st.SnapshotDone {
			return st
		}
		if ctx.Err() != nil {
			p.t.Fatal("the reader did not finish the snapshot")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitTitlesEqual waits up to a minute for (id, title) of every table to be
// equal on the shard and in ClickHouse, and fails the test with the
// difference otherwise.
func (p *pipeline) waitTitlesEqual(ctx context.Context, shard int, tables ...string) {
	p.t.Helper()
	deadline := time.Now().Add(time.Minute)
	var diff string
	for time.Now().Before(deadline) {
		diff = ""
		for _, tbl := range tables {
			if diff = p.compareTitles(ctx, shard, tbl); diff != "" {
				break
			}
		}
		if diff == "" {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	p.t.Fatalf("ClickHouse differs from the shard:\n%s", diff)
}

// TestSnapshotTruncateAndKeylessTable: a TRUNCATE lands in the middle of
// a chunked copy (rows copied before it must go, rows inserted after it
// must stay); a table without a primary key (REPLICA IDENTITY FULL) is
// copied in one chunk next to it; a table with a composite key is paged by
// row comparison while rows move between its ranges; all take writes
// during the copy. All must equal the shard exactly afterwards.
func TestSnapshotTruncateAndKeylessTable(t *testing.T) {
	const shard, rows, keyless, composite = 1, 20000, 3000, 4000
	p := setupPipeline(t, []int{shard}, nil, true)
	docs := p.table()
	nokey := "nokey_" + p.suffix
	comp := "comp_" + p.suffix
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p.exec(ctx, shard, fmt.Sprintf(`CREATE TABLE %s (id bigint NOT NULL DEFAULT tributary.next_id(), workspace_id bigint NOT NULL, title text)`,
		pgx.Identifier{nokey}.Sanitize()))
	p.exec(ctx, shard, fmt.Sprintf("ALTER TABLE %s REPLICA IDENTITY FULL", pgx.Identifier{nokey}.Sanitize()))
	// A composite key whose first column has few values: ranges cut on it,
	// chunks that end inside one workspace (row comparison).
	p.exec(ctx, shard, fmt.Sprintf(`CREATE TABLE %s (workspace_id bigint NOT NULL, id bigint NOT NULL DEFAULT tributary.next_id(),
		title text, PRIMARY KEY (workspace_id, id))`, pgx.Identifier{comp}.Sanitize()))
	// Its rows are identified by id alone (a one-column replica identity
	// index): the reader refuses an id column that is only part of the key.
	p.exec(ctx, shard, fmt.Sprintf(`CREATE UNIQUE INDEX %s ON %s (id)`, pgx.Identifier{comp + "_id"}.Sanitize(), pgx.Identifier{comp}.Sanitize()))
	p.exec(ctx, shard, fmt.Sprintf(`ALTER TABLE %s REPLICA IDENTITY USING INDEX %s`, pgx.Identifier{comp}.Sanitize(), pgx.Identifier{comp + "_id"}.Sanitize()))
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		if conn, err := pgx.Connect(cctx, p.stack.ShardDSNs[shard]); err == nil {
			conn.Exec(cctx, "DROP TABLE IF EXISTS "+pgx.Identifier{nokey}.Sanitize()+", "+pgx.Identifier{comp}.Sanitize()) //nolint:errcheck
			conn.Close(cctx)
		}
	})
	cfg, err := tables.Parse([]byte(fmt.Sprintf(`{"topic_prefix":"e2e_%s.","tables":[
		{"name":%q,"id_column":"id","id_layout":"seed000","shard_key":"workspace_id"},
		{"name":%q,"id_column":"id","id_layout":"seed000"},
		{"name":%q,"id_column":"id","id_layout":"seed000"}]}`, p.suffix, docs, nokey, comp)))
	if err != nil {
		t.Fatal(err)
	}
	p.tables = cfg // the loader, and the cleanup's topic list, see both tables
	p.exec(ctx, shard, fmt.Sprintf("INSERT INTO %s (workspace_id, title, body) SELECT g %% 10, 't' || g, 'b' FROM generate_series(1, %d) g",
		pgx.Identifier{docs}.Sanitize(), rows))
	p.exec(ctx, shard, fmt.Sprintf("INSERT INTO %s (workspace_id, title) SELECT g %% 7, 'k' || g FROM generate_series(1, %d) g",
		pgx.Identifier{nokey}.Sanitize(), keyless))
	p.exec(ctx, shard, fmt.Sprintf("INSERT INTO %s (workspace_id, title) SELECT g %% 5, 'c' || g FROM generate_series(1, %d) g",
		pgx.Identifier{comp}.Sanitize(), composite))
	p.exec(ctx, shard, "ANALYZE "+pgx.Identifier{docs}.Sanitize()+", "+pgx.Identifier{comp}.Sanitize())

	runCtx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop) // before the pipeline's cleanup waits for the components
	p.startLoader(runCtx, "l1")
	slot := fmt.Sprintf("e2e_%s_%d", p.suffix, shard)
	stateTopic := "e2e_" + p.suffix + ".state"
	r := reader.New(reader.Config{
		Shard: shard, DSN: p.stack.ShardDSNs[shard], Slot: slot, Publication: "e2e_" + p.suffix, Tables: cfg,
		Brokers: p.brokers, Partitions: 4, StatusInterval: 200 * time.Millisecond, WatermarkInterval: 100 * time.Millisecond,
		HeartbeatInterval: time.Second, MaxBuffered: 10000, StateTopic: stateTopic,
		SnapshotWorkers: 2, SnapshotChunkRows: 500, SnapshotMaxRowsPerSecond: 8000,
	}, p.log, prometheus.NewRegistry())
	p.goRun("reader", func() error { return r.Run(runCtx) })

	p.waitCopying(ctx, stateTopic, slot, 3000, "the truncate", nil)
	// Mid-copy: truncate the chunked table and refill part of it; change
	// the keyless one.
	p.exec(ctx, shard, "TRUNCATE "+pgx.Identifier{docs}.Sanitize())
	p.exec(ctx, shard, fmt.Sprintf("INSERT INTO %s (workspace_id, title, body) SELECT g %% 10, 'after' || g, 'b' FROM generate_series(1, 2000) g",
		pgx.Identifier{docs}.Sanitize()))
	p.exec(ctx, shard, fmt.Sprintf("UPDATE %s SET title = 'changed' WHERE workspace_id = 3", pgx.Identifier{nokey}.Sanitize()))
	p.exec(ctx, shard, fmt.Sprintf("DELETE FROM %s WHERE workspace_id = 4", pgx.Identifier{nokey}.Sanitize()))
	// Key changes across ranges, both directions, and deletes.
	p.exec(ctx, shard, fmt.Sprintf("UPDATE %s SET workspace_id = 4 - workspace_id, title = 'moved' WHERE id %% 7 = 0", pgx.Identifier{comp}.Sanitize()))
	p.exec(ctx, shard, fmt.Sprintf("DELETE FROM %s WHERE id %% 11 = 0", pgx.Identifier{comp}.Sanitize()))
	wctx, stopWrites := context.WithTimeout(ctx, 3*time.Second)
	defer stopWrites()
	if err := churn(wctx, p.stack.ShardDSNs[shard], docs, shard); err != nil {
		t.Fatalf("writes: %v", err)
	}
	st, _ := readState(ctx, p.brokers, stateTopic, slot)
	t.Logf("writes stopped; snapshot done: %v", st != nil && st.SnapshotDone)

	deadline := time.Now().Add(time.Minute)
	var diff string
	for time.Now().Before(deadline) {
		if diff = p.compare(ctx, docs); diff == "" {
			if diff = p.compareTitles(ctx, shard, nokey); diff == "" {
				if diff = p.compareTitles(ctx, shard, comp); diff == "" {
					break
				}
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	if diff != "" {
		t.Fatalf("ClickHouse differs from the shard:\n%s", diff)
	}
	if err := p.failed(); err != nil {
		t.Fatal(err)
	}
}

// compareTitles compares (id, title) of a table between one shard and
// ClickHouse.
func (p *pipeline) compareTitles(ctx context.Context, shard int, tbl string) string {
	want, err := p.shardPairs(ctx, shard, "SELECT id::text, coalesce(title, '') FROM "+pgx.Identifier{tbl}.Sanitize())
	if err != nil {
		return err.Error()
	}
	crows, err := p.store.Conn().Query(ctx, fmt.Sprintf(
		"SELECT toString(id), ifNull(title, '') FROM `%s`.`%s` FINAL WHERE _deleted = 0 AND _shard = %d", p.chDB, tbl, shard))
	if err != nil {
		return err.Error()
	}
	defer crows.Close()
	got := map[string]string{}
	for crows.Next() {
		var id, title string
		if err := crows.Scan(&id, &title); err != nil {
			return err.Error()
		}
		got[id] = title
	}
	var diffs []string
	for id, w := range want {
		if g, ok := got[id]; !ok || g != w {
			diffs = append(diffs, fmt.Sprintf("%s: source %q, ClickHouse %q (present %v)", id, w, g, ok))
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			diffs = append(diffs, "extra in ClickHouse: "+id)
		}
	}
	if len(diffs) == 0 {
		return ""
	}
	if len(diffs) > 10 {
		diffs = append(diffs[:10], fmt.Sprintf("... and %d more", len(diffs)-10))
	}
	return fmt.Sprintf("%s: %d source rows, %d ClickHouse rows\n%s", tbl, len(want), len(got), strings.Join(diffs, "\n"))
}
