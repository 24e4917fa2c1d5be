package tests

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestTruncate: TRUNCATE on one shard removes exactly that shard's rows
// (spread over every partition), rows written after it survive, and the
// other shard is untouched.
func TestTruncate(t *testing.T) {
	p := newPipeline(t, []int{0, 1}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tbl := p.table()
	p.exec(ctx, 0, fmt.Sprintf("INSERT INTO %s (workspace_id, title, body) SELECT g, 'before', 'x' FROM generate_series(1, 40) g", tbl))
	p.exec(ctx, 1, fmt.Sprintf("INSERT INTO %s (workspace_id, title, body) SELECT g, 'other shard', 'y' FROM generate_series(1, 7) g", tbl))
	// Truncate and write again in one transaction, and once more after.
	p.exec(ctx, 0, fmt.Sprintf("BEGIN; TRUNCATE %[1]s; INSERT INTO %[1]s (workspace_id, title, body) VALUES (1, 'after', 'z'); COMMIT", tbl))
	p.exec(ctx, 0, fmt.Sprintf("INSERT INTO %s (workspace_id, title, body) VALUES (2, 'later', 'z')", tbl))

	deadline := time.Now().Add(30 * time.Second)
	diff := "not compared"
	for time.Now().Before(deadline) {
		if err := p.failed(); err != nil {
			t.Fatal(err)
		}
		if diff = p.compare(ctx, tbl); diff == "" {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("after TRUNCATE ClickHouse differs from the shards:\n%s", diff)
}
