// Command tributaryctl is the operator's command: it shows a deployment's
// status, pauses and resumes tables, asks a reader for a resnapshot of one
// table, lists and replays dead letters, and tears a deployment down. See internal/admin for what
// each action does and refuses.
package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sys/unix"

	"github.com/tributary/tributary/internal/admin"
	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/flagenv"
	"github.com/tributary/tributary/internal/fleet"
	"github.com/tributary/tributary/internal/kafkaconn"
	"github.com/tributary/tributary/internal/tables"
	"github.com/tributary/tributary/internal/telemetry"
)

const usage = `tributaryctl — operator actions on a deployment.

  tributaryctl status     [flags]   the status page's overview (GET /v1/status), as text or --json
  tributaryctl pause      [flags]   stop applying --table (its changes wait in Kafka)
  tributaryctl resume     [flags]   apply it again, from where it was paused
  tributaryctl dlq list   [flags]   the dead-letter topic's records, with reasons
  tributaryctl dlq replay [flags]   re-produce them to their source topics
  tributaryctl resnapshot --shard N --table T [--where SQL] [flags]
                                    copy one table of one shard again while it streams
  tributaryctl resnapshot --status --shard N [flags]
                                    the shard's running and last resnapshot
  tributaryctl teardown   [flags]   remove the deployment's slots, publications,
                                    topics, consumer group and ClickHouse database

status asks the API (--api, a token from $TRIBUTARY_API_TOKEN when the API
has tokens): per shard its freshness and reader state, stopped tables, the
loaders' lag and dead letters, open anomalies. Reader and loader state need
the API's --component-metrics.

pause writes a pause record in ClickHouse that every loader reads within
2 s: the table's topic is no longer applied nor committed, /v1/shards lists
it under stopped_tables (reason: paused) and leaves it out of the fleet's
freshness. The readers keep streaming it into Kafka, so their slots stay
confirmed and WAL does not pile up on the shards; the topic's retention
bounds how long a pause may last (pause prints it). resume continues from
the committed offsets. Both are idempotent.

dlq replay is a dry run unless --yes: it prints what it would replay.
Replay once the cause is fixed (see docs/runbook.md "Dead letters"): the
loader keeps the newest version of each row, so replaying twice, or
replaying a change older than the row's, changes nothing. --reason and
--table choose which dead letters; a record of a topic no table reads is
not replayed. Every action is logged on stderr.

resnapshot checks the table and the --where predicate on the shard
(PostgreSQL plans the query, reads nothing), refuses while another
resnapshot of the shard runs, then writes the request into the shard's
WAL, where its reader picks it up; it shows rows, rate and ETA until the
copy is done (--no-wait: return once asked). The shard's DSN is its
reader's, from --fleet or $TRIBUTARY_PG_DSN. See docs/runbook.md, "One
table on one shard is wrong".

teardown lists what exists first and asks (type the ClickHouse database's
name) unless --yes; without a terminal and without --yes it is a dry run.
It refuses while anything runs: a reader's slot in use, a loader in the
consumer group. Stop the readers, loaders and APIs first. It needs the
fleet file (shards' DSNs: a role that may drop slots and publications),
the same --slot/--publication/--state-topic/--group names the components
run with, and a ClickHouse user that may drop the database. With
--clickhouse-cluster the database is looked for and dropped on every node
of the cluster, and a node that does not answer stops the teardown before
anything is removed. Run twice, the second finds nothing to remove.

Example:
  set -a; . .stack/stack.env; set +a
  tributaryctl status --api http://127.0.0.1:8080
  tributaryctl pause --tables deploy/local/tables.json --table invoices --reason "backfill on shard 2"
  tributaryctl dlq list --tables deploy/local/tables.json
  tributaryctl dlq replay --tables deploy/local/tables.json --reason convert --yes
  tributaryctl resnapshot --fleet "$TRIBUTARY_HOME/fleet.json" --tables deploy/local/tables.json \
      --shard 1 --table documents --where "workspace_id = 7"
  tributaryctl teardown --tables deploy/local/tables.json --fleet "$TRIBUTARY_HOME/fleet.json"`

