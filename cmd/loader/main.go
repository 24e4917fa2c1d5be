// Command loader consumes Tributary change envelopes from Kafka and applies
// them to ClickHouse: deduplicated by (table, id, shard, version), offsets
// committed only after ClickHouse acknowledged the insert.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/compact"
	"github.com/tributary/tributary/internal/flagenv"
	"github.com/tributary/tributary/internal/kafkaconn"
	"github.com/tributary/tributary/internal/loader"
	"github.com/tributary/tributary/internal/preagg"
	"github.com/tributary/tributary/internal/ring"
	"github.com/tributary/tributary/internal/tables"
	"github.com/tributary/tributary/internal/telemetry"
)

const usage = `loader — applies Tributary change envelopes from Kafka to ClickHouse.

Consumes the table topics named in the table config as a consumer group,
writes each batch to ClickHouse, then commits the batch's offsets. Records
that cannot be applied go to the dead-letter topic with the reason.

Example:
  TRIBUTARY_KAFKA_BROKERS=127.0.0.1:59092 TRIBUTARY_CLICKHOUSE_ADDR=127.0.0.1:59000 \
    loader --tables deploy/local/tables.json --metrics-addr 127.0.0.1:9101`

// Config is the loader's whole configuration.
type Config struct {
	Brokers    string
	Kafka      kafkaconn.Security
	Group      string
	DLQTopic   string
	TablesFile string
	ClickHouse chstore.Conn
	// ClickHouseCluster turns on cluster mode (chstore.Options.Cluster).
	ClickHouseCluster string
	BatchRecords      int
	BatchBytes        int
	BatchWait         time.Duration
	DuplicateGrace    time.Duration
	DedupeKeys        int
	ImageCache        int
	RingMap           string
	MisplacedEvery    time.Duration
	AggregateEvery    time.Duration
	BlockBits         int
	CompactEvery      time.Duration
	CompactParts      int
	CompactBytes      int
	InstanceID        string
	SessionTimeout    time.Duration
	Metrics           telemetry.Metrics
	Logging           telemetry.Logging
}

