package loader

import (
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/dedupe"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/tables"
)

func testLoader(t *testing.T, cacheBytes int64) *Loader {
	t.Helper()
	return New(Config{Tables: &tables.Config{}, ImageCacheBytes: cacheBytes},
		nil, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
}

// ch builds a change of row id on shard 0 at version lsn; unchanged lists
// the columns left out.
func ch(op envelope.Op, id string, lsn uint64, unchanged ...string) change {
	return change{ev: &envelope.Event{Kind: envelope.KindChange, Op: op, ID: id, LSN: envelope.LSN(lsn), Unchanged: unchanged}}
}

// TestBaseLookups: which rows of a batch read their unchanged-TOAST base
// from ClickHouse. A row is read unless the batch holds a full, non-stale
// image of it before its first update that needs a base, or the cache
// holds an image covering the columns left out; a batch with a truncate,
// or a loader without the cache, reads every such row.
func TestBaseLookups(t *testing.T) {
	bodyImg := dedupe.Image{Version: 10, Values: map[string]any{"body": "cached"}}
	tests := []struct {
		name    string
		off     bool                    // cache off
		cache   map[string]dedupe.Image // id -> image held before the batch
		written map[string]uint64       // id -> version the version map holds
		batch   []change
		want    []string // ids read, in order
	}{
		{name: "update alone, nothing cached",
			batch: []change{ch(envelope.OpUpdate, "1", 20, "body")}, want: []string{"1"}},
		{name: "full image first in the batch",
			batch: []change{ch(envelope.OpInsert, "1", 10), ch(envelope.OpUpdate, "1", 20, "body")}},
		{name: "update before the full image",
			batch: []change{ch(envelope.OpUpdate, "1", 20, "body"), ch(envelope.OpUpdate, "1", 30)}, want: []string{"1"}},
		{name: "full image first but stale (a newer version was written)",
			written: map[string]uint64{"1": 15},
			batch:   []change{ch(envelope.OpInsert, "1", 10), ch(envelope.OpUpdate, "1", 20, "body")}, want: []string{"1"}},
		{name: "full image first but older than the cached one",
			cache: map[string]dedupe.Image{"1": bodyImg},
			batch: []change{ch(envelope.OpInsert, "1", 5), ch(envelope.OpUpdate, "1", 20, "tags")}, want: []string{"1"}},
		{name: "cached image covers",
			cache: map[string]dedupe.Image{"1": bodyImg},
			batch: []change{ch(envelope.OpUpdate, "1", 20, "body"), ch(envelope.OpUpdate, "1", 30, "body")}},
		{name: "cached image lacks a column",
			cache: map[string]dedupe.Image{"1": bodyImg},
			batch: []change{ch(envelope.OpUpdate, "1", 20, "body", "tags")}, want: []string{"1"}},
		{name: "cached tombstone answers (no base)",
			cache: map[string]dedupe.Image{"1": {Version: 10, Deleted: true}},
			batch: []change{ch(envelope.OpUpdate, "1", 20, "body")}},
		{name: "a truncate in the batch reads every row",
			cache: map[string]dedupe.Image{"1": bodyImg},
			batch: []change{ch(envelope.OpInsert, "2", 10), ch(envelope.OpTruncate, "", 15),
				ch(envelope.OpUpdate, "1", 20, "body"), ch(envelope.OpUpdate, "2", 20, "body")}, want: []string{"1", "2"}},
		{name: "cache off reads every row", off: true,
			batch: []change{ch(envelope.OpInsert, "1", 10), ch(envelope.OpUpdate, "1", 20, "body"),
				ch(envelope.OpUpdate, "2", 20, "body")}, want: []string{"1", "2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			budget := int64(1 << 20)
			if tc.off {
				budget = -1
			}
			l := testLoader(t, budget)
			for id, im := range tc.cache {
				l.images.Put(dedupe.Key{Table: "documents", ID: id}, im)
			}
			for id, v := range tc.written {
				l.versions.Written(dedupe.Key{Table: "documents", ID: id}, v)
			}
			lookup, cols, pinned := l.baseLookups("documents", tc.batch)
			// A base counted on from the cache is handed over: the batch's
			// own writes may evict it before its update is converted.
			for id, im := range tc.cache {
				p, ok := pinned[chstore.RowKey{ID: id}]
				if ok && p.Version != im.Version {
					t.Errorf("id %s pinned at version %d, cached %d", id, p.Version, im.Version)
				}
				if read := slices.Contains(tc.want, id); ok == read {
					t.Errorf("id %s: pinned %v and read from ClickHouse %v", id, ok, read)
				}
			}
			var got []string
			for _, k := range lookup {
				got = append(got, k.ID)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("read %v, want %v", got, tc.want)
			}
			if len(lookup) > 0 && !slices.Contains(cols, "body") && !slices.Contains(cols, "tags") {
				t.Errorf("columns read %v", cols)
			}
			for _, c := range tc.batch {
				for _, col := range c.ev.Unchanged {
					if learned := slices.Contains(l.toastCols["documents"], col); learned == tc.off {
						t.Errorf("column %s learned: %v, cache off: %v", col, learned, tc.off)
					}
				}
			}
		})
	}
}

// TestImageOf: an image holds the columns asked for, strings copied out of
// the block; a tombstone row is a deleted image.
func TestImageOf(t *testing.T) {
	tbl, err := chstore.Layout("documents", []string{"id"}, []envelope.Column{
		{Name: "id", Type: "bigint", Key: true}, {Name: "title", Type: "text"}, {Name: "body", Type: "text"},
	})
	if err != nil {
		t.Fatal(err)
	}
	b := tbl.NewBlock(2, time.Now())
	rec := "id=1 body=the long body"
	body := rec[10:]
	if err := b.Set(0, &chstore.Row{Version: 7, Values: map[string]*string{"id": ptr("1"), "title": ptr("t"), "body": &body}}); err != nil {
		t.Fatal(err)
	}
	if err := b.Set(1, &chstore.Row{Version: 8, Deleted: true, Values: map[string]*string{"id": ptr("2")}}); err != nil {
		t.Fatal(err)
	}
	im := imageOf(b, 0, 7, []string{"body"})
	if im.Version != 7 || im.Deleted || len(im.Values) != 1 || im.Values["body"] != "the long body" {
		t.Errorf("image of row 0 = %+v", im)
	}
	if del := imageOf(b, 1, 8, []string{"body"}); !del.Deleted || del.Version != 8 {
		t.Errorf("image of a tombstone = %+v, want deleted at 8", del)
	}
}

func ptr(s string) *string { return &s }

// TestPickBase: the base of an unchanged-TOAST update is the newest known
// version of its row, used only when it is older than the update. A known
// version at or above the update supersedes it — the loader replaying,
// after a crash, an update whose row it had already deleted (a move's
// delete at the source) — which is a drop, never "no base"; only a row
// with no earlier version, or whose newest earlier version is a
// tombstone, has none.
func TestPickBase(t *testing.T) {
	live := func(v uint64, body string) base {
		return base{version: v, value: func(string) any { return body }}
	}
	tomb := func(v uint64) base { return base{version: v, deleted: true} }
	tests := []struct {
		name  string
		ver   uint64
		cands []base
		want  baseVerdict
		body  string // with baseFound
	}{
		{name: "nothing known", ver: 20, want: baseNone},
		{name: "stored predecessor", ver: 20, cands: []base{live(10, "stored")}, want: baseFound, body: "stored"},
		{name: "batch newer than stored", ver: 30, cands: []base{live(20, "batch"), live(10, "stored")}, want: baseFound, body: "batch"},
		{name: "stored newer than batch", ver: 30, cands: []base{live(10, "batch"), live(20, "stored")}, want: baseFound, body: "stored"},
		{name: "tie goes to the batch", ver: 30, cands: []base{live(20, "batch"), live(20, "stored")}, want: baseFound, body: "batch"},
		{name: "predecessor is a tombstone (truncated)", ver: 30, cands: []base{tomb(20)}, want: baseTombstone},
		{name: "re-inserted after a tombstone", ver: 30, cands: []base{live(25, "batch"), tomb(20)}, want: baseFound, body: "batch"},
		// The order the kill-nine test found: insert, edit, edit, then the
		// row's delete at the source (a move), written before the loader
		// died and the offsets were committed. The replayed second edit
		// sees the stored tombstone, newer than itself.
		{name: "replay behind a stored delete", ver: 2559, cands: []base{tomb(2600)}, want: baseSuperseded},
		{name: "replay behind a stored delete, predecessor in the batch", ver: 2559,
			cands: []base{live(2495, "batch"), tomb(2600)}, want: baseSuperseded},
		{name: "replay behind a stored newer version", ver: 2559, cands: []base{live(2600, "stored")}, want: baseSuperseded},
		{name: "redelivery of the stored version itself", ver: 2559, cands: []base{live(2559, "stored")}, want: baseSuperseded},
		{name: "cached tombstone newer", ver: 2559, cands: []base{live(2495, "batch"), live(2495, "stored"), tomb(2600)}, want: baseSuperseded},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, got := pickBase(tc.ver, tc.cands)
			if got != tc.want {
				t.Fatalf("verdict %d, want %d", got, tc.want)
			}
			if got == baseFound {
				if b.value == nil {
					t.Fatalf("found a base without values")
				}
				if got := b.value("body"); got != tc.body {
					t.Errorf("base body %v, want %q", got, tc.body)
				}
			}
		})
	}
}

// TestBaselessAfterWatermark: an unchanged-TOAST update of a row of which
// nothing is known, behind a watermark of its shard (in its batch) below
// its commit, came after the shard's copy ended: a real gap, for the
// dead-letter topic (without a read of ClickHouse: the loader has no
// store here).
func TestBaselessAfterWatermark(t *testing.T) {
	l := testLoader(t, 1<<20)
	c := ch(envelope.OpUpdate, "1", 300, "body")
	c.ev.CommitLSN, c.watermark = 308, 200
	tbl, err := chstore.Layout("documents", []string{"id"}, []envelope.Column{{Name: "id", Type: "bigint", Key: true}, {Name: "body", Type: "text"}})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := l.baseless(t.Context(), tbl, c); err != nil || v != baseNone {
		t.Errorf("baseless = %d, %v; want baseNone", v, err)
	}
}
