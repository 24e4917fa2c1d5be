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
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sys/unix"

	"github.com/tributary/tributary/internal/admin"
	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/flagenv"
	"github.com/tributary/tributary/internal/fleet"
	"github.com/tributary/tributary/internal/kafkaconn"
	"github.com/tributary/tributary/internal/progress"
	"github.com/tributary/tributary/internal/reader"
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

Each action takes its own flags: "tributaryctl ACTION --help" lists them
and says what the action does; a flag of another action is refused.
Every action is logged on stderr.

Example:
  set -a; . .stack/stack.env; set +a
  tributaryctl status --api http://127.0.0.1:8080
  tributaryctl pause --tables deploy/local/tables.json --table invoices --reason "backfill on shard 2"
  tributaryctl dlq list --tables deploy/local/tables.json
  tributaryctl dlq replay --tables deploy/local/tables.json --reason convert --yes
  tributaryctl resnapshot --fleet "$TRIBUTARY_HOME/fleet.json" --tables deploy/local/tables.json \
      --shard 1 --table documents --where "workspace_id = 7"
  tributaryctl teardown --tables deploy/local/tables.json --fleet "$TRIBUTARY_HOME/fleet.json"`

// action is one of tributaryctl's actions: what its --help says and the
// flags it takes (the others' are refused).
type action struct {
	name, usage string
	flags       func(fs *flagenv.Set, c *Config)
}

const pauseUsage = `pause writes a pause record in ClickHouse that every loader reads within
2 s: the table's topic is no longer applied nor committed, /v1/shards lists
it under stopped_tables (reason: paused) and leaves it out of the fleet's
freshness. The readers keep streaming it into Kafka, so their slots stay
confirmed and WAL does not pile up on the shards; the topic's retention
bounds how long a pause may last (pause prints it). resume continues from
the committed offsets. Both are idempotent.`

const dlqUsage = `dlq replay is a dry run unless --yes: it prints what it would replay.
Replay once the cause is fixed (see docs/runbook.md "Dead letters"): the
loader keeps the newest version of each row, so replaying twice, or
replaying a change older than the row's, changes nothing. --reason and
--table choose which dead letters; a record of a topic no table reads is
not replayed.`

// actions are tributaryctl's actions, as the command line names them.
var actions = []action{
	{"status", `tributaryctl status [flags] — the status page's overview (GET /v1/status), as text or --json.

