package tests

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/tributary/tributary/internal/admin"
	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/fleet"
)

// TestAdminTeardown: a two-shard deployment that has streamed a row. While
// its readers and loader run, teardown refuses (each slot in use, the
// group's member) and removes nothing; once they stop it removes both
// slots and publications, the topics, the consumer group and the
// ClickHouse database (in ClickHouse cluster mode on every node); a second
// teardown finds nothing.
func TestAdminTeardown(t *testing.T) {
	p := setupPipeline(t, []int{0, 1}, nil, true)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	for _, s := range p.shards {
		p.startReader(runCtx, s)
	}
	p.startLoader(runCtx, "l1")
	// A row through each shard: both readers stream, so both slots exist
	// and are in use when the plan is asked for (one row on shard 1 alone
	// left reader 0 still starting in cluster mode).
	for _, s := range p.shards {
		id := p.insert(ctx, s, 7, "before teardown", "b")
		p.waitDoc(ctx, id, "the streamed row", func(status int, _ docAnswer) bool { return status == http.StatusOK })
	}

	cl, err := admin.NewProducer(p.brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var shards []fleet.Endpoint
	for _, s := range p.shards {
		shards = append(shards, fleet.Endpoint{Number: s, DSN: p.stack.ShardDSNs[s]})
	}
	name := "e2e_" + p.suffix
	d := &admin.Deployment{Shards: shards, Slot: name + "_{shard}", Publication: name,
		Topics: append(p.tables.Topics(), name+".state", name+".dlq"), Group: name,
		Kafka: cl, ClickHouse: p.store.Conn(), Database: p.chDB}
	// In ClickHouse cluster mode (make test-cluster), every node has the
	// database: the teardown must find and drop it on each.
	if cluster := p.stack.ClickHouseCluster; cluster != "" {
		if d.ClickHouseNodes, err = chstore.DialNodes(ctx, chstore.DialOptions{Addr: p.stack.ClickHouseAddr}, cluster); err != nil {
			t.Fatal(err)
		}
		defer chstore.CloseNodes(d.ClickHouseNodes)
	}

	// Running: refused, with a reason per running component.
	plan, err := admin.PlanTeardown(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	busy := strings.Join(plan.Busy, "\n")
	for _, want := range []string{"shard 0: slot " + name + "_0 is in use", "shard 1: slot " + name + "_1 is in use", "consumer group " + name + " has 1 member"} {
		if !strings.Contains(busy, want) {
			t.Errorf("teardown while running: busy = %q, want it to say %q", busy, want)
		}
	}
	if err := admin.Teardown(ctx, d, plan, p.log); !errors.Is(err, admin.ErrBusy) {
		t.Fatalf("teardown while running = %v, want ErrBusy", err)
	}
	if n := slotCount(ctx, t, p, 0, name+"_0"); n != 1 {
		t.Fatalf("after the refused teardown shard 0 has %d slots %s_0, want 1", n, name)
	}

	stop()
	p.wg.Wait()
	// A walsender lingers a moment after its reader closed.
	var last *admin.Plan
	p.waitFor(ctx, 30*time.Second, "the plan to see nothing running", func() bool {
		last, err = admin.PlanTeardown(ctx, d)
		return err == nil && len(last.Busy) == 0
	})
	if got := fmt.Sprint(last.Slots, last.Publications); got != fmt.Sprintf("[{0 %[1]s_0} {1 %[1]s_1}] [{0 %[1]s} {1 %[1]s}]", name) {
		t.Errorf("plan's slots and publications = %s", got)
	}
	for _, topic := range []string{p.tables.Topics()[0], name + ".state"} {
		if !slices.Contains(last.Topics, topic) {
			t.Errorf("plan's topics %v lack %s", last.Topics, topic)
		}
	}
	if last.Group != name || last.Database != p.chDB {
		t.Errorf("plan's group %q, database %q; want %q, %q", last.Group, last.Database, name, p.chDB)
	}
	if len(last.DatabaseOn) != len(d.ClickHouseNodes) {
		t.Errorf("plan's database is on %q, want every node of %d", last.DatabaseOn, len(d.ClickHouseNodes))
	}
	if err := admin.Teardown(ctx, d, last, p.log); err != nil {
		t.Fatal(err)
	}

	for _, s := range p.shards {
		if n := slotCount(ctx, t, p, s, fmt.Sprintf("%s_%d", name, s)); n != 0 {
			t.Errorf("shard %d still has its slot", s)
		}
	}
	topics, err := kadm.NewClient(cl).ListTopics(ctx, d.Topics...)
	if err != nil {
		t.Fatal(err)
	}
	for _, td := range topics {
		if td.Err == nil {
			t.Errorf("topic %s still exists", td.Topic)
		}
	}
	servers := map[string]driver.Conn{"clickhouse": p.store.Conn()}
	for _, n := range p.store.Nodes() {
		servers[n.String()] = n.Conn()
	}
	for name, conn := range servers {
		var dbs uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM system.databases WHERE name = ?", p.chDB).Scan(&dbs); err != nil || dbs != 0 {
			t.Errorf("%s: database %s: %d left, %v", name, p.chDB, dbs, err)
		}
	}
	again, err := admin.PlanTeardown(ctx, d)
	if err != nil || !again.Empty() {
		t.Errorf("a second teardown's plan = %+v, %v; want nothing to remove", again, err)
	}
}

// slotCount counts the slots named name on shard.
func slotCount(ctx context.Context, t *testing.T, p *pipeline, shard int, name string) int {
	t.Helper()
	conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[shard])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
