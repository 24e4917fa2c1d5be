// Command verify checks the pipeline end to end: every live row of every
// replicated table on every shard against what the API answers, and live
// row counts against ClickHouse. See internal/verify for what is compared
// and how values are normalized.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/flagenv"
	"github.com/tributary/tributary/internal/progress"
	"github.com/tributary/tributary/internal/ring"
	"github.com/tributary/tributary/internal/tables"
	"github.com/tributary/tributary/internal/telemetry"
	"github.com/tributary/tributary/internal/verify"
)

const usage = `verify — compare the source shards with the API, row by row.

Run it after traffic stopped. It reads each shard's WAL position, waits (up
to --wait) until GET /v1/shards shows every shard complete at or past it,
then compares every live row of every table on every shard (a random
sample of --sample per shard when there are more) with its copies: a
random --api-sample of each table and shard looked up one by one through
the API (GET /v1/tables/{table}/rows/{id}, --concurrency in flight), the
others read from ClickHouse in bulk exactly as the API's by-id read reads
them (FINAL, tombstones filtered) and turned into the JSON it writes —
one query per 500 ids instead of 500 requests, each of which costs
ClickHouse a merge of one granule per part. Every difference is looked up
through the API before it is reported. It also compares live row counts
per shard with ClickHouse, the move log's stuck and lost moves with GET
/v1/anomalies/moves, and revenue with GET /v1/revenue to the cent. While
a source keeps changing rows legitimately differ: each difference is
checked once more after waiting again, which tolerates a change in
flight, not continuous traffic. Progress is logged every 5 s (ids
checked, ids per second) on stderr.

The shards are those of the fleet file (--fleet, JSON: each shard's number,
optional name, and the environment variable or file holding its DSN — never
argv; see docs/configuration.md "Fleet file"): every shard listed is checked, whatever its
number. deploy/local/stack.sh writes one for its shards and names it in
stack.env. The shard sessions are read-only.

An API with tokens: the token (admin, or documents:read, rows:read of every
table and revenue:read) from $TRIBUTARY_API_TOKEN, never argv; an https --api
with a private CA: --api-ca-file.

Exit status: 0 no differences, 1 differences, 2 usage or connection error.

Example:
  set -a; . .stack/stack.env; set +a
  TRIBUTARY_TABLES=deploy/local/tables.json verify   # --fleet from $TRIBUTARY_FLEET`

// Config is verify's whole configuration.
type Config struct {
	verify.Config
	TablesFile string
	FleetFile  string
	RingMap    string
	JSON       bool
	Logging    telemetry.Logging
}

func parse(args []string) (*Config, error) {
	c := Config{}
	fs := flagenv.New("verify", usage)
	fs.String(&c.APIURL, "api", "TRIBUTARY_API_URL", "http://127.0.0.1:8080", "API base URL")
	fs.String(&c.APICAFile, "api-ca-file", "TRIBUTARY_API_CA_FILE", "", "PEM file of the authorities trusted to sign an https --api's certificate (empty: the system's)")
	fs.Secret(&c.APIToken, "TRIBUTARY_API_TOKEN")
	fs.String(&c.TablesFile, "tables", "TRIBUTARY_TABLES", "", "table config JSON file (required)")
	fs.String(&c.FleetFile, "fleet", "TRIBUTARY_FLEET", "", "fleet file: the shards by number and where each one's DSN comes from (required)")
	chstore.AddFlags(fs, &c.ClickHouse, chstore.ConnUsage{Addr: chstore.ReplicasUsage})
	fs.Int(&c.Sample, "sample", "TRIBUTARY_VERIFY_SAMPLE", 100000, "per table and shard, check a random sample of this many ids when there are more (0: all)")
	fs.Int(&c.APISample, "api-sample", "TRIBUTARY_VERIFY_API_SAMPLE", 1000, "per table and shard, look this many of the ids checked up through the API one by one, the others in ClickHouse in bulk (0: every id through the API)")
	fs.Duration(&c.Wait, "wait", "TRIBUTARY_VERIFY_WAIT", 60*time.Second, "how long to wait for the API to reach the shards' WAL positions")
	fs.Int(&c.Concurrency, "concurrency", "TRIBUTARY_VERIFY_CONCURRENCY", 16, "API requests in flight")
	fs.Duration(&c.ShardTimeout, "shard-timeout", "TRIBUTARY_VERIFY_SHARD_TIMEOUT", 60*time.Second, "timeout of each query to a shard (and of each ClickHouse query and API request)")
	fs.Int(&c.MaxDifferences, "max-diffs", "TRIBUTARY_VERIFY_MAX_DIFFS", 20, "differences listed in detail (all are counted)")
	fs.BoolVar(&c.JSON, "json", false, "write the report as JSON on stdout")
	c.Logging.AddFlags(fs, "info")
	fs.String(&c.RingMap, "ring-map", "TRIBUTARY_RING_MAP", "", "the ring map the loaders run with, if any: revenue rows count on the owner of their shard key only, as the API counts them")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	var errs []error
	errs = append(errs, c.Logging.Validate())
	errs = append(errs, flagenv.Required(c.TablesFile, "tables", "TRIBUTARY_TABLES", ""))
	errs = append(errs, flagenv.Required(c.FleetFile, "fleet", "TRIBUTARY_FLEET", "the fleet file listing the shards (the local stack's is $TRIBUTARY_HOME/fleet.json)"))
	errs = append(errs, c.ClickHouse.TLS.Validate()...)
	if perr := c.ClickHouse.ReadPassword(); perr != nil {
		errs = append(errs, perr)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var err error
	if c.Tables, err = tables.Load(c.TablesFile); err != nil {
		return nil, err
	}
	if c.Shards, err = verify.ShardsFromFleet(c.FleetFile, os.Getenv); err != nil {
		return nil, err
	}
	if c.RingMap != "" {
		if c.Ring, err = ring.Load(c.RingMap); err != nil {
			return nil, err
		}
	}
	// On a terminal, each table's comparison shows a bar below the log
	// lines; elsewhere progress is the periodic "progress" log line.
	var errOut io.Writer = os.Stderr
	if progress.IsTerminal(os.Stderr) {
		term := progress.NewTerminal(os.Stderr)
		errOut, c.ShowProgress = term, func(key string, s progress.Status, final bool) {
			if final {
				term.Finish(key, progress.Line(s))
			} else {
				term.Show(key, progress.Bar(s, 30))
			}
		}
	}
	if c.Log, err = c.Logging.Logger(errOut); err != nil {
		return nil, err
	}
	return &c, c.Validate()
}

func main() {
	cfg, err := parse(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "verify: %v\n(run with --help for all settings)\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	passed, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "verify: %v\n", err)
		os.Exit(2)
	}
	if !passed {
		os.Exit(1)
	}
}

// run verifies once and writes the report; it reports whether it passed.
func run(ctx context.Context, cfg *Config) (bool, error) {
	rep, err := verify.Run(ctx, cfg.Config)
	if err != nil {
		return false, err
	}
	if cfg.JSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = rep.WriteText(os.Stdout)
	}
	if err != nil {
		return false, fmt.Errorf("write report: %w", err)
	}
	return rep.Passed, nil
}
