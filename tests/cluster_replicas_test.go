package tests

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tributary/tributary/internal/chstore"
)

// TestClusterReplicaCatchUp: the loader writes a batch's watermarks only
// after every reachable replica holds the rows before them
// (chstore.SyncReplicas; schema/clickhouse.md "Cluster mode: every
// replica before the watermark"). A table not created yet has nothing to
// wait for. On shard 1's two replicas:
//
//  1. fetches stopped on replica 1 (SYSTEM STOP FETCHES), rows inserted on
//     replica 2: the wait reports replica 1 as behind and does not end
//     until its fetches resume;
//  2. the failure seen under a killed replica, made deterministic: rows
//     inserted on replica 2 while replica 1 does not fetch, the same block
//     inserted again on replica 1 (the loader's retry of an insert whose
//     first try died with its replica) is deduplicated — it succeeds and
//     writes nothing — and replica 2 is SIGKILLed. Replica 1 then cannot
//     fetch the rows from anyone: the wait reports it, for a table with
//     nothing pending skips the dead replica (reported unreachable), and
//     ends once replica 2 is back and replica 1 has fetched the rows.
func TestClusterReplicaCatchUp(t *testing.T) {
	st := clusterStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	db := "cluster_catchup_" + randSuffix()
	s, err := chstore.Open(ctx, chstore.Options{Addr: st.ClickHouseAddr, Database: db, Cluster: st.ClickHouseCluster})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	defer s.DropDatabase(context.WithoutCancel(ctx)) //nolint:errcheck // best effort
	var r1, r2 chstore.Node
	for _, n := range s.Nodes() {
		if n.Shard == 1 && n.Replica == 1 {
			r1 = n
		}
		if n.Shard == 1 && n.Replica == 2 {
			r2 = n
		}
	}
	if r1.Conn() == nil || r2.Conn() == nil {
		t.Fatalf("cluster nodes %v: want two replicas of shard 1", s.Nodes())
	}
	for _, name := range []string{"a", "b", "idle"} {
		local := s.LocalTable(name)
		err := s.ExecDDL(ctx, fmt.Sprintf("CREATE TABLE `%s`.`%s` (id UInt64) ENGINE = ReplicatedMergeTree('%s/%s/{shard}/%s', '{replica}') ORDER BY id",
			db, local, chstore.ZooKeeperRoot, db, local))
		if err != nil {
			t.Fatal(err)
		}
	}
	exec := func(n chstore.Node, q string) {
		t.Helper()
		if err := n.Conn().Exec(ctx, q); err != nil {
			t.Fatalf("%s: %s: %v", n, q, err)
		}
	}
	count := func(n chstore.Node, table string) uint64 {
		t.Helper()
		var c uint64
		if err := n.Conn().QueryRow(ctx, fmt.Sprintf("SELECT count() FROM `%s`.`%s`", db, s.LocalTable(table))).Scan(&c); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		return c
	}
	// wait runs SyncReplicas on tables; its events arrive on the channel.
	wait := func(tables ...string) (<-chan chstore.ReplicaEvent, <-chan error) {
		events, done := make(chan chstore.ReplicaEvent, 100), make(chan error, 1)
		go func() {
			done <- s.SyncReplicas(ctx, tables, func(e chstore.ReplicaEvent) {
				t.Logf("event %+v", e)
				select {
				case events <- e:
				default:
				}
			})
		}()
		return events, done
	}
	// behind waits for the report that n is behind, the wait still on.
	behind := func(events <-chan chstore.ReplicaEvent, done <-chan error, n chstore.Node) chstore.ReplicaEvent {
		t.Helper()
		for {
			select {
			case e := <-events:
				if e.Unreachable != nil || e.Node.Addr != n.Addr {
					t.Fatalf("wait reported %+v, want %s behind", e, n)
				}
				t.Logf("reported behind after %s: %s", e.Waited.Round(time.Second), e.Behind)
				return e
			case err := <-done:
				t.Fatalf("the wait ended (%v) while %s could not fetch", err, n)
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			}
		}
	}
	local := func(name string) string { return fmt.Sprintf("`%s`.`%s`", db, s.LocalTable(name)) }

	// 0. A table not created yet (watermarks before its first change):
	// nothing to wait for.
	if _, done := wait("not_created"); <-done != nil {
		t.Fatal("wait on a table not created yet failed")
	}

	// 1. Fetches stopped.
	exec(r1, "SYSTEM STOP FETCHES "+local("a"))
	exec(r2, "INSERT INTO "+local("a")+" SELECT number FROM numbers(1000)")
	events, done := wait("a")
	behind(events, done, r1)
	exec(r1, "SYSTEM START FETCHES "+local("a"))
	if err := <-done; err != nil {
		t.Fatalf("wait once fetches resumed: %v", err)
	}
	if c := count(r1, "a"); c != 1000 {
		t.Fatalf("replica 1 holds %d rows once the wait ended, want 1000", c)
	}

	// 2. The retry deduplicated on a replica that never gets the rows.
	const block = "INSERT INTO %s SELECT number FROM numbers(3)" // one block, the same twice
	exec(r1, "SYSTEM STOP FETCHES "+local("b"))
	exec(r2, fmt.Sprintf(block, local("b")))
	exec(r1, fmt.Sprintf(block, local("b")))
	if c := count(r1, "b"); c != 0 {
		t.Fatalf("replica 1 holds %d rows after the repeated block, want 0 (deduplicated: the rows are replica 2's)", c)
	}
	// Replica 2 dies before replica 1 may fetch: started the other way
	// round, replica 1 fetched the rows in between (CI, 4 Dec) and the wait
	// had nothing to report.
	killPidFile(t, st, filepath.Join(st.Env["TRIBUTARY_HOME"], "clickhouse", "node-2", "clickhouse-server.pid"), "ClickHouse node 2")
	exec(r1, "SYSTEM START FETCHES "+local("b"))
	idleEvents, idleDone := wait("idle")
	if err := <-idleDone; err != nil {
		t.Fatalf("wait on a table with nothing pending: %v", err)
	}
	select {
	case e := <-idleEvents:
		if e.Unreachable == nil || e.Node.Addr != r2.Addr {
			t.Errorf("wait with replica 2 dead reported %+v, want it unreachable", e)
		}
	default:
		t.Errorf("wait with replica 2 dead did not report it unreachable")
	}
	events, done = wait("b")
	e := behind(events, done, r1)
	if !strings.Contains(e.Behind, "fetch") {
		t.Errorf("replica 1 behind: %q, want it to say what it has to fetch", e.Behind)
	}
	stackUp(ctx, t, st)
	if err := <-done; err != nil {
		t.Fatalf("wait once replica 2 is back: %v", err)
	}
	if c := count(r1, "b"); c != 3 {
		t.Fatalf("replica 1 holds %d rows once the wait ended, want 3", c)
	}
}