status asks the API (--api, a token from $TRIBUTARY_API_TOKEN when the API
has tokens): per shard its freshness and reader state, stopped tables, the
loaders' lag and dead letters, open anomalies. Reader and loader state need
the API's --component-metrics.`, statusFlags},
	{"pause", "tributaryctl pause --table T [--reason WHY] [flags] — stop applying a table (its changes wait in Kafka).\n\n" + pauseUsage,
		func(fs *flagenv.Set, c *Config) { pauseFlags(fs, c, "pause") }},
	{"resume", "tributaryctl resume --table T [flags] — apply a paused table again, from where it was paused.\n\n" + pauseUsage,
		func(fs *flagenv.Set, c *Config) { pauseFlags(fs, c, "resume") }},
	{"dlq list", "tributaryctl dlq list [flags] — the dead-letter topic's records, with reasons.\n\n" + dlqUsage,
		func(fs *flagenv.Set, c *Config) {
			dlqFlags(fs, c)
			fs.BoolVar(&c.JSON, "json", false, "write JSON on stdout")
		}},
	{"dlq replay", "tributaryctl dlq replay [--yes] [flags] — re-produce dead letters to their source topics.\n\n" + dlqUsage,
		func(fs *flagenv.Set, c *Config) {
			dlqFlags(fs, c)
			fs.BoolVar(&c.Yes, "yes", false, "do it (without: a dry run)")
		}},
	{"resnapshot", `tributaryctl resnapshot --shard N --table T [--where SQL] [flags] — copy one table of one shard again while it streams.
tributaryctl resnapshot --status --shard N [flags] — the shard's running and last resnapshot.

resnapshot checks the table and the --where predicate on the shard
(PostgreSQL plans the query, reads nothing), refuses while another
resnapshot of the same table on the shard runs (other tables' may run at
once), then writes the request into the shard's WAL, where its reader
picks it up; it shows rows, rate and ETA until the copy is done (--no-wait:
return once asked: the reader finishes it alone, also after a restart).
Without --where the loaders then delete the rows the copy did not
contain; with --where the reader sweeps (its --clickhouse-addr): the
table's rows of the shard in ClickHouse that the copy skipped are checked
on the shard, and those it no longer has are deleted; the resnapshot is
done once swept. --sweep runs a sweep again from here, after the shard's
last resnapshot of --table (never needed; it needs --clickhouse-addr, a
read-only user as the API's is enough).
The shard's DSN is its reader's, from --fleet or $TRIBUTARY_PG_DSN. See
docs/runbook.md, "One table on one shard is wrong".`, resnapshotFlags},
	{"teardown", `tributaryctl teardown [--yes] [flags] — remove the deployment's slots, publications, topics, consumer group and ClickHouse database.

teardown lists what exists first and asks (type the ClickHouse database's
name) unless --yes; without a terminal and without --yes it is a dry run.
It refuses while anything runs: a reader's slot in use, a loader in the
consumer group. Stop the readers, loaders and APIs first. It needs the
fleet file (shards' DSNs: a role that may drop slots and publications),
the same --slot/--publication/--state-topic/--group names the components
run with, and a ClickHouse user that may drop the database. With
--clickhouse-cluster the database is looked for and dropped on every node
of the cluster, and a node that does not answer stops the teardown before
anything is removed. Run twice, the second finds nothing to remove.`, teardownFlags},
}

// Config is tributaryctl's whole configuration; each action sets only
// the fields of its flags.
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
	Logging    telemetry.Logging

	// status
	APIURL   string
	APIToken string

	// resnapshot
	Shard    int
	Where    string
	DSN      string // $TRIBUTARY_PG_DSN, when no fleet
	Status   bool
	NoWait   bool
	Sweep    bool
	Progress time.Duration

	// teardown (and resnapshot: FleetFile, Slot, StateTopic)
	FleetFile   string
	Slot        string
	Publication string
	StateTopic  string
	Group       string
	// ClickHouse is the loaders' database (pause, resume) or the one
	// teardown drops.
	ClickHouse chstore.Conn
	// Cluster is the loaders' ClickHouse cluster ("" for one server).
	Cluster string
}

// The flag groups the actions share.

func logFlag(fs *flagenv.Set, c *Config) {
	c.Logging.AddFlags(fs, "info")
}

// kafkaFlags are every action's but status's: the deployment's Kafka and
// tables.
func kafkaFlags(fs *flagenv.Set, c *Config) {
	kafkaconn.AddClientFlags(fs, &c.Brokers, &c.Kafka)
	fs.String(&c.TablesFile, "tables", "TRIBUTARY_TABLES", "", "table config JSON file (required)")
	logFlag(fs, c)
}

func statusFlags(fs *flagenv.Set, c *Config) {
	fs.String(&c.APIURL, "api", "TRIBUTARY_API_URL", "http://127.0.0.1:8080", "the API's base URL")
	fs.Secret(&c.APIToken, "TRIBUTARY_API_TOKEN")
	fs.BoolVar(&c.JSON, "json", false, "write GET /v1/status's JSON on stdout")
	logFlag(fs, c)
}

func pauseFlags(fs *flagenv.Set, c *Config, name string) {
	kafkaFlags(fs, c)
	fs.String(&c.Table, "table", "", "", "the table to "+name+" (required)")
	fs.String(&c.Reason, "reason", "", "", "why, written with the "+name+" (a pause shows it in /v1/shards) and logged by the loaders")
	chstore.AddFlags(fs, &c.ClickHouse, chstore.ConnUsage{Database: "the loaders' ClickHouse database",
		User: "a ClickHouse user that may insert into it"})
}

