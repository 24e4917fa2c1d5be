package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/envelope"
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
			if string(r.Key) == slot && r.Value != nil {
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
	var before *storedState
	for {
		st, err := readState(ctx, p.brokers, stateTopic, slot)
		if err != nil && ctx.Err() != nil {
			t.Fatalf("reading the reader state: %v", err)
		}
		if st != nil && st.SnapshotDone {
			t.Fatal("the snapshot finished before the test could kill it (slow the copy: --snapshot-max-rows-per-second)")
		}
		if n, _, _ := st.rowsOrZero(); n >= 5*chunk {
			before = st
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	rd.kill()
	doneRows, ranges, doneRanges := before.rows()
	t.Logf("SIGKILLed the reader with %d rows recorded, %d of %d ranges done, consistent point %s", doneRows, doneRanges, ranges, before.ConsistentPoint)

	// The restarted reader finishes the snapshot and streams.
	var after *storedState
	for after == nil || !after.SnapshotDone {
		if ctx.Err() != nil {
			t.Fatal("the restarted reader did not finish the snapshot")
		}
		time.Sleep(200 * time.Millisecond)
		after, _ = readState(ctx, p.brokers, stateTopic, slot)
	}
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
	m := regexp.MustCompile(`msg="snapshot complete" shard=\d+ rows=(\d+) rows_this_run=(\d+)`).FindStringSubmatch(string(logs))
	if m == nil {
		t.Fatal(`no "snapshot complete" log line`)
	}
	total, _ := strconv.ParseInt(m[1], 10, 64)
	thisRun, _ := strconv.ParseInt(m[2], 10, 64)
	if thisRun >= total || thisRun > total-doneRows {
		t.Errorf("the resumed run copied %d of %d rows, with %d recorded before the kill: it started over", thisRun, total, doneRows)
	}
	t.Logf("resumed run copied %d rows of %d; %d recorded before the kill", thisRun, total, doneRows)
}

// rowsOrZero is rows() on a possibly nil state.
func (s *storedState) rowsOrZero() (int64, int, int) {
	if s == nil {
		return 0, 0, 0
	}
	return s.rows()
}
