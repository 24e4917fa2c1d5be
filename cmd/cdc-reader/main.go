// Command cdc-reader streams PostgreSQL shards' changes into Kafka as
// Tributary change envelopes: one shard (--shard), or a set of the fleet
// file's shards in one process (--shards), each retried alone on failure.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/flagenv"
	"github.com/tributary/tributary/internal/fleet"
	"github.com/tributary/tributary/internal/kafkaconn"
	"github.com/tributary/tributary/internal/progress"
	"github.com/tributary/tributary/internal/reader"
	"github.com/tributary/tributary/internal/tables"
	"github.com/tributary/tributary/internal/telemetry"
)

const usage = `cdc-reader — streams PostgreSQL shards into Kafka: one (--shard N), or
several of the fleet file's in one process (--fleet F --shards 0-31).

On first start it creates the publication (for the configured tables) and the
logical replication slot, copies the tables in chunks (--snapshot-workers at
once, progress logged and stored in the state topic after Kafka acknowledged
each chunk), then streams pgoutput changes from the slot's consistent point.
The slot is confirmed only up to changes Kafka has acknowledged; on restart
it resumes from the slot's confirmed position, or continues an unfinished
copy where it stopped (duplicates possible, never loss). It never drops the
slot on stop.

The shard DSN is read from $TRIBUTARY_PG_DSN (it holds a password, so it is
never a flag), or, when that is not set, from the fleet file (--fleet): the
reader_dsn_env / reader_dsn_file of shard --shard there, else its dsn_env /
dsn_file. Use a role with REPLICATION and SELECT on the tables.

It also runs the resnapshots tributaryctl asks for through the shard's
WAL, several tables at once, and continues them after a restart. One with
--where ends with a sweep that deletes the rows the shard no longer has:
it reads the loaders' ClickHouse database (--clickhouse-addr, a read-only
user is enough); without --clickhouse-addr such resnapshots are refused.

With --shards (ranges and lists of the fleet file's numbers, or all) one
process serves every shard named, each with its own connections, slot
(--slot with {shard} in it; default tributary_shard_{shard}), state,
producer and goroutines. A shard that fails (its PostgreSQL down or
unreachable at start, its slot lost, a refusal) is logged, counted in
tributary_reader_restarts_total{shard}, shown as tributary_reader_up{shard}
0, and run again after --retry-min doubling to --retry-max, while the
others keep streaming. With --shard the process exits on failure instead
(its service manager restarts it), as it always did.

Example:
  TRIBUTARY_PG_DSN='postgres://tributary_repl:...@127.0.0.1:55432/app' \
    cdc-reader --shard 0 --tables deploy/local/tables.json --kafka-brokers 127.0.0.1:59092
  cdc-reader --fleet .stack/fleet.json --shard 5 ...   # DSN from the fleet file
  cdc-reader --fleet .stack/fleet.json --shards 0-31 ... # 32 shards, one process`

// Config is the reader's whole configuration.
type Config struct {
	Shard             int
	Shards            string
	DSN               string
	FleetFile         string
	Slot              string
	RetryMin          time.Duration
	RetryMax          time.Duration
	TablesFile        string
	Brokers           string
	Partitions        int
	ReplicationFactor int
	// Reader holds the settings every shard's reader.Config shares, as the
	// flags set them (publication, Kafka security, intervals, buffers,
	// snapshot and sweep); run adds each shard's own.
	Reader reader.Config
	// ClickHouse is the loaders' database, read by a resnapshot's sweep
	// (empty Addr: resnapshots with a predicate are refused).
	ClickHouse chstore.Conn
	Metrics    telemetry.Metrics
	Logging    telemetry.Logging

	// targets are the shards served, their DSNs and slots read (parse).
	targets []target
	// setErr is what reading the fleet file for --shards found wrong.
	setErr error
}

// target is one shard the process serves.
type target struct {
	shard     int
	dsn, slot string
}

