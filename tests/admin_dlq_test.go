package tests

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/tributary/tributary/internal/admin"
	"github.com/tributary/tributary/internal/envelope"
)

// TestAdminDLQReplay: an unchanged-TOAST update of a row with no base
// (streamed after a watermark: a real gap) is dead-lettered with reason
// toast_without_base. Once its cause is fixed (the row's base version
// arrives), tributaryctl's dlq replay re-produces it and the row is the
// update over the base; a second replay changes nothing (the loader keeps
// the newest version) and dead-letters nothing more.
func TestAdminDLQReplay(t *testing.T) {
	p := newMeteredPipeline(t, []int{0}, false)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cols, part, ids := p.craftedIDs(ctx, 3)
	gap, sentinel, sentinel2 := ids[0], ids[1], ids[2]
	p.waitFor(ctx, 30*time.Second, "a stored watermark of shard 0", func() bool {
		return p.chCount(ctx, "SELECT count() FROM %[1]s._watermarks WHERE shard = 0 AND partition = ?", uint32(part)) > 0
	})
	recs := p.produce(ctx,
		p.record(p.keepBody(cols, gap, "FF/0", "edited"), part),
		p.record(p.changeEnv(cols, envelope.OpInsert, sentinel, lsn("FF/100"), docRow(sentinel, "1", "s", "b")), part),
	)
	p.waitDoc(ctx, sentinel, "sentinel", func(s int, _ docAnswer) bool { return s == http.StatusOK })
	p.waitFor(ctx, 30*time.Second, "commit past the sentinel", func() bool { return p.committed(ctx, part) > recs[1].Offset })
	if n := p.dlqRecords(ctx); n != 1 {
		t.Fatalf("the dead-letter topic holds %d records, want 1", n)
	}

	cl, err := admin.NewProducer(p.brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	dead, err := admin.ReadDLQ(ctx, cl, p.dlqTopic(), p.tables, admin.Filter{Reason: "toast_without_base", Table: p.table()})
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].Key != string(recs[0].Key) || dead[0].SourceOffset != recs[0].Offset || dead[0].Problem != "" {
		t.Fatalf("dlq list = %+v, want the update of id %d at offset %d, replayable", dead, gap, recs[0].Offset)
	}
	if other, err := admin.ReadDLQ(ctx, cl, p.dlqTopic(), p.tables, admin.Filter{Reason: "convert"}); err != nil || len(other) != 0 {
		t.Errorf("dlq list --reason convert = %+v, %v; want none", other, err)
	}

	// The cause fixed: the row's base, older than the update, is loaded.
	p.produce(ctx, p.record(p.changeEnv(cols, envelope.OpInsert, gap, lsn("FE/0"), docRow(gap, "1", "base", "the body")), part))
	p.waitDoc(ctx, gap, "the base", func(s int, d docAnswer) bool {
		return s == http.StatusOK && len(d.Copies) == 1 && d.Copies[0].Row["title"] == "base"
	})

	for round := range 2 {
		n, err := admin.Replay(ctx, cl, dead, p.log.With(slog.String("tributaryctl", "replay")))
		if err != nil || n != 1 {
			t.Fatalf("replay %d: %d replayed, %v; want 1", round, n, err)
		}
		p.waitDoc(ctx, gap, "the replayed update", func(s int, d docAnswer) bool {
			return s == http.StatusOK && len(d.Copies) == 1 && d.Copies[0].Row["title"] == "edited" && d.Copies[0].Row["body"] == "the body"
		})
	}
	last := p.produce(ctx, p.record(p.changeEnv(cols, envelope.OpInsert, sentinel2, lsn("FF/200"), docRow(sentinel2, "1", "s", "b")), part))
	p.waitFor(ctx, 30*time.Second, "commit past the second sentinel", func() bool { return p.committed(ctx, part) > last[0].Offset })
	if n := p.dlqRecords(ctx); n != 1 {
		t.Errorf("after two replays the dead-letter topic holds %d records, want still 1", n)
	}
	if s, d := p.getDoc(ctx, gap); s != http.StatusOK || len(d.Copies) != 1 || d.Copies[0].Row["title"] != "edited" || d.Copies[0].Row["body"] != "the body" {
		t.Errorf("id %d after replays: status %d, %+v; want title edited, body %q", gap, s, d, "the body")
	}
}