func dlqFlags(fs *flagenv.Set, c *Config) {
	kafkaFlags(fs, c)
	fs.String(&c.DLQTopic, "dlq-topic", "TRIBUTARY_DLQ_TOPIC", "tributary.dlq", "the loaders' dead-letter topic")
	fs.String(&c.Reason, "reason", "", "", "only dead letters of this reason (decode, convert, toast_without_base, ...)")
	fs.String(&c.Table, "table", "", "", "only dead letters of this table")
}

func resnapshotFlags(fs *flagenv.Set, c *Config) {
	kafkaFlags(fs, c)
	fs.Int(&c.Shard, "shard", "", -1, "the shard's number (required)")
	fs.String(&c.Table, "table", "", "", "the table to copy again (required without --status)")
	fs.String(&c.Where, "where", "", "", "copy only the rows matching this PostgreSQL predicate")
	fs.Secret(&c.DSN, "TRIBUTARY_PG_DSN")
	fs.BoolVar(&c.Status, "status", false, "show the shard's running and last resnapshot, ask for nothing")
	fs.BoolVar(&c.NoWait, "no-wait", false, "return once the request is written, without following it (the reader copies, and sweeps, alone)")
	fs.BoolVar(&c.Sweep, "sweep", false, "only a sweep again, from here, after the shard's last resnapshot of --table: delete the rows the shard no longer has (the reader sweeps after each --where by itself)")
	fs.Duration(&c.Progress, "progress-interval", "", 2*time.Second, "how often progress is shown")
	fs.BoolVar(&c.JSON, "json", false, "with --status: write JSON on stdout")
	fs.String(&c.FleetFile, "fleet", "TRIBUTARY_FLEET", "", "where the shard's reader DSN comes from (else $TRIBUTARY_PG_DSN)")
	slotFlags(fs, c)
	chstore.AddFlags(fs, &c.ClickHouse, chstore.ConnUsage{Database: "the loaders' ClickHouse database (--sweep)",
		User: "a ClickHouse user that may read it (--sweep; a read-only user, readonly = 2, as the API's, is enough)"})
}

// slotFlags name the readers' slot and state topic, as cdc-reader's do.
func slotFlags(fs *flagenv.Set, c *Config) {
	fs.String(&c.Slot, "slot", "TRIBUTARY_SLOT", "", "the readers' slot name, {shard} standing for the shard's number, as cdc-reader's --slot (default tributary_shard_{shard})")
	fs.String(&c.StateTopic, "state-topic", "TRIBUTARY_STATE_TOPIC", "tributary.reader-state", "the readers' state topic")
}

func teardownFlags(fs *flagenv.Set, c *Config) {
	kafkaFlags(fs, c)
	fs.String(&c.FleetFile, "fleet", "TRIBUTARY_FLEET", "", "fleet file, the shards whose slots and publications go (required)")
	slotFlags(fs, c)
	fs.String(&c.Publication, "publication", "TRIBUTARY_PUBLICATION", "tributary_pub", "the readers' publication")
	fs.String(&c.Group, "group", "TRIBUTARY_LOADER_GROUP", "tributary-loader", "the loaders' consumer group")
	fs.String(&c.DLQTopic, "dlq-topic", "TRIBUTARY_DLQ_TOPIC", "tributary.dlq", "the loaders' dead-letter topic")
	fs.BoolVar(&c.Yes, "yes", false, "remove without asking")
	chstore.AddFlags(fs, &c.ClickHouse, chstore.ConnUsage{Database: "the ClickHouse database to drop",
		User: "a ClickHouse user that may drop the database"})
	fs.String(&c.Cluster, "clickhouse-cluster", "TRIBUTARY_CLICKHOUSE_CLUSTER", "",
		"the loaders' ClickHouse cluster (their --clickhouse-cluster): the database is dropped on every node of it, each of which must answer (empty: one server)")
	chstore.AddNodeAddrsFlag(fs, &c.ClickHouse.NodeAddrs)
}

