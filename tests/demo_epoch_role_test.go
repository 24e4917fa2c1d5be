package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestDemoRoleMayRecordEpoch: the stack's least-privilege replication role
// may write the publication comment in which the reader records its
// snapshot epoch (schema/envelope.md, "Epochs"), so no demo reader starts
// with "could not record the snapshot epoch on the publication". The
// comment is written in a transaction that is rolled back: the demo's
// readers' record stays as it was.
func TestDemoRoleMayRecordEpoch(t *testing.T) {
	st := loadStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, dsn := range st.ReplDSNs {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatalf("shard %d: connect as the replication role: %v", i, err)
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tx.Exec(ctx, fmt.Sprintf("COMMENT ON PUBLICATION tributary_pub IS 'tributary epoch=%d (test, rolled back)'", 1<<16-1))
		if err != nil {
			t.Errorf("shard %d: the replication role cannot record the epoch on tributary_pub (deploy/local/stack.d/postgres.sh): %v", i, err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		// Owning the publication must not let the role change what it
		// publishes: that takes owning the tables.
		_, err = conn.Exec(ctx, "ALTER PUBLICATION tributary_pub ADD TABLE tributary.shard_config")
		if err == nil {
			t.Errorf("shard %d: the replication role could add a table it does not own to tributary_pub", i)
			conn.Exec(ctx, "ALTER PUBLICATION tributary_pub DROP TABLE tributary.shard_config") //nolint:errcheck // undo
		}
		conn.Close(ctx)
	}
}