func parse(args []string) (*Config, error) {
	var c Config
	fs := flagenv.New("loader", usage)
	kafkaconn.AddClientFlags(fs, &c.Brokers, &c.Kafka)
	fs.String(&c.Group, "group", "TRIBUTARY_LOADER_GROUP", "tributary-loader", "Kafka consumer group; loaders in one group share partitions")
	fs.String(&c.DLQTopic, "dlq-topic", "TRIBUTARY_DLQ_TOPIC", "tributary.dlq", "dead-letter topic for records that cannot be applied")
	fs.String(&c.TablesFile, "tables", "TRIBUTARY_TABLES", "", "table config JSON file (required; see deploy/local/tables.json)")
	chstore.AddFlags(fs, &c.ClickHouse, chstore.ConnUsage{
		Addr: "ClickHouse native protocol host:port (required); several, comma-separated, are tried in order (with --clickhouse-cluster: inserts go on through another node while one is down)"})
	fs.String(&c.ClickHouseCluster, "clickhouse-cluster", "TRIBUTARY_CLICKHOUSE_CLUSTER", "", "ClickHouse cluster (a name in the servers' remote_servers) to spread the tables over: ReplicatedReplacingMergeTree tables on every node, one replica set per ClickHouse shard, behind Distributed tables sharded by the id, created node by node; inserts wait for every shard (insert_distributed_sync). --clickhouse-addr is then any node; every node of the cluster must answer and reach ZooKeeper, and the loader waits for one that does not (empty: one server)")
	chstore.AddNodeAddrsFlag(fs, &c.ClickHouse.NodeAddrs)
	fs.Int(&c.BatchRecords, "batch-records", "TRIBUTARY_LOADER_BATCH_RECORDS", 50000, "maximum records per ClickHouse batch")
	fs.Int(&c.BatchBytes, "batch-bytes", "TRIBUTARY_LOADER_BATCH_BYTES", loader.DefaultBatchBytes, "maximum record bytes (keys and values) per ClickHouse batch: bounds memory when rows are large (the loader holds about two batches at once, each also decoded and converted)")
	fs.Duration(&c.BatchWait, "batch-wait", "TRIBUTARY_LOADER_BATCH_WAIT", 200*time.Millisecond, "longest a batch grows after its first record while the previous one is still being written (with nothing more buffered, no batch being written and a watermark record in it, or 50ms waited for one, it is written at once)")
	fs.Duration(&c.DuplicateGrace, "duplicate-grace", "TRIBUTARY_DUPLICATE_GRACE", loader.DefaultDuplicateGrace, "how long an id may be live on two shards (a move in flight) before it is an alert, in source time")
	fs.Int(&c.DedupeKeys, "dedupe-keys", "TRIBUTARY_LOADER_DEDUPE_KEYS", loader.DefaultDedupeKeys, "rows whose newest written version is remembered, to skip redeliveries (memory: ~100 B each)")
	fs.Int(&c.ImageCache, "image-cache-bytes", "TRIBUTARY_LOADER_IMAGE_CACHE_BYTES", loader.DefaultImageCacheBytes, "memory for the newest written values of columns that arrive as unchanged TOAST, so most such updates need no read of ClickHouse (0: off)")
	fs.String(&c.RingMap, "ring-map", "TRIBUTARY_RING_MAP", "", "published ring map JSON (e.g. deploy/local/ringmap.json); with it, rows of tables with a shard_key are checked for the shard that owns them (misplaced rows). The file is read again every 5 s: a newer version, or a newly staged \"next\" map, is applied without a restart; an older map is refused and the one in force stays")
	fs.Duration(&c.AggregateEvery, "revenue-aggregate-interval", "TRIBUTARY_REVENUE_AGGREGATE_INTERVAL", preagg.DefaultInterval, "a round of the revenue pre-aggregator this often (0: this loader never runs it). Any number of loaders may have it on: the one owning partition 0 of the revenue topic runs it; every loader marks the blocks it changes. GET /v1/revenue then answers day-aligned reports from the pre-aggregates plus a live read of the blocks changed since their last round (schema/clickhouse.md)")
	fs.Int(&c.BlockBits, "revenue-block-bits", "TRIBUTARY_REVENUE_BLOCK_BITS", preagg.DefaultBlockBits, "pre-aggregate id blocks are 2^bits ids (seed000 ids: 49 = 18.6 h of creation time; uuids: of their first 64 bits, so for UUIDv7 42 = 18.6 h); the same on every loader")
	fs.Duration(&c.CompactEvery, "compact-interval", "TRIBUTARY_LOADER_COMPACT_INTERVAL", compact.DefaultInterval, "how often the replicated tables' ClickHouse parts are looked at: a table with more than --compact-max-parts active parts, no merge running and at most --compact-max-bytes on disk is merged whole (OPTIMIZE FINAL; answers unchanged), because a by-id read opens every part that covers the id (0: off; several loaders doing it are harmless)")
	fs.Int(&c.CompactParts, "compact-max-parts", "TRIBUTARY_LOADER_COMPACT_MAX_PARTS", compact.DefaultMaxParts, "merge a table whole once it has more active parts than this")
	fs.Int(&c.CompactBytes, "compact-max-bytes", "TRIBUTARY_LOADER_COMPACT_MAX_BYTES", compact.DefaultMaxBytes, "never merge whole a table larger than this on disk (a merge rewrites it: ~11 s per 2 GB on 2 cores); larger tables are left to ClickHouse's merges and counted in tributary_loader_compactions_total{result=\"too_large\"}")
	fs.Duration(&c.MisplacedEvery, "misplaced-interval", "TRIBUTARY_MISPLACED_INTERVAL", loader.DefaultMisplacedInterval, "how often misplaced live rows are counted in ClickHouse (a FINAL scan of each table with a shard_key)")
	fs.String(&c.InstanceID, "instance-id", "TRIBUTARY_LOADER_INSTANCE_ID", "", "static group membership: a stable id unique to this loader replica (e.g. the pod name); restarted under it, the loader takes its partitions back at once")
	fs.Duration(&c.SessionTimeout, "session-timeout", "TRIBUTARY_LOADER_SESSION_TIMEOUT", loader.DefaultSessionTimeout, "how long the group waits for a silent loader before moving its partitions (Kafka broker bounds: 6s..5m by default)")
	c.Metrics.AddFlags(fs, "TRIBUTARY_LOADER", "127.0.0.1:9101")
	c.Logging.AddFlags(fs, "info")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return &c, err
	}
	return &c, c.ClickHouse.ReadPassword()
}