// Config is tributaryctl's whole configuration.
type Config struct {
	Action     string
	Brokers    string
	Kafka      kafkaconn.Security
	DLQTopic   string
	TablesFile string
	Reason     string
	Table      string
	JSON       bool
	Yes        bool
	LogLevel   string

	// status
	APIURL   string
	APIToken string

	// resnapshot
	Shard    int
	Where    string
	DSN      string // $TRIBUTARY_PG_DSN, when no fleet
	Status   bool
	NoWait   bool
	Progress time.Duration

	// teardown (and resnapshot: FleetFile, Slot, StateTopic)
	FleetFile   string
	Slot        string
	Publication string
	StateTopic  string
	Group       string
	ClickHouse  chstore.DialOptions
	Database    string
	// Cluster is the loaders' ClickHouse cluster ("" for one server).
	Cluster string
}

func parse(args []string) (*Config, error) {
	var c Config
	switch {
	case len(args) >= 2 && args[0] == "dlq" && (args[1] == "list" || args[1] == "replay"):
		c.Action, args = "dlq "+args[1], args[2:]
	case len(args) >= 1 && slices.Contains([]string{"teardown", "status", "pause", "resume", "resnapshot"}, args[0]):
		c.Action, args = args[0], args[1:]
	case len(args) > 0 && args[0] != "-h" && args[0] != "--help" && args[0] != "-help":
		return nil, &flagenv.UsageError{Err: fmt.Errorf("unknown action %q: want status, pause, resume, resnapshot, dlq list, dlq replay or teardown", args[0])}
	}
	fs := flagenv.New("tributaryctl", usage)
	fs.String(&c.Brokers, "kafka-brokers", "TRIBUTARY_KAFKA_BROKERS", "", "comma-separated Kafka seed brokers (required)")
	kafkaconn.AddFlags(fs, &c.Kafka)
	fs.String(&c.DLQTopic, "dlq-topic", "TRIBUTARY_DLQ_TOPIC", "tributary.dlq", "the loaders' dead-letter topic")
	fs.String(&c.TablesFile, "tables", "TRIBUTARY_TABLES", "", "table config JSON file (required)")
	fs.String(&c.Reason, "reason", "", "", "dlq: only dead letters of this reason (decode, convert, toast_without_base, ...); pause: why, shown with the pause in /v1/shards and the loaders' log")
	fs.String(&c.Table, "table", "", "", "dlq: only dead letters of this table; pause, resume, resnapshot: the table (required)")
	fs.Int(&c.Shard, "shard", "", -1, "resnapshot: the shard's number (required)")
	fs.String(&c.Where, "where", "", "", "resnapshot: copy only the rows matching this PostgreSQL predicate")
	fs.Secret(&c.DSN, "TRIBUTARY_PG_DSN")
	fs.BoolVar(&c.Status, "status", false, "resnapshot: show the shard's running and last resnapshot, ask for nothing")
	fs.BoolVar(&c.NoWait, "no-wait", false, "resnapshot: return once the request is written, without following it")
	fs.Duration(&c.Progress, "progress-interval", "", 2*time.Second, "resnapshot: how often progress is shown")
	fs.BoolVar(&c.JSON, "json", false, "status, dlq list: write JSON on stdout")
	fs.BoolVar(&c.Yes, "yes", false, "dlq replay: do it (without: a dry run)")
	fs.String(&c.LogLevel, "log-level", "TRIBUTARY_LOG_LEVEL", "info", "log level on stderr: debug, info, warn, error")
	fs.String(&c.APIURL, "api", "TRIBUTARY_API_URL", "http://127.0.0.1:8080", "status: the API's base URL")
	fs.Secret(&c.APIToken, "TRIBUTARY_API_TOKEN")
	fs.String(&c.FleetFile, "fleet", "TRIBUTARY_FLEET", "", "teardown: fleet file, the shards whose slots and publications go (required); resnapshot: where the shard's reader DSN comes from (else $TRIBUTARY_PG_DSN)")
	fs.String(&c.Slot, "slot", "TRIBUTARY_SLOT", "", "teardown, resnapshot: the readers' slot name, {shard} standing for the shard's number, as cdc-reader's --slot (default tributary_shard_{shard})")
	fs.String(&c.Publication, "publication", "TRIBUTARY_PUBLICATION", "tributary_pub", "teardown: the readers' publication")
	fs.String(&c.StateTopic, "state-topic", "TRIBUTARY_STATE_TOPIC", "tributary.reader-state", "teardown, resnapshot: the readers' state topic")
	fs.String(&c.Group, "group", "TRIBUTARY_LOADER_GROUP", "tributary-loader", "teardown: the loaders' consumer group")
	fs.String(&c.ClickHouse.Addr, "clickhouse-addr", "TRIBUTARY_CLICKHOUSE_ADDR", "", "teardown, pause, resume: ClickHouse native protocol host:port")
	fs.String(&c.Cluster, "clickhouse-cluster", "TRIBUTARY_CLICKHOUSE_CLUSTER", "",
		"teardown: the loaders' ClickHouse cluster (their --clickhouse-cluster): the database is dropped on every node of it, each of which must answer (empty: one server)")
	fs.String(&c.Database, "clickhouse-db", "TRIBUTARY_CLICKHOUSE_DB", "tributary", "teardown: the ClickHouse database to drop; pause, resume: the loaders' database")
	fs.String(&c.ClickHouse.Username, "clickhouse-user", "TRIBUTARY_CLICKHOUSE_USER", "default", "teardown: a ClickHouse user that may drop the database; pause, resume: one that may insert into it")
	fs.Secret(&c.ClickHouse.Password, "TRIBUTARY_CLICKHOUSE_PASSWORD")
	var passFile string
	chstore.AddPasswordFileFlag(fs, &passFile)
	chstore.AddTLSFlags(fs, &c.ClickHouse.TLS)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if c.Action == "" {
		return nil, &flagenv.UsageError{Err: errors.New("no action: want status, pause, resume, resnapshot, dlq list, dlq replay or teardown")}
	}
	var err error
	if c.ClickHouse.Password, err = chstore.Password(c.ClickHouse.Password, passFile); err != nil {
		return nil, err
	}
	if c.Action == "resnapshot" && c.Shard >= 0 {
		c.Slot = strings.ReplaceAll(cmp.Or(c.Slot, "tributary_shard_{shard}"), "{shard}", strconv.Itoa(c.Shard))
	}
	return &c, c.Validate()
}

