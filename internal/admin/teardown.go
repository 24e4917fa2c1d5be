package admin

// Teardown removes what a deployment created outside its own processes:
// each shard's replication slot and publication, the Kafka topics and the
// loaders' consumer group, and the ClickHouse database. It plans first
// (what exists, and whether anything still uses it), so that the operator
// sees the list before anything goes; a running reader (its slot active)
// or loader (its group has members) refuses the whole teardown, because
// removing what a live process uses would only make it recreate it or
// fail. Everything missing is skipped: a second teardown finds nothing.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/fleet"
)

// Deployment names what a teardown looks for.
type Deployment struct {
	// Shards are the fleet's shards with their (non-replication) DSNs; the
	// role needs to drop slots and publications (a superuser, or the
	// publication's owner with the REPLICATION attribute).
	Shards []fleet.Endpoint
	// Slot is the slot name on every shard, with "{shard}" replaced by the
	// shard's number, as cdc-reader's --slot; "" means the readers'
	// default, tributary_shard_{shard}.
	Slot        string
	Publication string
	// Topics are the table topics, the reader state topic and the
	// dead-letter topic; Group is the loaders' consumer group.
	Topics []string
	Group  string
	// Kafka is a client of the deployment's brokers.
	Kafka *kgo.Client
	// ClickHouse and Database: the analytics store to drop.
	ClickHouse driver.Conn
	Database   string
	// ClickHouseNodes, in ClickHouse cluster mode (chstore.DialNodes), are
	// every node of the cluster: the loaders created the database on each,
	// so it is looked for and dropped on each, and ClickHouse is not used.
	ClickHouseNodes []chstore.Node
}

// SlotName is the slot of shard n: the configured name (its "{shard}" the
// shard's number), else the reader's default.
func (d *Deployment) SlotName(n int) string {
	name := d.Slot
	if name == "" {
		name = "tributary_shard_{shard}"
	}
	return strings.ReplaceAll(name, "{shard}", strconv.Itoa(n))
}

// Plan is what a teardown would remove, and what stops it.
type Plan struct {
	// Slots and Publications are "shard N: name" of the ones that exist.
	Slots        []ShardObject
	Publications []ShardObject
	Topics       []string
	// Group is the consumer group if it exists ("" if not).
	Group    string
	Database string // "" if the database does not exist (on any node)
	// DatabaseOn, in cluster mode, are the nodes that have it.
	DatabaseOn []string
	// Busy says what is still running; a plan with Busy is refused.
	Busy []string
}

// ShardObject is a slot or publication on one shard.
type ShardObject struct {
	Shard int    `json:"shard"`
	Name  string `json:"name"`
}

// Empty reports whether nothing is left to remove.
func (p *Plan) Empty() bool {
	return len(p.Slots)+len(p.Publications)+len(p.Topics) == 0 && p.Group == "" && p.Database == ""
}

// PlanTeardown looks at every shard, Kafka and ClickHouse and lists what
// exists. A shard it cannot reach fails the plan: a teardown that skipped
// it would leave a slot holding WAL forever.
func PlanTeardown(ctx context.Context, d *Deployment) (*Plan, error) {
	p := &Plan{}
	for _, s := range d.Shards {
		if err := planShard(ctx, d, s, p); err != nil {
			return nil, err
		}
	}
	adm := kadm.NewClient(d.Kafka)
	topics, err := adm.ListTopics(ctx, d.Topics...)
	if err != nil {
		return nil, fmt.Errorf("kafka: list topics: %w", err)
	}
	for _, t := range d.Topics {
		if td, ok := topics[t]; ok && td.Err == nil {
			p.Topics = append(p.Topics, t)
		}
	}
	groups, err := adm.DescribeGroups(ctx, d.Group)
	if err != nil {
		return nil, fmt.Errorf("kafka: describe group %s: %w", d.Group, err)
	}
	if g, ok := groups[d.Group]; ok && g.Err == nil && g.State != "Dead" {
		p.Group = d.Group
		if n := len(g.Members); n > 0 {
			p.Busy = append(p.Busy, fmt.Sprintf("consumer group %s has %d member(s) (%s): stop the loaders first", d.Group, n, g.State))
		}
	}
	for _, ch := range d.clickhouse() {
		var n uint64
		if err := ch.conn.QueryRow(ctx, "SELECT count() FROM system.databases WHERE name = ?", d.Database).Scan(&n); err != nil {
			return nil, fmt.Errorf("%s: %w", ch, err)
		}
		if n > 0 {
			p.Database = d.Database
			if ch.node != "" {
				p.DatabaseOn = append(p.DatabaseOn, ch.node)
			}
		}
	}
	return p, nil
}