func parse(args []string) (*Config, error) {
	var c Config
	fs := flagenv.New("cdc-reader", usage)
	fs.Int(&c.Shard, "shard", "TRIBUTARY_SHARD", -1, "this shard's number in the fleet, 0..8191, any numbering (this or --shards is required)")
	fs.String(&c.Shards, "shards", "TRIBUTARY_READER_SHARDS", "", "serve these shards of the fleet file in one process: numbers and ranges (0-31, 1,5,17-20) or all; each retried alone on failure")
	fs.Duration(&c.RetryMin, "retry-min", "TRIBUTARY_READER_RETRY_MIN", reader.DefaultBackoff.Min, "with --shards: wait before a failed shard's first retry (doubled per failure in a row)")
	fs.Duration(&c.RetryMax, "retry-max", "TRIBUTARY_READER_RETRY_MAX", reader.DefaultBackoff.Max, "with --shards: the longest wait between a failed shard's retries")
	fs.Secret(&c.DSN, "TRIBUTARY_PG_DSN")
	fs.String(&c.FleetFile, "fleet", "TRIBUTARY_FLEET", "", "fleet file: the shards --shards names and their DSNs, or where shard --shard's DSN comes from when $TRIBUTARY_PG_DSN is not set")
	fs.String(&c.Slot, "slot", "TRIBUTARY_SLOT", "", "replication slot name; {shard} in it is the shard's number (default tributary_shard_{shard})")
	fs.String(&c.Reader.Publication, "publication", "TRIBUTARY_PUBLICATION", "tributary_pub", "publication name; created for the configured tables if absent")
	fs.String(&c.TablesFile, "tables", "TRIBUTARY_TABLES", "", "table config JSON file (required)")
	kafkaconn.AddClientFlags(fs, &c.Brokers, &c.Reader.KafkaSecurity)
	fs.Int(&c.Partitions, "partitions", "TRIBUTARY_PARTITIONS", 4, "partitions for table topics this reader creates")
	fs.Int(&c.ReplicationFactor, "replication-factor", "TRIBUTARY_KAFKA_REPLICATION_FACTOR", 0, "replicas of the topics this reader creates (0: the cluster's default.replication.factor)")
	fs.Duration(&c.Reader.StatusInterval, "status-interval", "TRIBUTARY_STATUS_INTERVAL", time.Second, "how often to confirm the position to the server")
	fs.Duration(&c.Reader.WatermarkInterval, "watermark-interval", "TRIBUTARY_WATERMARK_INTERVAL", 500*time.Millisecond, "how often to save the reader state and re-publish an unchanged watermark (new positions are published as Kafka acknowledges them)")
	fs.Duration(&c.Reader.WatermarkMinGap, "watermark-min-gap", "TRIBUTARY_WATERMARK_MIN_GAP", reader.DefaultWatermarkMinGap, "least time between two watermark rounds of a busy shard (0: publish every acknowledged commit)")
	fs.Duration(&c.Reader.HeartbeatInterval, "heartbeat-interval", "TRIBUTARY_HEARTBEAT_INTERVAL", 5*time.Second, "heartbeat write interval: idle shards release WAL and their watermark stays fresh (0: off)")
	fs.Duration(&c.Reader.KafkaLinger, "kafka-linger", "TRIBUTARY_KAFKA_LINGER", reader.DefaultKafkaLinger, "how long a record waits for others to share its Kafka produce request: shorter cuts commit -> visible on a quiet fleet, longer spares Kafka and the loader under load")
	fs.Int(&c.Reader.MaxBuffered, "max-buffered", "TRIBUTARY_MAX_BUFFERED", reader.DefaultMaxBuffered, "records buffered for Kafka before reading pauses (bounds memory)")
	fs.Int(&c.Reader.MaxBufferedBytes, "max-buffered-bytes", "TRIBUTARY_MAX_BUFFERED_BYTES", 32<<20, "bytes buffered for Kafka before reading pauses (bounds memory)")
	fs.String(&c.Reader.StateTopic, "state-topic", "TRIBUTARY_STATE_TOPIC", "tributary.reader-state", "compacted Kafka topic holding each shard's reader state (snapshot done, position), keyed by the shard's PostgreSQL system identifier, database and slot")
	fs.Int(&c.Reader.SnapshotWorkers, "snapshot-workers", "TRIBUTARY_SNAPSHOT_WORKERS", 2, "chunks the initial snapshot copies at once (one connection each)")
	fs.Int(&c.Reader.SnapshotChunkRows, "snapshot-chunk-rows", "TRIBUTARY_SNAPSHOT_CHUNK_ROWS", 10000, "rows per snapshot chunk: the unit of stored progress")
	fs.Int(&c.Reader.SnapshotMaxRowsPerSecond, "snapshot-max-rows-per-second", "TRIBUTARY_SNAPSHOT_MAX_ROWS_PER_SECOND", 0, "limit the snapshot's read rate to spare the shard (0: unlimited)")
	fs.Duration(&c.Reader.SnapshotProgressInterval, "snapshot-progress-interval", "TRIBUTARY_SNAPSHOT_PROGRESS_INTERVAL", 10*time.Second, "how often snapshot progress (rows, rows/s, ETA) is logged")
	chstore.AddFlags(fs, &c.ClickHouse, chstore.ConnUsage{
		Addr:     "ClickHouse native protocol host:port of the loaders' database, read by the sweep that ends a resnapshot with --where (empty: such resnapshots are refused)",
		Database: "the loaders' ClickHouse database (the sweep reads it)",
		User:     "a ClickHouse user that may read the loaders' database (a read-only user, readonly = 2, as the API's, is enough: the sweep creates and inserts nothing)"})
	fs.Int(&c.Reader.SweepBatch, "sweep-batch", "TRIBUTARY_SWEEP_BATCH", reader.SweepBatch, "rows of ClickHouse one question of a sweep asks the shard about (the sweep ends a resnapshot with --where)")
	c.Metrics.AddFlags(fs, "TRIBUTARY_READER", "127.0.0.1:9100")
	c.Logging.AddFlags(fs, "info")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if c.Slot == "" {
		c.Slot = "tributary_shard_{shard}"
	}
	if c.Shards != "" {
		c.setErr = c.readSet()
	} else if c.Shard >= 0 {
		if c.DSN == "" && c.FleetFile != "" {
			f, err := fleet.Load(c.FleetFile)
			if err != nil {
				return nil, err
			}
			if c.DSN, err = f.ReaderDSN(c.Shard, os.Getenv); err != nil {
				return nil, err
			}
		}
		c.targets = []target{{shard: c.Shard, dsn: c.DSN, slot: slotName(c.Slot, c.Shard)}}
	}
	return &c, c.Validate()
}