// Validate reports every missing setting at once.
func (c *Config) Validate() error {
	var errs []error
	if c.Action == "status" {
		if c.APIURL == "" {
			errs = append(errs, errors.New("status: --api (or $TRIBUTARY_API_URL) must not be empty"))
		}
		return errors.Join(errs...)
	}
	if len(flagenv.List(c.Brokers)) == 0 {
		errs = append(errs, errors.New("--kafka-brokers (or $TRIBUTARY_KAFKA_BROKERS) is required"))
	}
	errs = append(errs, c.Kafka.Validate()...)
	if c.TablesFile == "" {
		errs = append(errs, errors.New("--tables (or $TRIBUTARY_TABLES) is required"))
	}
	if c.DLQTopic == "" {
		errs = append(errs, errors.New("--dlq-topic must not be empty"))
	}
	if c.Action == "pause" || c.Action == "resume" {
		if c.Table == "" {
			errs = append(errs, fmt.Errorf("%s: --table is required", c.Action))
		}
		if c.ClickHouse.Addr == "" {
			errs = append(errs, fmt.Errorf("%s: --clickhouse-addr (or $TRIBUTARY_CLICKHOUSE_ADDR) is required: the pause is recorded in the loaders' database", c.Action))
		}
		errs = append(errs, c.ClickHouse.TLS.Validate()...)
	}
	if c.Action == "resnapshot" {
		if c.Shard < 0 {
			errs = append(errs, errors.New("resnapshot: --shard is required (a shard number of the fleet)"))
		}
		if c.Table == "" && !c.Status {
			errs = append(errs, errors.New("resnapshot: --table is required"))
		}
		if c.FleetFile == "" && c.DSN == "" {
			errs = append(errs, errors.New("resnapshot: --fleet (or $TRIBUTARY_FLEET) or $TRIBUTARY_PG_DSN is required: the shard's reader DSN"))
		}
		if c.StateTopic == "" {
			errs = append(errs, errors.New("resnapshot: --state-topic must not be empty"))
		}
		if c.Progress <= 0 {
			errs = append(errs, errors.New("resnapshot: --progress-interval must be positive"))
		}
	} else if c.Where != "" || c.Status || c.NoWait {
		errs = append(errs, fmt.Errorf("%s: --where, --status and --no-wait are resnapshot's", c.Action))
	}
	if c.Action == "teardown" {
		if c.FleetFile == "" {
			errs = append(errs, errors.New("teardown: --fleet (or $TRIBUTARY_FLEET) is required: the shards whose slots and publications go"))
		}
		if c.ClickHouse.Addr == "" {
			errs = append(errs, errors.New("teardown: --clickhouse-addr (or $TRIBUTARY_CLICKHOUSE_ADDR) is required"))
		}
		if c.Database == "" || c.Publication == "" || c.StateTopic == "" || c.Group == "" {
			errs = append(errs, errors.New("teardown: --clickhouse-db, --publication, --state-topic and --group must not be empty"))
		}
		errs = append(errs, c.ClickHouse.TLS.Validate()...)
	}
	return errors.Join(errs...)
}