// chServer is a ClickHouse server of the deployment: node names it in a
// cluster, "" for the one server.
type chServer struct {
	node string
	conn driver.Conn
}

// String names the server in errors.
func (c chServer) String() string {
	if c.node == "" {
		return "clickhouse"
	}
	return "clickhouse " + c.node
}

// clickhouse are the servers holding the database: every node of the
// cluster, or the one server.
func (d *Deployment) clickhouse() []chServer {
	if len(d.ClickHouseNodes) == 0 {
		return []chServer{{conn: d.ClickHouse}}
	}
	out := make([]chServer, len(d.ClickHouseNodes))
	for i, n := range d.ClickHouseNodes {
		out[i] = chServer{node: n.String(), conn: n.Conn()}
	}
	return out
}

func planShard(ctx context.Context, d *Deployment, s fleet.Endpoint, p *Plan) error {
	conn, err := pgx.Connect(ctx, s.DSN)
	if err != nil {
		return fmt.Errorf("%s: %w", label(s), err)
	}
	defer conn.Close(context.Background())
	slot := d.SlotName(s.Number)
	var active bool
	var pid *int32
	err = conn.QueryRow(ctx, "SELECT active, active_pid FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()", slot).Scan(&active, &pid)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("%s: read slot %s: %w", label(s), slot, err)
	default:
		p.Slots = append(p.Slots, ShardObject{s.Number, slot})
		if active {
			p.Busy = append(p.Busy, fmt.Sprintf("%s: slot %s is in use (walsender pid %d): stop its reader first", label(s), slot, deref32(pid)))
		}
	}
	var one int
	err = conn.QueryRow(ctx, "SELECT 1 FROM pg_publication WHERE pubname = $1", d.Publication).Scan(&one)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("%s: read publication %s: %w", label(s), d.Publication, err)
	default:
		p.Publications = append(p.Publications, ShardObject{s.Number, d.Publication})
	}
	return nil
}

// label is "shard N" or "shard N (name)".
func label(e fleet.Endpoint) string { return fleet.Shard{Number: e.Number, Name: e.Name}.Label() }

