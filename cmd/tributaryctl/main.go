// Command tributaryctl is the operator's command: it lists and replays
// dead letters. See internal/admin for what each action does and refuses.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/tributary/tributary/internal/admin"
	"github.com/tributary/tributary/internal/flagenv"
	"github.com/tributary/tributary/internal/kafkaconn"
	"github.com/tributary/tributary/internal/tables"
	"github.com/tributary/tributary/internal/telemetry"
)

const usage = `tributaryctl — operator actions on a deployment.

  tributaryctl dlq list   [flags]   the dead-letter topic's records, with reasons
  tributaryctl dlq replay [flags]   re-produce them to their source topics

dlq replay is a dry run unless --yes: it prints what it would replay.
Replay once the cause is fixed (see docs/runbook.md "Dead letters"): the
loader keeps the newest version of each row, so replaying twice, or
replaying a change older than the row's, changes nothing. --reason and
--table choose which dead letters; a record of a topic no table reads is
not replayed. Every action is logged on stderr.

Example:
  set -a; . .stack/stack.env; set +a
  tributaryctl dlq list --tables deploy/local/tables.json
  tributaryctl dlq replay --tables deploy/local/tables.json --reason convert --yes`

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
}

func parse(args []string) (*Config, error) {
	var c Config
	if len(args) >= 2 && args[0] == "dlq" && (args[1] == "list" || args[1] == "replay") {
		c.Action, args = "dlq "+args[1], args[2:]
	} else if len(args) > 0 && args[0] != "-h" && args[0] != "--help" && args[0] != "-help" {
		return nil, &flagenv.UsageError{Err: fmt.Errorf("unknown action %q: want dlq list or dlq replay", args[0])}
	}
	fs := flagenv.New("tributaryctl", usage)
	fs.String(&c.Brokers, "kafka-brokers", "TRIBUTARY_KAFKA_BROKERS", "", "comma-separated Kafka seed brokers (required)")
	kafkaconn.AddFlags(fs, &c.Kafka)
	fs.String(&c.DLQTopic, "dlq-topic", "TRIBUTARY_DLQ_TOPIC", "tributary.dlq", "the loaders' dead-letter topic")
	fs.String(&c.TablesFile, "tables", "TRIBUTARY_TABLES", "", "table config JSON file (required)")
	fs.String(&c.Reason, "reason", "", "", "dlq: only dead letters of this reason (decode, convert, toast_without_base, ...)")
	fs.String(&c.Table, "table", "", "", "dlq: only dead letters of this table")
	fs.BoolVar(&c.JSON, "json", false, "dlq list: write JSON on stdout")
	fs.BoolVar(&c.Yes, "yes", false, "dlq replay: do it (without: a dry run)")
	fs.String(&c.LogLevel, "log-level", "TRIBUTARY_LOG_LEVEL", "info", "log level on stderr: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if c.Action == "" {
		return nil, &flagenv.UsageError{Err: errors.New("no action: want dlq list or dlq replay")}
	}
	return &c, c.Validate()
}

// Validate reports every missing setting at once.
func (c *Config) Validate() error {
	var errs []error
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
	if c.Table != "" {
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