// errNoAction is the answer to a command line without an action.
var errNoAction = errors.New("no action: want status, pause, resume, resnapshot, dlq list, dlq replay or teardown")

func parse(args []string) (*Config, error) {
	var c Config
	act, args, err := actionOf(args)
	if err != nil {
		return nil, err
	}
	c.Action = act.name
	fs := flagenv.New("tributaryctl "+act.name, act.usage)
	act.flags(fs, &c)
	if err := foreignFlag(act, fs, args); err != nil {
		return nil, err
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if err := c.ClickHouse.ReadPassword(); err != nil {
		return nil, err
	}
	if c.Action == "resnapshot" && c.Shard >= 0 {
		c.Slot = strings.ReplaceAll(cmp.Or(c.Slot, "tributary_shard_{shard}"), "{shard}", strconv.Itoa(c.Shard))
	}
	return &c, c.Validate()
}

// actionOf finds the action args start with and returns the rest. Without
// one, --help shows the actions (flag.ErrHelp) and anything else is
// refused.
func actionOf(args []string) (action, []string, error) {
	for _, a := range actions {
		words := strings.Fields(a.name)
		if len(args) >= len(words) && slices.Equal(args[:len(words)], words) {
			return a, args[len(words):], nil
		}
	}
	switch {
	case len(args) == 0:
		return action{}, nil, &flagenv.UsageError{Err: errNoAction}
	case args[0] == "-h" || args[0] == "--help" || args[0] == "-help":
		fmt.Fprintln(os.Stderr, usage)
		return action{}, nil, flag.ErrHelp
	case args[0] == "dlq":
		return action{}, nil, &flagenv.UsageError{Err: errors.New(`dlq: want "dlq list" or "dlq replay"`)}
	case strings.HasPrefix(args[0], "-"):
		return action{}, nil, &flagenv.UsageError{Err: fmt.Errorf("%s before the action: %w", args[0], errNoAction)}
	}
	return action{}, nil, &flagenv.UsageError{Err: fmt.Errorf("unknown action %q: want status, pause, resume, resnapshot, dlq list, dlq replay or teardown", args[0])}
}

// foreignFlag refuses, before parsing, a flag act does not take but
// another action does, naming the actions that take it (an unknown flag
// is the parser's to refuse).
func foreignFlag(act action, fs *flagenv.Set, args []string) error {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			return nil // the parser stops here too
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if f := fs.Lookup(name); f != nil {
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !hasValue && !(ok && b.IsBoolFlag()) {
				i++ // its value
			}
			continue
		}
		var owners []string
		for _, o := range actions {
			ofs := flagenv.New(o.name, "")
			o.flags(ofs, &Config{})
			if ofs.Lookup(name) != nil {
				owners = append(owners, o.name+"'s")
			}
		}
		if len(owners) > 0 {
			return &flagenv.UsageError{Err: fmt.Errorf("%s does not take --%s: it is among the flags that are %s (tributaryctl %s --help lists %s's flags)",
				act.name, name, strings.Join(owners, " and "), act.name, act.name)}
		}
	}
	return nil
}