func deref32(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

// WritePlan writes the plan for the operator to read before saying yes.
func WritePlan(w io.Writer, p *Plan) {
	if p.Empty() {
		fmt.Fprintln(w, "nothing to remove: no slot, publication, topic, consumer group or ClickHouse database of this deployment exists")
		return
	}
	fmt.Fprintln(w, "teardown would remove:")
	for _, s := range p.Slots {
		fmt.Fprintf(w, "  shard %d: replication slot %s\n", s.Shard, s.Name)
	}
	for _, s := range p.Publications {
		fmt.Fprintf(w, "  shard %d: publication %s\n", s.Shard, s.Name)
	}
	for _, t := range p.Topics {
		fmt.Fprintf(w, "  kafka: topic %s\n", t)
	}
	if p.Group != "" {
		fmt.Fprintf(w, "  kafka: consumer group %s (its committed offsets)\n", p.Group)
	}
	if p.Database != "" {
		fmt.Fprintf(w, "  clickhouse: database %s (every table in it)\n", p.Database)
		for _, n := range p.DatabaseOn {
			fmt.Fprintf(w, "    on %s\n", n)
		}
	}
	for _, b := range p.Busy {
		fmt.Fprintf(w, "refused: %s\n", b)
	}
}

// ErrBusy is returned by Teardown when something still runs.
var ErrBusy = errors.New("the deployment is still running")

// Teardown removes what p lists, logging each removal. It refuses a plan
// with Busy entries. Slots go first, so that no shard keeps WAL for a
// deployment that is half gone; the database goes last.
func Teardown(ctx context.Context, d *Deployment, p *Plan, log *slog.Logger) error {
	if len(p.Busy) > 0 {
		return fmt.Errorf("%w: %s", ErrBusy, strings.Join(p.Busy, "; "))
	}
	byShard := map[int]fleet.Endpoint{}
	for _, s := range d.Shards {
		byShard[s.Number] = s
	}
	drop := func(o ShardObject, what, sql string, args ...any) error {
		s := byShard[o.Shard]
		conn, err := pgx.Connect(ctx, s.DSN)
		if err != nil {
			return fmt.Errorf("%s: %w", label(s), err)
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			return fmt.Errorf("%s: drop %s %s: %w", label(s), what, o.Name, err)
		}
		log.Info("dropped "+what, slog.Int("shard", o.Shard), slog.String("name", o.Name))
		return nil
	}
	for _, o := range p.Slots {
		// The WHERE keeps a second run (or a slot dropped meanwhile) harmless.
		if err := drop(o, "replication slot", "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()", o.Name); err != nil {
			return err
		}
	}
	for _, o := range p.Publications {
		if err := drop(o, "publication", "DROP PUBLICATION IF EXISTS "+pgx.Identifier{o.Name}.Sanitize()); err != nil {
			return err
		}
	}
	adm := kadm.NewClient(d.Kafka)
	if p.Group != "" {
		res, err := adm.DeleteGroups(ctx, p.Group)
		if err == nil {
			err = res.Error()
		}
		if err != nil {
			return fmt.Errorf("kafka: delete consumer group %s: %w", p.Group, err)
		}
		log.Info("deleted consumer group", slog.String("group", p.Group))
	}
	if len(p.Topics) > 0 {
		res, err := adm.DeleteTopics(ctx, p.Topics...)
		if err != nil {
			return fmt.Errorf("kafka: delete topics: %w", err)
		}
		for _, r := range res.Sorted() {
			if r.Err != nil {
				return fmt.Errorf("kafka: delete topic %s: %w", r.Topic, r.Err)
			}
			log.Info("deleted topic", slog.String("topic", r.Topic))
		}
		if err := topicsGone(ctx, adm, p.Topics); err != nil {
			return err
		}
	}
	if p.Database != "" {
		// Every node, not only those of the plan: IF EXISTS makes it
		// harmless, and a loader may have created it on one meanwhile.
		for _, ch := range d.clickhouse() {
			if err := ch.conn.Exec(ctx, "DROP DATABASE IF EXISTS "+chstore.Quote(p.Database)); err != nil {
				return fmt.Errorf("%s: drop database %s: %w", ch, p.Database, err)
			}
			log.Info("dropped clickhouse database", slog.String("database", p.Database), slog.String("server", ch.String()))
		}
	}
	return nil
}

// topicsGone waits until no broker lists any of topics: Kafka deletes a
// topic after it acknowledged the deletion, and a teardown is done only
// when a new deployment of the same names would start from nothing.
func topicsGone(ctx context.Context, adm *kadm.Client, topics []string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		listed, err := adm.ListTopics(ctx, topics...)
		if err != nil {
			return fmt.Errorf("kafka: list topics: %w", err)
		}
		var left []string
		for _, t := range topics {
			if td, ok := listed[t]; ok && td.Err == nil {
				left = append(left, t)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kafka: topics %s still listed a minute after their deletion was accepted", strings.Join(left, ", "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
