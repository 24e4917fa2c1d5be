// Command preflight checks the table config against every live shard of
// the fleet before the first start, and prints one line per problem. See
// internal/preflight for what is checked.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/tributary/tributary/internal/flagenv"
	"github.com/tributary/tributary/internal/fleet"
	"github.com/tributary/tributary/internal/preflight"
	"github.com/tributary/tributary/internal/tables"
	"github.com/tributary/tributary/internal/telemetry"
)

const usage = `preflight — check the table config against every live shard, before the first start.

For each shard of the fleet file (--fleet; or only --shard N), connected
with the reader's DSN (its reader_dsn_env / reader_dsn_file, else its
dsn_env / dsn_file), it checks, and prints one line per problem:
  - the server: wal_level = logical, a free replication slot and WAL
    sender, and the role has REPLICATION and may send heartbeats
    (pg_logical_emit_message);
  - every configured table: it exists, the role has USAGE on its schema and
    SELECT on it, every column has a type the pipeline maps, its replica
    identity carries the id column, and the publication (--publication)
    has it or the role may create or extend it;
  - the columns the config names (id_column, shard_key, search, revenue,
    moves): they exist, with types those features use (numeric(p,s)
    amounts, timestamps, text states, integer shard numbers, ...);
  - a sample of --sample ids per table decodes under its id_layout, and,
    for layouts that carry a shard (Snowflake, hash), most name this shard.
It only reads. docs/configuration.md "Before the first start" has the role recipe it checks.

Exit status: 0 no problems, 1 problems (listed on stdout), 2 usage or
config error (nothing was connected to).

Example:
  set -a; . .stack/stack.env; set +a
  preflight --tables deploy/local/tables.json     # --fleet from $TRIBUTARY_FLEET`

// Config is preflight's whole configuration.
type Config struct {
	Check      preflight.Config
	TablesFile string
	FleetFile  string
	Shard      int
	Logging    telemetry.Logging
}

func main() { flagenv.Main("preflight", parse, run) }

func parse(args []string) (*Config, error) {
	c := Config{}
	fs := flagenv.New("preflight", usage)
	fs.String(&c.TablesFile, "tables", "TRIBUTARY_TABLES", "", "table config JSON file (required)")
	fs.String(&c.FleetFile, "fleet", "TRIBUTARY_FLEET", "", "fleet file: the shards and where their DSNs come from (required)")
	fs.Int(&c.Shard, "shard", "", -1, "check only the fleet's shard with this number (default: every shard)")
	fs.String(&c.Check.Publication, "publication", "TRIBUTARY_PUBLICATION", "tributary_pub", "the readers' publication")
	fs.Int(&c.Check.Sample, "sample", "TRIBUTARY_PREFLIGHT_SAMPLE", preflight.DefaultSample, "ids decoded per table and shard")
	fs.Duration(&c.Check.Timeout, "timeout", "TRIBUTARY_PREFLIGHT_TIMEOUT", time.Minute, "bound of each shard's check")
	c.Logging.AddFlags(fs, "warn")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	var errs []error
	errs = append(errs, c.Logging.Validate())
	errs = append(errs, flagenv.Required(c.TablesFile, "tables", "TRIBUTARY_TABLES", ""))
	errs = append(errs, flagenv.Required(c.FleetFile, "fleet", "TRIBUTARY_FLEET", "the fleet file listing the shards"))
	if c.Check.Sample < 1 || c.Check.Timeout <= 0 {
		errs = append(errs, errors.New("--sample must be >= 1 and --timeout > 0"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, &flagenv.UsageError{Err: err}
	}
	var err error
	if c.Check.Tables, err = tables.Load(c.TablesFile); err != nil {
		return nil, &flagenv.UsageError{Err: err}
	}
	f, err := fleet.Load(c.FleetFile)
	if err != nil {
		return nil, &flagenv.UsageError{Err: err}
	}
	numbers := f.Numbers()
	if c.Shard >= 0 {
		if _, ok := f.Shard(c.Shard); !ok {
			return nil, &flagenv.UsageError{Err: fmt.Errorf("--shard %d: not in %s (shards %v)", c.Shard, c.FleetFile, numbers)}
		}
		numbers = []int{c.Shard}
	}
	for _, n := range numbers {
		s, _ := f.Shard(n)
		dsn, err := f.ReaderDSN(n, os.Getenv)
		if err != nil {
			errs = append(errs, err)
		}
		c.Check.Shards = append(c.Check.Shards, fleet.Endpoint{Number: n, Name: s.Name, DSN: dsn})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, &flagenv.UsageError{Err: err}
	}
	if c.Check.Log, err = c.Logging.Logger(os.Stderr); err != nil {
		return nil, &flagenv.UsageError{Err: err}
	}
	return &c, nil
}

// run checks and prints the problems; it fails when there are any.
func run(ctx context.Context, c *Config) error {
	problems, err := preflight.Run(ctx, c.Check)
	if err != nil {
		return err
	}
	for _, p := range problems {
		fmt.Println(p)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%d problems on %d shards checked", len(problems), len(c.Check.Shards))
	}
	fmt.Fprintf(os.Stderr, "preflight: %d shards, %d tables: no problems\n", len(c.Check.Shards), len(c.Check.Tables.Tables))
	return nil
}
