package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestSlotLostResnapshotIsExact: the slot is lost while the reader is down
// and changes made meanwhile never reach Kafka — an update, a delete, an
// insert. The reader copies the tables again in a new epoch: the copy's
// rows beat the stale ones already in ClickHouse, and its snapshot-end
// records delete the row the copy no longer contains. ClickHouse must then
// equal the shard exactly, and keep doing so as streaming resumes.
func TestSlotLostResnapshotIsExact(t *testing.T) {
	p, ctx, runCtx := oneShardPipeline(t, 2*time.Minute)
	tbl := p.table()
	p.startLoader(runCtx, "l1")
	r1Ctx, stopR1 := context.WithCancel(runCtx)
	p.startReader(r1Ctx, 0)

	var ids []int64
	for i := 0; i < 20; i++ {
		ids = append(ids, p.insert(ctx, 0, int64(i%3+1), fmt.Sprintf("doc %d", i), "b"))
	}
	// Streamed changes with real versions, so stale rows carry versions a
	// plain version-0 copy would lose to.
	p.exec(ctx, 0, fmt.Sprintf("UPDATE %s SET title = title || ' v2' WHERE id = ANY($1)", pgx.Identifier{tbl}.Sanitize()), ids[:10])
	p.waitFor(ctx, 30*time.Second, "first copy and stream applied", func() bool { return p.compare(ctx, tbl) == "" })

	// The reader stops; its slot is dropped (as an operator, or
	// max_slot_wal_keep_size, would): what happens next is lost to it.
	stopR1()
	slot := p.waitSlotInactive(ctx, 0)
	p.exec(ctx, 0, "SELECT pg_drop_replication_slot($1)", slot)
	p.exec(ctx, 0, fmt.Sprintf("UPDATE %s SET title = 'changed in the gap' WHERE id = ANY($1)", pgx.Identifier{tbl}.Sanitize()), ids[:5])
	p.exec(ctx, 0, fmt.Sprintf("DELETE FROM %s WHERE id = ANY($1)", pgx.Identifier{tbl}.Sanitize()), ids[15:])
	p.insert(ctx, 0, 9, "inserted in the gap", "b")
	if d := p.compare(ctx, tbl); d == "" {
		t.Fatal("ClickHouse already equals the shard: the gap's changes were not hidden from it")
	}

	p.startReader(runCtx, 0) // same slot name and state: a new copy, epoch 1
	p.waitFor(ctx, 60*time.Second, "ClickHouse equal to the shard after the second copy", func() bool {
		return p.compare(ctx, tbl) == ""
	})
	// Streaming goes on in the new epoch.
	p.exec(ctx, 0, fmt.Sprintf("UPDATE %s SET title = 'after the new copy' WHERE id = $1", pgx.Identifier{tbl}.Sanitize()), ids[0])
	p.exec(ctx, 0, fmt.Sprintf("DELETE FROM %s WHERE id = $1", pgx.Identifier{tbl}.Sanitize()), ids[1])
	p.waitFor(ctx, 30*time.Second, "streamed changes after the new copy", func() bool { return p.compare(ctx, tbl) == "" })
	if err := p.failed(); err != nil {
		t.Fatal(err)
	}
}

// waitSlotInactive waits until the reader of shard has let go of its slot
// (it stopped: its final position is reported and its state saved), and
// returns the slot's name.
func (p *pipeline) waitSlotInactive(ctx context.Context, shard int) string {
	p.t.Helper()
	slot := fmt.Sprintf("e2e_%s_%d", p.suffix, shard)
	p.waitFor(ctx, 20*time.Second, "slot inactive", func() bool {
		conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[shard])
		if err != nil {
			return false
		}
		defer conn.Close(ctx)
		var active bool
		err = conn.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&active)
		return err == nil && !active
	})
	return slot
}
