package tests

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/tributary/tributary/internal/chstore"
)

// TestDuplicateResolvedByTruncate: an id live on two shards is an alerting
// duplicate; when one shard's table is truncated (the runbook's "delete
// the copy that should not exist", done wholesale), the id is live on one
// shard again and the anomaly resolves — the alert must not stay up for a
// copy that no longer exists.
func TestDuplicateResolvedByTruncate(t *testing.T) {
	p := newPipeline(t, []int{0, 1}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tbl := p.table()

	dup := p.insert(ctx, 0, 1, "on both", "b")
	p.exec(ctx, 1, fmt.Sprintf("INSERT INTO %s (id, workspace_id, title, body) VALUES ($1, 101, 'on both', 'b')", tbl), dup)
	p.waitAnomaly(ctx, dup, "alert", func(a chstore.Anomaly, ok bool) bool {
		return ok && !a.Resolved && a.Alerted && a.Kind == chstore.KindDuplicate && len(a.Shards) == 2
	})

	p.exec(ctx, 1, fmt.Sprintf("TRUNCATE %s", tbl))
	p.waitDoc(ctx, dup, "one copy after the truncate", func(s int, d docAnswer) bool {
		return s == http.StatusOK && len(d.Copies) == 1 && d.Copies[0].Shard == 0
	})
	p.waitAnomaly(ctx, dup, "resolution after the truncate", func(a chstore.Anomaly, ok bool) bool {
		return ok && a.Resolved
	})
}