func main() { flagenv.Main("tributaryctl", parse, run) }

func run(ctx context.Context, c *Config) error {
	log, err := telemetry.Logger("text", c.LogLevel)
	if err != nil {
		return err
	}
	if c.Action == "status" {
		return status(ctx, c)
	}
	cfg, err := tables.Load(c.TablesFile)
	if err != nil {
		return err
	}
	if c.Table != "" && c.Action != "resnapshot" {
		if _, ok := cfg.ByName(c.Table); !ok {
			return fmt.Errorf("--table %q: no such table in %s", c.Table, c.TablesFile)
		}
	}
	kafkaOpts, err := c.Kafka.ClientOpts()
	if err != nil {
		return err
	}
	brokers := flagenv.List(c.Brokers)
	cl, err := admin.NewProducer(brokers, kafkaOpts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := kafkaconn.Check(ctx, cl, brokers, c.Kafka); err != nil {
		return err
	}
	switch c.Action {
	case "teardown":
		return teardown(ctx, c, cfg, cl, log)
	case "pause", "resume":
		return pause(ctx, c, cfg, cl, log)
	case "resnapshot":
		return resnapshot(ctx, c, cfg, cl, log)
	}
	dead, err := admin.ReadDLQ(ctx, cl, c.DLQTopic, cfg, admin.Filter{Reason: c.Reason, Table: c.Table})
	if err != nil {
		return err
	}
	switch {
	case c.Action == "dlq list" && c.JSON:
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(dead)
	case c.Action == "dlq list", !c.Yes:
		if err := admin.WriteDeadLetters(os.Stdout, dead); err != nil {
			return err
		}
		if c.Action == "dlq replay" {
			fmt.Println("dry run: nothing replayed; run again with --yes to replay these")
		}
		return nil
	}
	n, err := admin.Replay(ctx, cl, dead, log)
	if err != nil {
		return err
	}
	log.Info("dlq replay done", slog.Int("replayed", n), slog.Int("skipped", len(dead)-n))
	return nil
}

// teardown plans, shows the plan, asks (or takes --yes), and removes.
func teardown(ctx context.Context, c *Config, cfg *tables.Config, cl *kgo.Client, log *slog.Logger) error {
	f, err := fleet.Load(c.FleetFile)
	if err != nil {
		return err
	}
	shards, err := f.Resolve(os.Getenv)
	if err != nil {
		return err
	}
	ch, err := chstore.Dial(ctx, c.ClickHouse)
	if err != nil {
		return err
	}
	defer ch.Close()
	d := &admin.Deployment{Shards: shards, Slot: c.Slot, Publication: c.Publication,
		Topics: append(cfg.Topics(), c.StateTopic, c.DLQTopic), Group: c.Group,
		Kafka: cl, ClickHouse: ch, Database: c.Database}
	if c.Cluster != "" {
		if d.ClickHouseNodes, err = chstore.DialNodes(ctx, c.ClickHouse, c.Cluster); err != nil {
			return err
		}
		defer chstore.CloseNodes(d.ClickHouseNodes)
	}
	plan, err := admin.PlanTeardown(ctx, d)
	if err != nil {
		return err
	}
	admin.WritePlan(os.Stdout, plan)
	switch {
	case len(plan.Busy) > 0:
		return fmt.Errorf("teardown refused: %w; nothing was removed", admin.ErrBusy)
	case plan.Empty():
		return nil
	case !c.Yes && !isTerminal(os.Stdin):
		fmt.Println("dry run: nothing removed; run again with --yes to remove these")
		return nil
	case !c.Yes:
		fmt.Printf("type the ClickHouse database's name (%s) to remove all of the above: ", c.Database)
		answer, _ := bufio.NewReader(os.Stdin).ReadString('\n')
		if strings.TrimSpace(answer) != c.Database {
			return errors.New("teardown not confirmed; nothing was removed")
		}
	}
	if err := admin.Teardown(ctx, d, plan, log); err != nil {
		return err
	}
	log.Info("teardown done")
	return nil
}

// isTerminal reports whether f is a terminal (it answers the terminal
// ioctl; /dev/null, a character device too, does not).
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// status prints GET /v1/status as text, or as it came with --json.
func status(ctx context.Context, c *Config) error {
	st, body, err := admin.FetchStatus(ctx, &http.Client{Timeout: 30 * time.Second}, c.APIURL, c.APIToken)
	if err != nil {
		return err
	}
	if c.JSON {
		_, err = os.Stdout.Write(append(body, '\n'))
		return err //nolint:wrapcheck // stdout's error
	}
	return admin.WriteStatus(os.Stdout, st)
}

// pause records a pause or resume of --table for the loaders.
func pause(ctx context.Context, c *Config, cfg *tables.Config, cl *kgo.Client, log *slog.Logger) error {
	t, ok := cfg.ByName(c.Table)
	if !ok {
		return fmt.Errorf("--table %q: no such table in %s", c.Table, c.TablesFile)
	}
	ch, err := chstore.Dial(ctx, c.ClickHouse)
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := chstore.EnsurePaused(ctx, ch, c.Database); err != nil {
		return err
	}
	all, err := chstore.Pauses(ctx, ch, c.Database)
	if err != nil {
		return err
	}
	cur, want := all[t.Name], c.Action == "pause"
	if cur.Paused == want {
		if want {
			fmt.Printf("%s is already paused, since %s by %s: %s\n", t.Name, cur.At.UTC().Format(time.RFC3339), cur.By, cur.Reason)
		} else {
			fmt.Printf("%s is not paused: nothing to resume\n", t.Name)
		}
		return nil
	}
	by := "unknown"
	if u, err := user.Current(); err == nil {
		by = u.Username
	}
	if err := chstore.WritePause(ctx, ch, c.Database, chstore.Pause{Table: t.Name, Paused: want, Reason: c.Reason, By: by, At: time.Now()}); err != nil {
		return err
	}
	log.Info("table "+c.Action+"d", slog.String("table", t.Name), slog.String("by", by), slog.String("reason", c.Reason))
	if !want {
		fmt.Printf("%s resumed: the loaders apply it again from where they stopped, within seconds\n", t.Name)
		return nil
	}
	retention := "the broker's default"
	if rc, err := kadm.NewClient(cl).DescribeTopicConfigs(ctx, t.Topic); err == nil {
		if r, err := rc.On(t.Topic, nil); err == nil {
			for _, kv := range r.Configs {
				if kv.Key == "retention.ms" && kv.Value != nil {
					if ms, err := strconv.ParseInt(*kv.Value, 10, 64); err == nil && ms > 0 {
						retention = (time.Duration(ms) * time.Millisecond).String()
					} else if ms < 0 {
						retention = "unlimited"
					}
				}
			}
		}
	}
	fmt.Printf("%s paused: the loaders stop applying it within seconds; its changes wait in topic %s, which keeps them for %s (retention.ms): resume before then\n",
		t.Name, t.Topic, retention)
	return nil
}

// resnapshot runs the resnapshot action.
func resnapshot(ctx context.Context, c *Config, cfg *tables.Config, cl *kgo.Client, log *slog.Logger) error {
	slot := c.Slot
	kafkaOpts, err := c.Kafka.ClientOpts()
	if err != nil {
		return err
	}
	target := admin.ResnapshotTarget{Shard: c.Shard, DSN: c.DSN, Slot: slot, StateTopic: c.StateTopic, Brokers: flagenv.List(c.Brokers), KafkaOpts: kafkaOpts}
	if c.FleetFile != "" {
		fl, err := fleet.Load(c.FleetFile)
		if err != nil {
			return err
		}
		if target.DSN, err = fl.ReaderDSN(c.Shard, os.Getenv); err != nil {
			return fmt.Errorf("%w: %w", admin.ErrResnapshotRefused, err)
		}
	}
	if c.Status {
		st, err := admin.ResnapshotStatus(ctx, cl, target)
		if err != nil {
			return err
		}
		if c.JSON {
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(st)
		}
		switch {
		case !st.Found:
			fmt.Printf("shard %d: no reader state for slot %s in %s\n", c.Shard, slot, c.StateTopic)
		case st.Active == nil && st.Last == nil:
			fmt.Printf("shard %d: no resnapshot ever ran (epoch %d)\n", c.Shard, st.Epoch)
		}
		if st.Active != nil {
			fmt.Println("running:", admin.ProgressLine(c.Shard, st.Active, 0))
		}
		if st.Last != nil {
			fmt.Println("last:   ", admin.ProgressLine(c.Shard, st.Last, 0))
		}
		return nil
	}
	t, ok := cfg.ByName(c.Table)
	if !ok {
		return fmt.Errorf("%w: --table %q: no such table in %s (tables: %s)", admin.ErrResnapshotRefused, c.Table, c.TablesFile, strings.Join(tableNames(cfg), ", "))
	}
	id, err := admin.RequestResnapshot(ctx, cl, target, *t, c.Where, log)
	if err != nil {
		return err
	}
	if c.NoWait {
		fmt.Printf("resnapshot %s requested; follow it with: tributaryctl resnapshot --status --shard %d\n", id, c.Shard)
		return nil
	}
	_, err = admin.WaitResnapshot(ctx, cl, target, id, os.Stderr, c.Progress, time.Minute)
	return err
}

func tableNames(cfg *tables.Config) []string {
	out := make([]string, len(cfg.Tables))
	for i, t := range cfg.Tables {
		out[i] = t.Name
	}
	return out
}
