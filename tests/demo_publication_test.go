package tests

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary/tributary/internal/tables"
)

// TestDemoPublicationCoversTables: the publication the stack makes for the
// demo holds exactly the tables deploy/local/tables.json replicates, and
// the replication role may read each (the snapshot). The role cannot
// alter a publication it does not own, so a table added to the config but
// not to the stack stops the demo's readers.
func TestDemoPublicationCoversTables(t *testing.T) {
	st := loadStack(t)
	cfg, err := tables.Load("../deploy/local/tables.json")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, tc := range cfg.Tables {
		want = append(want, tc.Name)
	}
	slices.Sort(want)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, dsn := range st.ShardDSNs {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		err = conn.QueryRow(ctx, `SELECT coalesce(array_agg(tablename::text ORDER BY tablename), '{}')
			FROM pg_publication_tables WHERE pubname = 'tributary_pub' AND schemaname = 'public'`).Scan(&got)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("shard %d: tributary_pub holds %v, deploy/local/tables.json replicates %v (deploy/local/stack.d/postgres.sh PUB_TABLES)", i, got, want)
		}
		for _, name := range want {
			var ok bool
			if err := conn.QueryRow(ctx, "SELECT has_table_privilege('tributary_repl', $1, 'SELECT')", "public."+name).Scan(&ok); err != nil || !ok {
				t.Errorf("shard %d: tributary_repl cannot read %s: %v", i, name, err)
			}
		}
		conn.Close(ctx)
	}
}