// Validate reports every missing setting at once.
func (c *Config) Validate() error {
	var errs []error
	errs = append(errs, c.Logging.Validate())
	if c.Action == "status" {
		if c.APIURL == "" {
			errs = append(errs, errors.New("status: --api (or $TRIBUTARY_API_URL) must not be empty"))
		}
		return errors.Join(errs...)
	}
	errs = append(errs, kafkaconn.ValidateClient(c.Brokers, c.Kafka)...)
	errs = append(errs, flagenv.Required(c.TablesFile, "tables", "TRIBUTARY_TABLES", ""))
	switch c.Action {
	case "dlq list", "dlq replay":
		if c.DLQTopic == "" {
			errs = append(errs, errors.New("--dlq-topic must not be empty"))
		}
	case "pause", "resume":
		if c.Table == "" {
			errs = append(errs, fmt.Errorf("%s: --table is required", c.Action))
		}
		if c.ClickHouse.Addr == "" {
			errs = append(errs, fmt.Errorf("%s: --clickhouse-addr (or $TRIBUTARY_CLICKHOUSE_ADDR) is required: the pause is recorded in the loaders' database", c.Action))
		}
		errs = append(errs, c.ClickHouse.TLS.Validate()...)
	case "resnapshot":
		errs = append(errs, c.validateResnapshot()...)
	case "teardown":
		if c.FleetFile == "" {
			errs = append(errs, errors.New("teardown: --fleet (or $TRIBUTARY_FLEET) is required: the shards whose slots and publications go"))
		}
		if c.ClickHouse.Addr == "" {
			errs = append(errs, errors.New("teardown: --clickhouse-addr (or $TRIBUTARY_CLICKHOUSE_ADDR) is required"))
		}
		if c.ClickHouse.Database == "" || c.Publication == "" || c.StateTopic == "" || c.Group == "" || c.DLQTopic == "" {
			errs = append(errs, errors.New("teardown: --clickhouse-db, --publication, --state-topic, --group and --dlq-topic must not be empty"))
		}
		errs = append(errs, c.ClickHouse.ValidateCluster(c.Cluster))
		errs = append(errs, c.ClickHouse.TLS.Validate()...)
	}
	return errors.Join(errs...)
}

// validateResnapshot reports what resnapshot misses.
func (c *Config) validateResnapshot() []error {
	var errs []error
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
	if c.Sweep && c.ClickHouse.Addr == "" {
		errs = append(errs, errors.New("resnapshot: --clickhouse-addr (or $TRIBUTARY_CLICKHOUSE_ADDR) is required with --sweep: the sweep reads the loaders' database"))
	}
	if c.Sweep && (c.Status || c.NoWait || c.Where != "") {
		errs = append(errs, errors.New("resnapshot: --sweep takes none of --status, --no-wait, --where (it sweeps after the last resnapshot, as it ran)"))
	}
	return append(errs, c.ClickHouse.TLS.Validate()...)
}

func main() { flagenv.Main("tributaryctl", parse, run) }