// Validate reports every missing or invalid setting at once.
func (c *Config) Validate() error {
	var errs []error
	errs = append(errs, c.Logging.Validate(), c.Metrics.Validate())
	errs = append(errs, kafkaconn.ValidateClient(c.Brokers, c.Kafka)...)
	errs = append(errs, flagenv.Required(c.TablesFile, "tables", "TRIBUTARY_TABLES", ""))
	errs = append(errs, c.ClickHouse.Validate()...)
	errs = append(errs, c.ClickHouse.ValidateCluster(c.ClickHouseCluster))
	errs = append(errs, flagenv.AtLeast("batch-records", c.BatchRecords, 1))
	if c.BatchBytes < 64<<10 {
		errs = append(errs, fmt.Errorf("--batch-bytes must be >= 65536, got %d", c.BatchBytes))
	}
	errs = append(errs, flagenv.Positive("batch-wait", c.BatchWait))
	errs = append(errs, flagenv.Positive("duplicate-grace", c.DuplicateGrace))
	errs = append(errs, flagenv.AtLeast("dedupe-keys", c.DedupeKeys, 2))
	errs = append(errs, flagenv.NotNegative("image-cache-bytes", c.ImageCache))
	if c.SessionTimeout < 6*time.Second {
		errs = append(errs, fmt.Errorf("--session-timeout must be >= 6s (the broker's group.min.session.timeout.ms), got %s", c.SessionTimeout))
	}
	errs = append(errs, flagenv.NotNegative("revenue-aggregate-interval", c.AggregateEvery))
	if c.BlockBits < 1 || c.BlockBits > 62 {
		errs = append(errs, fmt.Errorf("--revenue-block-bits must be in 1..62, got %d", c.BlockBits))
	}
	errs = append(errs, flagenv.NotNegative("compact-interval", c.CompactEvery))
	errs = append(errs, flagenv.AtLeast("compact-max-parts", c.CompactParts, 1))
	errs = append(errs, flagenv.AtLeast("compact-max-bytes", c.CompactBytes, 1))
	errs = append(errs, flagenv.Positive("misplaced-interval", c.MisplacedEvery))
	return errors.Join(errs...)
}

func main() { flagenv.Main("loader", parse, run) }

func run(ctx context.Context, cfg *Config) error {
	log, err := cfg.Logging.Logger(os.Stderr)
	if err != nil {
		return err
	}
	tcfg, err := tables.Load(cfg.TablesFile)
	if err != nil {
		return err
	}
	var rm *ring.Map
	if cfg.RingMap != "" {
		if rm, err = ring.Load(cfg.RingMap); err != nil {
			return err
		}
	}
	store, err := chstore.OpenWait(ctx, chstore.Options{
		Addr: cfg.ClickHouse.Addr, Database: cfg.ClickHouse.Database,
		Username: cfg.ClickHouse.User, Password: cfg.ClickHouse.Password, TLS: cfg.ClickHouse.TLS,
		Cluster: cfg.ClickHouseCluster, NodeAddrs: cfg.ClickHouse.NodeAddrs,
	}, func(err error, wait time.Duration) {
		log.Warn("ClickHouse not reachable; retrying", slog.String("addr", cfg.ClickHouse.Addr),
			slog.Duration("in", wait), slog.Any("err", err))
	})
	if err != nil {
		return err
	}
	defer store.Close()
	reg := telemetry.NewRegistry()
	l := loader.New(loader.Config{
		Brokers: flagenv.List(cfg.Brokers), KafkaSecurity: cfg.Kafka, Group: cfg.Group, DLQTopic: cfg.DLQTopic,
		Tables: tcfg, BatchRecords: cfg.BatchRecords, BatchBytes: cfg.BatchBytes, BatchWait: cfg.BatchWait,
		DuplicateGrace: cfg.DuplicateGrace, DedupeKeys: cfg.DedupeKeys,
		RevenueAggregator: cfg.AggregateEvery > 0, PreaggInterval: cfg.AggregateEvery, PreaggBlockBits: cfg.BlockBits,
		Ring: rm, RingPath: cfg.RingMap, MisplacedInterval: cfg.MisplacedEvery,
		InstanceID: cfg.InstanceID, SessionTimeout: cfg.SessionTimeout,
		ImageCacheBytes: imageCacheBytes(int64(cfg.ImageCache)),
		CompactInterval: cfg.CompactEvery, CompactMaxParts: cfg.CompactParts, CompactMaxBytes: int64(cfg.CompactBytes),
	}, store, log, reg)

	ringVersion := int64(0)
	if rm != nil {
		ringVersion = rm.Version()
	}
	log.Info("loader starting", slog.String("group", cfg.Group), slog.Any("topics", tcfg.Topics()),
		slog.String("ring_map", cfg.RingMap), slog.Int64("ring_version", ringVersion))
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return l.Run(gctx) })
	g.Go(func() error { return cfg.Metrics.Serve(gctx, reg) })
	err = g.Wait()
	log.Info("loader stopped")
	return err
}

// imageCacheBytes maps the flag (0: off) to loader.Config's (0: default,
// negative: off).
func imageCacheBytes(flag int64) int64 {
	if flag == 0 {
		return -1
	}
	return flag
}
