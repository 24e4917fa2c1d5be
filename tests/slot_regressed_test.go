package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/envelope"
)

// TestSlotBehindStateAfterCrashResumes: PostgreSQL persists a slot's
// confirmed position only at checkpoints, so after a crash the slot can be
// behind the position the reader stored. On the same timeline that is not a
// recreated slot: the reader resumes from it (changes in between come
// again; the loader drops them) instead of copying the shard again. The
// crash is simulated by storing a position ahead of the slot.
func TestSlotBehindStateAfterCrashResumes(t *testing.T) {
	p, ctx, runCtx := oneShardPipeline(t, 2*time.Minute)
	tbl := p.table()
	p.startLoader(runCtx, "l1")
	r1Ctx, stopR1 := context.WithCancel(runCtx)
	p.startReader(r1Ctx, 0)
	for i := 0; i < 10; i++ {
		p.insert(ctx, 0, 1, fmt.Sprintf("doc %d", i), "b")
	}
	p.waitFor(ctx, 30*time.Second, "first copy and stream applied", func() bool { return p.compare(ctx, tbl) == "" })
	stopR1()
	slot := p.waitSlotInactive(ctx, 0) // stopped: its final state is saved

	// The stored state, pushed ahead of the slot by 16 MB of WAL: what a
	// crash that lost the slot's newest position leaves.
	stateTopic := "e2e_" + p.suffix + ".state"
	cl := p.kafka(kgo.ConsumeTopics(stateTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer cl.Close()
	var last map[string]any
	var key []byte
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		fctx, fcancel := context.WithTimeout(ctx, 2*time.Second)
		fs := cl.PollFetches(fctx)
		fcancel()
		fs.EachRecord(func(r *kgo.Record) {
			if stateKeyOf(string(r.Key), slot) {
				last, key = nil, r.Key
				if err := json.Unmarshal(r.Value, &last); err != nil {
					t.Fatal(err)
				}
			}
		})
		if last != nil && fs.NumRecords() == 0 {
			break
		}
	}
	if last == nil || last["timeline"] == nil {
		t.Fatalf("no reader state with a timeline for %s: %v", slot, last)
	}
	var confirmed envelope.LSN
	b, _ := json.Marshal(last["confirmed"])
	if err := json.Unmarshal(b, &confirmed); err != nil {
		t.Fatal(err)
	}
	last["confirmed"] = confirmed + 16<<20
	v, err := json.Marshal(last)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: stateTopic, Key: key, Value: v}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	// More changes while the reader is down, then the reader again.
	p.exec(ctx, 0, fmt.Sprintf("UPDATE %s SET title = title || ' later'", pgx.Identifier{tbl}.Sanitize()))
	p.insert(ctx, 0, 2, "after the crash", "b")
	p.startReader(runCtx, 0)
	p.waitFor(ctx, 60*time.Second, "changes after the crash applied", func() bool { return p.compare(ctx, tbl) == "" })

	// Resumed, not copied again: no row of a new epoch.
	if n := p.chCount(ctx, "SELECT count() FROM %[1]s.%[2]s WHERE _version >= 281474976710656"); n != 0 {
		t.Errorf("%d rows of a new snapshot epoch: the reader copied the shard again instead of resuming", n)
	}
	if err := p.failed(); err != nil {
		t.Fatal(err)
	}
}
