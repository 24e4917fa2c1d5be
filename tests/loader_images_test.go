package tests

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/envelope"
)

// groupMembers counts the members of group that have partitions assigned.
func groupMembers(ctx context.Context, adm *kadm.Client, group string) (int, error) {
	gs, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, m := range gs[group].Members {
		if a, ok := m.Assigned.AsConsumer(); ok && len(a.Topics) > 0 {
			n++
		}
	}
	return n, nil
}

// keepBody is an update of id that leaves the TOASTed body out (unchanged).
func (p *pipeline) keepBody(cols []envelope.Column, id int64, at string, title string) *envelope.Event {
	after := docRow(id, "1", title, "")
	delete(after, "body")
	ev := p.changeEnv(cols, envelope.OpUpdate, id, lsn(at), after)
	ev.Unchanged = []string{"body"}
	return ev
}

// TestLoaderImageCacheRebalance: the loader's image cache (the newest body
// it wrote, the base of later unchanged-TOAST updates) does not outlive its
// ownership of a partition. One row per partition gets body "one" (and an
// update keeping it, so the first loader caches it); a second loader joins
// and takes some partitions, where the rows get body "two"; it leaves, and
// an update keeping the body of every row must keep "two" — a cache kept
// across the rebalance would bring back "one".
func TestLoaderImageCacheRebalance(t *testing.T) {
	p := newMeteredPipeline(t, []int{0}, false)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cols, _, _ := p.craftedIDs(ctx, 0)
	n := p.partitions(ctx)
	ids := make([]int64, n)
	for part := range n {
		ids[part] = idsIn(int32(part), n, 1)[0]
	}
	produceAll := func(mk func(id int64) *envelope.Event) {
		t.Helper()
		var recs []*kgo.Record
		for part, id := range ids {
			recs = append(recs, p.record(mk(id), int32(part)))
		}
		p.produce(ctx, recs...)
	}
	waitTitles := func(what, title string) {
		t.Helper()
		for _, id := range ids {
			p.waitDoc(ctx, id, what, func(s int, d docAnswer) bool {
				return s == http.StatusOK && len(d.Copies) == 1 && d.Copies[0].Row["title"] == title
			})
		}
	}

	produceAll(func(id int64) *envelope.Event {
		return p.changeEnv(cols, envelope.OpInsert, id, lsn("0/1000"), docRow(id, "1", "t1", "one"))
	})
	waitTitles("inserts", "t1")
	produceAll(func(id int64) *envelope.Event { return p.keepBody(cols, id, "0/1500", "t1b") })
	waitTitles("first updates keeping the body", "t1b")
	p.waitFor(ctx, 30*time.Second, "an image of every row cached", func() bool {
		v, _ := metricOf(t, p.reg, "tributary_loader_image_cache_entries", nil)
		return v >= float64(n)
	})

	adm := kadm.NewClient(p.kafka())
	l2ctx, l2cancel := context.WithCancel(ctx)
	defer l2cancel()
	l2 := p.startMeteredLoader(l2ctx, "l2")
	p.waitFor(ctx, 60*time.Second, "two loaders with partitions", func() bool {
		m, err := groupMembers(ctx, adm, p.group())
		return err == nil && m == 2
	})
	produceAll(func(id int64) *envelope.Event {
		return p.changeEnv(cols, envelope.OpUpdate, id, lsn("0/2000"), docRow(id, "1", "t2", "two"))
	})
	waitTitles("new bodies", "t2")
	l2rows, _ := metricOf(t, l2, "tributary_loader_rows_inserted_total", map[string]string{"table": p.table()})
	if l2rows == 0 {
		t.Fatal("the second loader wrote none of the new bodies: the test proves nothing")
	}
	l2cancel()
	p.waitFor(ctx, 60*time.Second, "one loader with every partition", func() bool {
		m, err := groupMembers(ctx, adm, p.group())
		return err == nil && m == 1
	})

	produceAll(func(id int64) *envelope.Event { return p.keepBody(cols, id, "0/3000", "t3") })
	waitTitles("updates keeping the body after the rebalance", "t3")
	for part, id := range ids {
		if _, d := p.getDoc(ctx, id); d.Copies[0].Row["body"] != "two" {
			t.Errorf("partition %d id %d: body %q after the rebalance, want %q (written by the second loader)",
				part, id, d.Copies[0].Row["body"], "two")
		}
	}
}

// TestLoaderImageCacheTruncate: a TRUNCATE tombstones the row whose body
// the cache holds; a later update keeping the body then has no base (a
// tombstone is none) and goes to the dead-letter topic, instead of
// bringing the truncated row back with its old body from the cache.
func TestLoaderImageCacheTruncate(t *testing.T) {
	p := newMeteredPipeline(t, []int{0}, false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cols, part, ids := p.craftedIDs(ctx, 1)
	id := ids[0]

	p.produce(ctx, p.record(p.changeEnv(cols, envelope.OpInsert, id, lsn("0/1000"), docRow(id, "1", "t1", "one")), part))
	p.waitDoc(ctx, id, "insert", func(s int, d docAnswer) bool { return s == http.StatusOK })
	p.produce(ctx, p.record(p.keepBody(cols, id, "0/1500", "t1b"), part))
	p.waitDoc(ctx, id, "update keeping the body", func(s int, d docAnswer) bool {
		return s == http.StatusOK && len(d.Copies) == 1 && d.Copies[0].Row["title"] == "t1b"
	})
	p.waitFor(ctx, 30*time.Second, "the row's image cached", func() bool {
		v, _ := metricOf(t, p.reg, "tributary_loader_image_cache_entries", nil)
		return v >= 1
	})

	trunc := &envelope.Event{V: envelope.Version, Kind: envelope.KindChange, Shard: 0, Schema: "public", Table: p.table(),
		Op: envelope.OpTruncate, LSN: lsn("0/2000"), CommitLSN: lsn("0/2008"), XID: 1001,
		CommitTime: time.Now().UTC().Truncate(time.Second), Partitions: int32(p.partitions(ctx))}
	p.produce(ctx, p.record(trunc, part))
	p.waitDoc(ctx, id, "truncate", func(s int, _ docAnswer) bool { return s == http.StatusNotFound })

	p.produce(ctx, p.record(p.keepBody(cols, id, "0/3000", "after the truncate"), part))
	labels := map[string]string{"topic": p.topic(), "reason": "toast_without_base"}
	p.waitFor(ctx, 60*time.Second, "the update without a base in the dead-letter topic", func() bool {
		v, _ := metricOf(t, p.reg, "tributary_loader_dlq_records_total", labels)
		return v >= 1
	})
	if s, d := p.getDoc(ctx, id); s != http.StatusNotFound {
		t.Errorf("truncated id %d is back after an update keeping its body: status %d, %s", id, s, fmt.Sprint(d))
	}
}