// slotName is the slot of shard: pattern with {shard} replaced.
func slotName(pattern string, shard int) string {
	return strings.ReplaceAll(pattern, "{shard}", strconv.Itoa(shard))
}

// readSet reads the shards --shards names from the fleet file, with their
// reader DSNs, reporting every problem at once.
func (c *Config) readSet() error {
	if c.FleetFile == "" {
		return errors.New("--shards needs --fleet (or $TRIBUTARY_FLEET): the shards and their DSNs come from the fleet file")
	}
	f, err := fleet.Load(c.FleetFile)
	if err != nil {
		return err
	}
	shards, err := f.Select(c.Shards)
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range shards {
		dsn, err := f.ReaderDSN(s.Number, os.Getenv)
		if err != nil {
			errs = append(errs, err)
		}
		c.targets = append(c.targets, target{shard: s.Number, dsn: dsn, slot: slotName(c.Slot, s.Number)})
	}
	return errors.Join(errs...)
}

// Validate reports every missing or invalid setting at once.
func (c *Config) Validate() error {
	var errs []error
	errs = append(errs, c.Logging.Validate(), c.Metrics.Validate())
	switch {
	case c.Shards != "" && c.Shard >= 0:
		errs = append(errs, errors.New("--shard and --shards exclude each other: one shard, or a set of the fleet file's"))
	case c.Shards != "":
		if c.setErr != nil {
			errs = append(errs, c.setErr)
		}
		if c.DSN != "" {
			errs = append(errs, errors.New("$TRIBUTARY_PG_DSN is one shard's DSN: with --shards every shard's DSN comes from the fleet file; unset it"))
		}
		if len(c.targets) > 1 && !strings.Contains(c.Slot, "{shard}") {
			errs = append(errs, fmt.Errorf("--slot %q has no {shard}: with --shards every shard needs its own slot name (shards may share a PostgreSQL cluster), e.g. %s_{shard}", c.Slot, c.Slot))
		}
		if c.RetryMin <= 0 || c.RetryMax < c.RetryMin {
			errs = append(errs, fmt.Errorf("--retry-min must be > 0 and --retry-max >= it, got %s and %s", c.RetryMin, c.RetryMax))
		}
	case c.Shard < 0 || c.Shard > fleet.MaxShard:
		errs = append(errs, fmt.Errorf("--shard (or $TRIBUTARY_SHARD, 0..%d) or --shards (with --fleet) is required", fleet.MaxShard))
	case c.DSN == "":
		errs = append(errs, errors.New("$TRIBUTARY_PG_DSN or --fleet is required (the DSN is not a flag: it holds a password)"))
	}
	errs = append(errs, flagenv.Required(c.TablesFile, "tables", "TRIBUTARY_TABLES", ""))
	errs = append(errs, kafkaconn.ValidateClient(c.Brokers, c.Reader.KafkaSecurity)...)
	if c.ReplicationFactor < 0 || c.ReplicationFactor > math.MaxInt16 {
		errs = append(errs, fmt.Errorf("--replication-factor must be 0 (the cluster's default) or a replica count, got %d", c.ReplicationFactor))
	}
	errs = append(errs, flagenv.AtLeast("partitions", c.Partitions, 1))
	if c.Reader.StatusInterval <= 0 || c.Reader.WatermarkInterval <= 0 || c.Reader.HeartbeatInterval < 0 {
		errs = append(errs, errors.New("--status-interval and --watermark-interval must be > 0, --heartbeat-interval >= 0"))
	}
	errs = append(errs, flagenv.NotNegative("watermark-min-gap", c.Reader.WatermarkMinGap))
	if c.Reader.KafkaLinger <= 0 || c.Reader.KafkaLinger > time.Second {
		errs = append(errs, fmt.Errorf("--kafka-linger must be > 0 and <= 1s, got %s", c.Reader.KafkaLinger))
	}
	errs = append(errs, flagenv.AtLeast("max-buffered", c.Reader.MaxBuffered, 1))
	if c.Reader.MaxBufferedBytes < 1<<20 {
		errs = append(errs, fmt.Errorf("--max-buffered-bytes must be >= 1 MiB (a record must fit), got %d", c.Reader.MaxBufferedBytes))
	}
	if c.Reader.SnapshotWorkers < 1 || c.Reader.SnapshotWorkers > 64 {
		errs = append(errs, fmt.Errorf("--snapshot-workers must be 1..64, got %d", c.Reader.SnapshotWorkers))
	}
	errs = append(errs, flagenv.AtLeast("snapshot-chunk-rows", c.Reader.SnapshotChunkRows, 1))
	errs = append(errs, flagenv.NotNegative("snapshot-max-rows-per-second", c.Reader.SnapshotMaxRowsPerSecond))
	if c.Reader.SnapshotProgressInterval <= 0 {
		errs = append(errs, errors.New("--snapshot-progress-interval must be > 0"))
	}
	if c.ClickHouse.Addr != "" {
		errs = append(errs, c.ClickHouse.TLS.Validate()...)
	}
	errs = append(errs, flagenv.AtLeast("sweep-batch", c.Reader.SweepBatch, 1))
	return errors.Join(errs...)
}

