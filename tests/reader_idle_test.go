package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/tables"
)

// TestReaderIdleTableWALBounded: a configured table that takes no writes
// while another is busy is still reported complete up to the newest
// position (its topic's watermarks pass it), and when every configured
// table is quiet while the database is busy with a table the reader does
// not publish, the slot still advances (keepalives and heartbeats), so it
// retains no more WAL than PostgreSQL's own lag in moving restart_lsn.
func TestReaderIdleTableWALBounded(t *testing.T) {
	const shard = 2
	p := setupPipeline(t, []int{shard}, nil, true)
	busy := p.table()
	quiet, noise := "quiet_"+p.suffix, "noise_"+p.suffix
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p.exec(ctx, shard, fmt.Sprintf("CREATE TABLE %s (id bigint PRIMARY KEY DEFAULT tributary.next_id(), title text)", pgx.Identifier{quiet}.Sanitize()))
	p.exec(ctx, shard, fmt.Sprintf("CREATE TABLE %s (id bigserial PRIMARY KEY, pad text)", pgx.Identifier{noise}.Sanitize()))
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		if conn, err := pgx.Connect(cctx, p.stack.ShardDSNs[shard]); err == nil {
			conn.Exec(cctx, "DROP TABLE IF EXISTS "+pgx.Identifier{quiet}.Sanitize()+", "+pgx.Identifier{noise}.Sanitize()) //nolint:errcheck
			conn.Close(cctx)
		}
	})
	tablesJSON := fmt.Sprintf(`{"topic_prefix":"e2e_%s.","tables":[
		{"name":%q,"id_column":"id","id_layout":"seed000"},
		{"name":%q,"id_column":"id","id_layout":"seed000"}]}`, p.suffix, busy, quiet)
	slot := fmt.Sprintf("e2e_%s_%d", p.suffix, shard)
	rd, logFile := readerProcess(t, p, shard, tablesJSON)
	defer stopReaderProcess(t, rd, logFile)
	waitLog(ctx, t, logFile, `msg=streaming`)
	cfg, err := tables.Parse([]byte(tablesJSON))
	if err != nil {
		t.Fatal(err)
	}
	p.tables = cfg // the cleanup deletes both topics
	quietTopic := cfg.Tables[1].Topic

	// Phase 1: the busy table takes writes, the quiet one none.
	wctx, stopWrites := context.WithTimeout(ctx, 3*time.Second)
	err = churn(wctx, p.stack.ShardDSNs[shard], busy, shard)
	stopWrites()
	if err != nil {
		t.Fatalf("writes: %v", err)
	}
	end1 := p.walInsertLSN(ctx, shard)
	mark := waitWatermark(ctx, t, p.brokers, quietTopic, end1)
	t.Logf("busy phase ended at %s; the idle table's watermark reached %s", end1, mark)

	// Phase 2: ~48 MB of WAL in a table the reader does not publish.
	start2 := p.walInsertLSN(ctx, shard)
	for i := 0; i < 6; i++ {
		p.exec(ctx, shard, fmt.Sprintf("INSERT INTO %s (pad) SELECT repeat('x', 900) FROM generate_series(1, 8000)", pgx.Identifier{noise}.Sanitize()))
	}
	end2 := p.walInsertLSN(ctx, shard)
	t.Logf("unpublished writes: %.1f MB of WAL (%s..%s)", float64(end2-start2)/1e6, start2, end2)
	for {
		var confirmed, restart string
		p.queryRow(ctx, shard, "SELECT confirmed_flush_lsn::text, restart_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
			[]any{slot}, &confirmed, &restart)
		c, _ := envelope.ParseLSN(confirmed)
		r, _ := envelope.ParseLSN(restart)
		if c >= end2 && r >= end2 {
			t.Logf("slot confirmed %s, restart_lsn %s: past the unpublished writes", c, r)
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the slot stays at confirmed %s, restart_lsn %s, below %s: it retains the unpublished WAL (%.1f MB)",
				c, r, end2, float64(end2-min(c, r))/1e6)
		}
		// A little more unpublished WAL: PostgreSQL logs the running
		// transactions that move restart_lsn only after WAL was written
		// (every 15 s at most, LOG_SNAPSHOT_INTERVAL_MS).
		p.exec(ctx, shard, "INSERT INTO "+pgx.Identifier{noise}.Sanitize()+" (pad) VALUES ('tick')")
		time.Sleep(500 * time.Millisecond)
	}
}

// walInsertLSN is the shard's current WAL insert position.
func (p *pipeline) walInsertLSN(ctx context.Context, shard int) envelope.LSN {
	p.t.Helper()
	var s string
	p.queryRow(ctx, shard, "SELECT pg_current_wal_insert_lsn()::text", nil, &s)
	lsn, err := envelope.ParseLSN(s)
	if err != nil {
		p.t.Fatal(err)
	}
	return lsn
}

// waitWatermark reads topic until a watermark at or past lsn arrives and
// returns it.
func waitWatermark(ctx context.Context, t *testing.T, brokers []string, topic string, lsn envelope.LSN) envelope.LSN {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var best envelope.LSN
	for best < lsn {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("no watermark at or past %s in %s (newest %s)", lsn, topic, best)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if ev, err := envelope.Decode(r.Value); err == nil && ev.Kind == envelope.KindWatermark && ev.CommitLSN > best {
				best = ev.CommitLSN
			}
		})
	}
	return best
}