func run(ctx context.Context, c *Config) error {
	// On a terminal, progress bars stay below the log lines.
	var errOut io.Writer = os.Stderr
	if progress.IsTerminal(os.Stderr) {
		errOut = progress.NewTerminal(os.Stderr)
	}
	log, err := c.Logging.Logger(errOut)
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
		return resnapshot(ctx, c, cfg, cl, errOut, log)
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
	ch, err := chstore.Dial(ctx, c.ClickHouse.DialOptions())
	if err != nil {
		return err
	}
	defer ch.Close()
	d := &admin.Deployment{Shards: shards, Slot: c.Slot, Publication: c.Publication,
		Topics: append(cfg.Topics(), c.StateTopic, c.DLQTopic), Group: c.Group,
		Kafka: cl, ClickHouse: ch, Database: c.ClickHouse.Database}
	if c.Cluster != "" {
		if d.ClickHouseNodes, err = chstore.DialNodes(ctx, c.ClickHouse.DialOptions(), c.Cluster); err != nil {
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
		fmt.Printf("type the ClickHouse database's name (%s) to remove all of the above: ", c.ClickHouse.Database)
		answer, _ := bufio.NewReader(os.Stdin).ReadString('\n')
		if strings.TrimSpace(answer) != c.ClickHouse.Database {
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
	ch, err := chstore.Dial(ctx, c.ClickHouse.DialOptions())
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := chstore.EnsurePaused(ctx, ch, c.ClickHouse.Database); err != nil {
		return err
	}
	all, err := chstore.Pauses(ctx, ch, c.ClickHouse.Database)
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
	if err := chstore.WritePause(ctx, ch, c.ClickHouse.Database, chstore.Pause{Table: t.Name, Paused: want, Reason: c.Reason, By: by, At: time.Now()}); err != nil {
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
func resnapshot(ctx context.Context, c *Config, cfg *tables.Config, cl *kgo.Client, errOut io.Writer, log *slog.Logger) error {
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
		return resnapshotStatus(ctx, c, cl, target)
	}
	t, ok := cfg.ByName(c.Table)
	if !ok {
		return fmt.Errorf("%w: --table %q: no such table in %s (tables: %s)", admin.ErrResnapshotRefused, c.Table, c.TablesFile, strings.Join(tableNames(cfg), ", "))
	}
	if c.Sweep {
		st, err := admin.ResnapshotStatus(ctx, cl, target)
		if err != nil {
			return err
		}
		var last *reader.Resnapshot
		for _, a := range st.Ended {
			if a.Table == t.Name {
				last = a
			}
		}
		return sweep(ctx, c, target.DSN, *t, last, cl, errOut, log)
	}
	id, err := admin.RequestResnapshot(ctx, cl, target, *t, c.Where, log)
	if err != nil {
		return err
	}
	if c.NoWait {
		fmt.Printf("resnapshot %s requested; follow it with: tributaryctl resnapshot --status --shard %d\n", id, c.Shard)
		return nil
	}
	done, err := admin.WaitResnapshot(ctx, cl, target, id, errOut, c.Progress, time.Minute)
	if err != nil || done.Sweep == nil {
		return err // without a predicate, the loaders delete what the copy did not contain
	}
	fmt.Fprintf(errOut, "sweep shard %d table %s: %d rows checked, %d deleted (the shard no longer has them)\n", c.Shard, t.Name, done.Sweep.Checked, done.Sweep.Deleted)
	return nil
}

// resnapshotStatus prints the shard's running and last resnapshot.
func resnapshotStatus(ctx context.Context, c *Config, cl *kgo.Client, target admin.ResnapshotTarget) error {
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
		fmt.Printf("shard %d: no reader state for slot %s in %s\n", c.Shard, target.Slot, c.StateTopic)
	case st.Active == nil && st.Last == nil:
		fmt.Printf("shard %d: no resnapshot ever ran (epoch %d)\n", c.Shard, st.Epoch)
	}
	for _, a := range st.Running {
		fmt.Println("running:", admin.ProgressLine(c.Shard, a, 0))
	}
	for _, a := range st.Ended {
		fmt.Println("last:   ", admin.ProgressLine(c.Shard, a, 0))
	}
	return nil
}

// sweep deletes, after resnapshot a of table t, the rows of the shard
// that ClickHouse holds from before it and the shard no longer has
// (internal/admin, sweep.go).
func sweep(ctx context.Context, c *Config, dsn string, t tables.Table, a *reader.Resnapshot, cl *kgo.Client, errOut io.Writer, log *slog.Logger) error {
	parts, err := admin.TopicPartitions(ctx, cl, t.Topic)
	if err != nil {
		return err
	}
	sw, err := admin.SweepOf(t, c.Shard, a, parts)
	if err != nil {
		return err
	}
	store, err := chstore.OpenReadOnly(ctx, chstore.Options{Addr: c.ClickHouse.Addr, Username: c.ClickHouse.User,
		Password: c.ClickHouse.Password, TLS: c.ClickHouse.TLS, Database: c.ClickHouse.Database})
	if err != nil {
		return err
	}
	defer store.Close()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect shard %d: %w", c.Shard, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	res, err := admin.RunSweep(ctx, sw, store, conn, cl, errOut, c.Progress)
	if err != nil {
		return err
	}
	log.Info("resnapshot sweep done: rows the shard no longer has are deleted", slog.Int("shard", c.Shard),
		slog.String("table", t.Name), slog.Int("epoch", int(sw.Epoch)), slog.Int64("checked", res.Checked), slog.Int64("deleted", res.Deleted))
	fmt.Fprintf(errOut, "sweep shard %d table %s: %d rows checked, %d deleted (the shard no longer has them)\n", c.Shard, t.Name, res.Checked, res.Deleted)
	return nil
}

func tableNames(cfg *tables.Config) []string {
	out := make([]string, len(cfg.Tables))
	for i, t := range cfg.Tables {
		out[i] = t.Name
	}
	return out
}