func main() { flagenv.Main("cdc-reader", parse, run) }

func run(ctx context.Context, cfg *Config) error {
	// On a terminal, the copies' progress bars stay below the log lines;
	// elsewhere progress is the periodic "snapshot progress" log line.
	var errOut io.Writer = os.Stderr
	var show func(string, progress.Status, bool)
	if progress.IsTerminal(os.Stderr) {
		term := progress.NewTerminal(os.Stderr)
		errOut, show = term, func(key string, s progress.Status, final bool) {
			if final {
				term.Finish(key, progress.Line(s))
			} else {
				term.Show(key, progress.Bar(s, 30))
			}
		}
	}
	log, err := cfg.Logging.Logger(errOut)
	if err != nil {
		return err
	}
	tcfg, err := tables.Load(cfg.TablesFile)
	if err != nil {
		return err
	}
	reg := telemetry.NewRegistry()
	sweepStore, err := sweepStore(cfg)
	if err != nil {
		return err
	}
	cfgs := make([]reader.Config, len(cfg.targets))
	for i, tg := range cfg.targets {
		rc := cfg.Reader
		rc.Shard, rc.DSN, rc.Slot, rc.Tables = tg.shard, tg.dsn, tg.slot, tcfg
		rc.Brokers, rc.Partitions, rc.ReplicationFactor = flagenv.List(cfg.Brokers), int32(cfg.Partitions), int16(cfg.ReplicationFactor)
		rc.ShowProgress, rc.SweepStore = show, sweepStore
		cfgs[i] = rc
	}
	g, gctx := errgroup.WithContext(ctx)
	if cfg.Shards == "" {
		// One shard: a failure ends the process, as it always did.
		r := reader.New(cfgs[0], log, reg)
		g.Go(func() error { return r.Run(gctx) })
	} else {
		log.Info("serving shards", slog.Int("count", len(cfgs)), slog.String("shards", cfg.Shards))
		b := reader.Backoff{Min: cfg.RetryMin, Max: cfg.RetryMax}
		g.Go(func() error { return reader.Supervise(gctx, cfgs, b, log, reg) })
	}
	g.Go(func() error { return cfg.Metrics.Serve(gctx, reg) })
	err = g.Wait()
	if cfg.Shards == "" {
		log.Info("cdc-reader stopped", slog.Int("shard", cfg.Shard))
	} else {
		log.Info("cdc-reader stopped", slog.String("shards", cfg.Shards))
	}
	return err
}

// sweepStore opens the loaders' ClickHouse database read only, for each
// sweep attempt (nil without --clickhouse-addr).
func sweepStore(cfg *Config) (func(context.Context) (reader.SweepStore, error), error) {
	if cfg.ClickHouse.Addr == "" {
		return nil, nil
	}
	if err := cfg.ClickHouse.ReadPassword(); err != nil {
		return nil, err
	}
	o := chstore.Options{Addr: cfg.ClickHouse.Addr, Database: cfg.ClickHouse.Database, Username: cfg.ClickHouse.User,
		Password: cfg.ClickHouse.Password, TLS: cfg.ClickHouse.TLS}
	return func(ctx context.Context) (reader.SweepStore, error) {
		s, err := chstore.OpenReadOnly(ctx, o)
		if err != nil {
			return nil, err // not a nil *Store in a non-nil interface
		}
		return s, nil
	}, nil
}
