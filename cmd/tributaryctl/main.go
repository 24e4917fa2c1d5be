// Command tributaryctl is the operator's command: it lists and replays
// dead letters and asks a reader for a resnapshot of one table. See
// internal/admin for what each action does and refuses.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/admin"
	"github.com/tributary/tributary/internal/flagenv"
	"github.com/tributary/tributary/internal/fleet"
	"github.com/tributary/tributary/internal/tables"
	"github.com/tributary/tributary/internal/telemetry"
)

const usage = `tributaryctl — operator actions on a deployment.

  tributaryctl dlq list   [flags]   the dead-letter topic's records, with reasons
  tributaryctl dlq replay [flags]   re-produce them to their source topics
  tributaryctl resnapshot --shard N --table T [--where SQL] [flags]
                                    copy one table of one shard again while it streams
  tributaryctl resnapshot --status --shard N [flags]
                                    the shard's running and last resnapshot

dlq replay is a dry run unless --yes: it prints what it would replay.
Replay once the cause is fixed (see docs/runbook.md "Dead letters"): the
loader keeps the newest version of each row, so replaying twice, or
replaying a change older than the row's, changes nothing. --reason and
--table choose which dead letters; a record of a topic no table reads is
not replayed. Every action is logged on stderr.

Example:
  set -a; . .stack/stack.env; set +a
  tributaryctl dlq list --tables deploy/local/tables.json
  tributaryctl dlq replay --tables deploy/local/tables.json --reason convert --yes

resnapshot checks the table and the --where predicate on the shard
(PostgreSQL plans the query, reads nothing), refuses while another
resnapshot of the shard runs, then writes the request into the shard's
WAL, where its reader picks it up; it shows rows, rate and ETA until the
copy is done (--no-wait: return once asked). The shard's DSN is its
reader's, from --fleet or $TRIBUTARY_PG_DSN. See docs/runbook.md, "One
table on one shard is wrong".
  tributaryctl resnapshot --fleet deploy/local/fleet.json --tables deploy/local/tables.json \
      --shard 1 --table documents --where "workspace_id = 7"`

// Config is tributaryctl's whole configuration.
type Config struct {
	Action     string
	Brokers    string
	DLQTopic   string
	TablesFile string
	Reason     string
	Table      string
	JSON       bool
	Yes        bool
	LogLevel   string

	// resnapshot
	Shard      int
	Where      string
	FleetFile  string
	DSN        string // $TRIBUTARY_PG_DSN, when no fleet
	Slot       string
	StateTopic string
	Status     bool
	NoWait     bool
	Progress   time.Duration
}

func parse(args []string) (*Config, error) {
	var c Config
	switch {
	case len(args) >= 2 && args[0] == "dlq" && (args[1] == "list" || args[1] == "replay"):
		c.Action, args = "dlq "+args[1], args[2:]
	case len(args) >= 1 && args[0] == "resnapshot":
		c.Action, args = "resnapshot", args[1:]
	case len(args) > 0 && args[0] != "-h" && args[0] != "--help" && args[0] != "-help":
		return nil, &flagenv.UsageError{Err: fmt.Errorf("unknown action %q: want dlq list, dlq replay or resnapshot", args[0])}
	}
	fs := flagenv.New("tributaryctl", usage)
	fs.String(&c.Brokers, "kafka-brokers", "TRIBUTARY_KAFKA_BROKERS", "", "comma-separated Kafka seed brokers (required)")
	fs.String(&c.DLQTopic, "dlq-topic", "TRIBUTARY_DLQ_TOPIC", "tributary.dlq", "the loaders' dead-letter topic")
	fs.String(&c.TablesFile, "tables", "TRIBUTARY_TABLES", "", "table config JSON file (required)")
	fs.String(&c.Reason, "reason", "", "", "dlq: only dead letters of this reason (decode, convert, toast_without_base, ...)")
	fs.String(&c.Table, "table", "", "", "dlq: only dead letters of this table; resnapshot: the table to copy again (required)")
	fs.Int(&c.Shard, "shard", "", -1, "resnapshot: the shard's number (required)")
	fs.String(&c.Where, "where", "", "", "resnapshot: copy only the rows matching this PostgreSQL predicate")
	fs.String(&c.FleetFile, "fleet", "TRIBUTARY_FLEET", "", "resnapshot: fleet file, where the shard's reader DSN comes from (else $TRIBUTARY_PG_DSN)")
	fs.Secret(&c.DSN, "TRIBUTARY_PG_DSN")
	fs.String(&c.Slot, "slot", "TRIBUTARY_SLOT", "", "resnapshot: the shard reader's slot (default tributary_shard_<N>, as cdc-reader's)")
	fs.String(&c.StateTopic, "state-topic", "TRIBUTARY_STATE_TOPIC", "tributary.reader-state", "resnapshot: the readers' state topic")
	fs.BoolVar(&c.Status, "status", false, "resnapshot: show the shard's running and last resnapshot, ask for nothing")
	fs.BoolVar(&c.NoWait, "no-wait", false, "resnapshot: return once the request is written, without following it")
	fs.Duration(&c.Progress, "progress-interval", "", 2*time.Second, "resnapshot: how often progress is shown")
	fs.BoolVar(&c.JSON, "json", false, "dlq list: write JSON on stdout")
	fs.BoolVar(&c.Yes, "yes", false, "dlq replay: do it (without: a dry run)")
	fs.String(&c.LogLevel, "log-level", "TRIBUTARY_LOG_LEVEL", "info", "log level on stderr: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if c.Action == "" {
		return nil, &flagenv.UsageError{Err: errors.New("no action: want dlq list, dlq replay or resnapshot")}
	}
	if c.Slot == "" && c.Shard >= 0 {
		c.Slot = fmt.Sprintf("tributary_shard_%d", c.Shard)
	}
	return &c, c.Validate()
}

// Validate reports every missing setting at once.
func (c *Config) Validate() error {
	var errs []error
	if len(flagenv.List(c.Brokers)) == 0 {
		errs = append(errs, errors.New("--kafka-brokers (or $TRIBUTARY_KAFKA_BROKERS) is required"))
	}
	if c.TablesFile == "" {
		errs = append(errs, errors.New("--tables (or $TRIBUTARY_TABLES) is required"))
	}
	if c.DLQTopic == "" {
		errs = append(errs, errors.New("--dlq-topic must not be empty"))
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
	return errors.Join(errs...)
}

func main() { flagenv.Main("tributaryctl", parse, run) }

func run(ctx context.Context, c *Config) error {
	log, err := telemetry.Logger("text", c.LogLevel)
	if err != nil {
		return err
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
	cl, err := admin.NewProducer(flagenv.List(c.Brokers))
	if err != nil {
		return err
	}
	defer cl.Close()
	if c.Action == "resnapshot" {
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

// resnapshot runs the resnapshot action.
func resnapshot(ctx context.Context, c *Config, cfg *tables.Config, cl *kgo.Client, log *slog.Logger) error {
	target := admin.ResnapshotTarget{Shard: c.Shard, DSN: c.DSN, Slot: c.Slot, StateTopic: c.StateTopic, Brokers: flagenv.List(c.Brokers)}
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
			fmt.Printf("shard %d: no reader state for slot %s in %s\n", c.Shard, c.Slot, c.StateTopic)
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
