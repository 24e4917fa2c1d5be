package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/reader"
)

// stateKeyOf says whether key is a reader-state key of slot: the shard's
// identity (system/database/slot) or, in the old format, the slot name.
func stateKeyOf(key, slot string) bool {
	return key == slot || strings.HasSuffix(key, "/"+slot)
}

// stateRecords reads the newest value of every key of the state topic
// (nil: deleted).
func (p *pipeline) stateRecords(ctx context.Context, topic string) map[string][]byte {
	p.t.Helper()
	cl := p.kafka(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		p.t.Fatal(err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	out := map[string][]byte{}
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			p.t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			out[string(r.Key)] = r.Value
			if end, ok := want[r.Partition]; ok && r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
	return out
}

func (p *pipeline) produceState(ctx context.Context, topic, key string, value []byte) {
	p.t.Helper()
	cl := p.kafka()
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(key), Value: value}).FirstErr(); err != nil {
		p.t.Fatal(err)
	}
}

// TestReaderStateKeyedByIdentity: the reader keys its state by the shard's
// identity (PostgreSQL system identifier, database, slot). A state stored
// in the old format (keyed by slot name alone, no identity) is read and
// migrated: the reader resumes from it without copying again, stores it
// under its identity and deletes the old key. State of the same slot and
// shard from another cluster makes it refuse with ErrForeignState.
func TestReaderStateKeyedByIdentity(t *testing.T) {
	p, ctx, runCtx := oneShardPipeline(t, 4*time.Minute)
	tbl := p.table()
	cfg := p.readerConfig(0)
	p.startLoader(runCtx, "l1")
	r1Ctx, stopR1 := context.WithCancel(runCtx)
	p.startReader(r1Ctx, 0)
	for i := 0; i < 10; i++ {
		p.insert(ctx, 0, 1, fmt.Sprintf("doc %d", i), "b")
	}
	p.waitFor(ctx, 30*time.Second, "first copy and stream applied", func() bool { return p.compare(ctx, tbl) == "" })
	stopR1()
	slot := p.waitSlotInactive(ctx, 0)

	var sysid string
	conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[0])
	if err != nil {
		t.Fatal(err)
	}
	err = conn.QueryRow(ctx, "SELECT system_identifier::text FROM pg_control_system()").Scan(&sysid)
	conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	own := sysid + "/app/" + slot
	recs := p.stateRecords(ctx, cfg.StateTopic)
	if _, ok := recs[slot]; ok {
		t.Errorf("state stored under the slot name %q alone (keys: %v)", slot, keys(recs))
	}
	v, ok := recs[own]
	if !ok || v == nil {
		t.Fatalf("no state under the shard's identity %q (keys: %v)", own, keys(recs))
	}
	var st map[string]any
	if err := json.Unmarshal(v, &st); err != nil {
		t.Fatal(err)
	}
	if st["system_id"] != sysid || st["database"] != "app" || st["snapshot_done"] != true {
		t.Fatalf("state under %s: %v, want system_id %s, database app, snapshot done", own, st, sysid)
	}

	// The old format: the same state keyed by slot name, without identity.
	delete(st, "system_id")
	delete(st, "database")
	old, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	p.produceState(ctx, cfg.StateTopic, own, nil)
	p.produceState(ctx, cfg.StateTopic, slot, old)
	p.insert(ctx, 0, 2, "while stopped", "b")
	r2Ctx, stopR2 := context.WithCancel(runCtx)
	p.startReader(r2Ctx, 0)
	p.waitFor(ctx, 60*time.Second, "changes after the migration applied", func() bool { return p.compare(ctx, tbl) == "" })
	if n := p.chCount(ctx, "SELECT count() FROM %[1]s.%[2]s WHERE _version >= 281474976710656"); n != 0 {
		t.Errorf("%d rows of a new snapshot epoch: the old-format state was not read, the shard was copied again", n)
	}
	stopR2()
	p.waitSlotInactive(ctx, 0)
	recs = p.stateRecords(ctx, cfg.StateTopic)
	if v, ok := recs[slot]; !ok || v != nil {
		t.Errorf("the old key %q is %q after the migration, want deleted (a tombstone)", slot, v)
	}
	if v := recs[own]; v == nil || !strings.Contains(string(v), `"system_id":"`+sysid+`"`) {
		t.Errorf("after the migration the state under %s is %q", own, v)
	}

	// Another cluster's state of this slot and shard, none of our own.
	other := strings.Replace(string(recs[own]), sysid, "7000000000000000001", 1)
	p.produceState(ctx, cfg.StateTopic, own, nil)
	p.produceState(ctx, cfg.StateTopic, "7000000000000000001/app/"+slot, []byte(other))
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = reader.New(cfg, p.log, prometheus.NewRegistry()).Run(rctx)
	if !errors.Is(err, reader.ErrForeignState) {
		t.Fatalf("reader with only another cluster's state for its slot: %v, want ErrForeignState", err)
	}
	if !regexp.MustCompile(`7000000000000000001.*--state-topic`).MatchString(err.Error()) {
		t.Errorf("refusal %q names neither the other system nor the way out", err)
	}
	if err := p.failed(); err != nil {
		t.Fatal(err)
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
