package loader

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/ring"
	"github.com/tributary/tributary/internal/tables"
)

// metrics are the loader's Prometheus metrics; see the package doc for the
// list.
type metrics struct {
	records         *prometheus.CounterVec   // topic, kind
	rowsInserted    *prometheus.CounterVec   // table
	dropped         *prometheus.CounterVec   // table
	dlq             *prometheus.CounterVec   // topic, reason
	insertSeconds   *prometheus.HistogramVec // table
	batchRows       prometheus.Histogram
	batchBytes      prometheus.Histogram
	insertErrors    *prometheus.CounterVec // table
	schemaChanges   *prometheus.CounterVec // table
	tableStopped    *prometheus.GaugeVec   // table
	tablePaused     *prometheus.GaugeVec   // table
	watermarkLSN    *prometheus.GaugeVec   // shard
	replicasSkipped *prometheus.CounterVec // shard, replica (ClickHouse's)
	replicaStalled  *prometheus.GaugeVec   // shard, replica (ClickHouse's)
	lag             *prometheus.GaugeVec   // topic, partition
	commitErrors    prometheus.Counter
	dupIDs          *prometheus.GaugeVec   // table, kind
	dupPending      *prometheus.GaugeVec   // table, kind
	dupDetections   *prometheus.CounterVec // table, kind
	stageSeconds    *prometheus.CounterVec // stage
	misplacedWrites *prometheus.CounterVec // table, shard
	misplacedRows   *prometheus.GaugeVec   // table, shard
	movingWrites    *prometheus.CounterVec // table, shard
	movingRows      *prometheus.GaugeVec   // table, shard
	ringVersion     prometheus.Gauge
	ringReloads     *prometheus.CounterVec // outcome
	toastBases      *prometheus.CounterVec // source
	imageBytes      prometheus.Gauge
	imageEntries    prometheus.Gauge
	imageEvictions  prometheus.Counter
	monitorErrors   *prometheus.CounterVec // monitor
	fresh           freshness              // freshness.go
	group           *groupMetrics          // group.go
}

// Stages of the loader's loop, for tributary_loader_stage_seconds_total.
const (
	stagePoll       = "poll"       // waiting for and fetching records
	stageDecode     = "decode"     // envelope decoding and routing
	stageConvert    = "convert"    // dedupe, TOAST fill, conversion to ClickHouse values
	stageRead       = "read"       // reading stored rows (unchanged TOAST, truncate)
	stageInsert     = "insert"     // ClickHouse inserts (the tables of a batch concurrently: wall time)
	stageDetect     = "detect"     // duplicate-id checks (beside the next batch: tail.go)
	stageReplicas   = "replicas"   // waiting for every ClickHouse replica before the watermarks (cluster mode)
	stageWatermarks = "watermarks" // watermark writes (beside the next batch)
	stageDLQ        = "dlq"        // dead-letter produces
	stageCommit     = "commit"     // offset commits (beside the next batch)
)

// dlqReasons are the reason labels of tributary_loader_dlq_records_total
// (batch.go's deadLetter reasons; TestDLQReasonsListed keeps the two
// together).
var dlqReasons = []string{"unknown_topic", "decode", "wrong_table", "no_columns", "toast_without_base", "convert"}

// anomalyKinds are the kind labels of the duplicate-id metrics.
var anomalyKinds = []string{chstore.KindDuplicate, chstore.KindSerialCollision, chstore.KindArcMove}

// ringReloadOutcomes are the outcome labels of
// tributary_ring_map_reloads_total.
var ringReloadOutcomes = []string{"applied", "refused"}

// newMetrics registers the loader's metrics on reg, every series an alert
// rule reads already at 0 for the label values the table config names: a
// counter that appears only at its first event has no earlier sample, so
// increase() over it stays empty and the alert would not fire.
func newMetrics(reg prometheus.Registerer, tc *tables.Config, rm *ring.Map) *metrics {
	m := &metrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tributary_loader_records_total", Help: "Kafka records consumed, by topic and kind (change, watermark, invalid).",
		}, []string{"topic", "kind"}),
		rowsInserted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tributary_loader_rows_inserted_total", Help: "Rows written to ClickHouse, by table.",
		}, []string{"table"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tributary_loader_duplicates_dropped_total", Help: "Changes not written because the same or a newer version was already written (redeliveries, stale versions).",
		}, []string{"table"}),
		dlq: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tributary_loader_dlq_records_total", Help: "Records sent to the dead-letter topic, by source topic and reason.",
		}, []string{"topic", "reason"}),
		insertSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tributary_loader_insert_seconds", Help: "Latency of one ClickHouse insert.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}, []string{"table"}),
		batchRows: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tributary_loader_batch_records", Help: "Kafka records per applied batch.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10),
		}),
		batchBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tributary_loader_batch_bytes", Help: "Record bytes (keys and values) per polled batch; bounded by --batch-bytes.",
			Buckets: prometheus.ExponentialBuckets(1<<10, 4, 11), // 1 KiB .. 1 GiB
		}),
		insertErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tributary_loader_insert_errors_total", Help: "Failed ClickHouse inserts (retried; nothing is committed until they succeed).",
		}, []string{"table"}),
		schemaChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tributary_loader_schema_changes_total", Help: "Column sets applied to ClickHouse tables (creates and added columns).",
		}, []string{"table"}),
		tableStopped: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tributary_loader_table_stopped", Help: "1 when a table is stopped by an incompatible schema change.",
		}, []string{"table"}),
		tablePaused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tributary_loader_table_paused", Help: "1 while an operator has paused the table (tributaryctl pause): its changes wait in Kafka.",
		}, []string{"table"}),
		watermarkLSN: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tributary_loader_watermark_lsn", Help: "Highest commit LSN written as a watermark by this loader, by shard.",
		}, []string{"shard"}),
		replicasSkipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tributary_loader_replicas_skipped_total", Help: "Watermark writes that did not wait for a ClickHouse replica because it did not answer (cluster mode), by ClickHouse shard and replica.",
		}, []string{"shard", "replica"}),
		replicaStalled: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tributary_loader_replica_stalled", Help: "1 while watermarks have waited 10 s or more for a ClickHouse replica that answers but has not fetched the rows before them (cluster mode; its part may live only on a node that is down), by ClickHouse shard and replica.",
		}, []string{"shard", "replica"}),
		commitErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tributary_loader_commit_errors_total", Help: "Failed offset commits; the batch is replayed (harmless, but repeated failures mean no progress).",
		}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tributary_loader_consumer_lag_records", Help: "Records in Kafka at the previous sample not yet committed by the group (end offset then minus committed offset now), by topic and partition.",
		}, []string{"topic", "partition"}),
	}
	m.addDataMetrics()
	m.stageSeconds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tributary_loader_stage_seconds_total", Help: "Wall time the loader's loop spent in each stage (poll, decode, convert, read, insert, detect, replicas, watermarks, dlq, commit): where the time goes.",
	}, []string{"stage"})
	m.monitorErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tributary_loader_monitor_errors_total", Help: "Failed rounds of the loader's monitors (pauses, anomalies, stopped, lag, misplaced, ring_reload, compaction; the aggregator counts its own), by monitor: retried at the next round. A monitor that fails for good stops the loader.",
	}, []string{"monitor"})
	reg.MustRegister(m.toastBases, m.imageBytes, m.imageEntries, m.imageEvictions, m.monitorErrors)
	m.fresh = newFreshness(reg)
	m.group = newGroupMetrics(reg)
	reg.MustRegister(m.movingWrites, m.movingRows, m.ringVersion, m.ringReloads)
	reg.MustRegister(m.misplacedWrites, m.misplacedRows, m.stageSeconds, m.records, m.rowsInserted, m.dropped, m.dlq, m.insertSeconds, m.batchRows, m.batchBytes,
		m.insertErrors, m.schemaChanges, m.tableStopped, m.tablePaused, m.watermarkLSN, m.replicasSkipped, m.replicaStalled, m.lag, m.commitErrors, m.dupIDs, m.dupPending, m.dupDetections)
	m.zero(tc)
	m.zeroPlacement(tc, rm)
	return m
}

// addDataMetrics makes the metrics that describe the data rather than
// this loader: duplicate ids, placement under the ring map, and the image
// cache.
func (m *metrics) addDataMetrics() {
	m.dupIDs = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tributary_duplicate_ids", Help: "Ids live on more than one shard for longer than the grace period (global, from ClickHouse).",
	}, []string{"table", "kind"})
	m.dupPending = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tributary_duplicate_ids_pending", Help: "Ids live on more than one shard, still within the grace period (moves in flight).",
	}, []string{"table", "kind"})
	m.dupDetections = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tributary_duplicate_detections_total", Help: "Ids that stayed live on several shards beyond the grace period.",
	}, []string{"table", "kind"})
	m.misplacedWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tributary_misplaced_writes_total", Help: "Writes of live rows on a shard that does not own their shard-key value under the ring map (a writer routing with a stale map), by table and the shard written to. Counts writes: a replayed row counts again.",
	}, []string{"table", "shard"})
	m.misplacedRows = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tributary_misplaced_rows", Help: "Live rows currently on a shard that does not own their shard-key value under the newest ring map (global, from ClickHouse), by table and shard.",
	}, []string{"table", "shard"})
	m.movingWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tributary_moving_writes_total", Help: "Writes of live rows on the owner of their shard-key value under the staged ring map, not the map in force: a planned arc move's copies (not misplaced), by table and shard.",
	}, []string{"table", "shard"})
	m.movingRows = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tributary_moving_rows", Help: "Live rows of a planned arc move: on the staged owner of their shard-key value, not the owner in force (global, from ClickHouse), by table and shard. Not counted by queries until cutover.",
	}, []string{"table", "shard"})
	m.ringVersion = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tributary_ring_map_version", Help: "Version of the ring map this loader places rows under (0: none).",
	})
	m.ringReloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tributary_ring_map_reloads_total", Help: "Ring map file reloads by outcome: applied (a newer map or newly staged move), refused (unreadable, invalid, older, or changed under the same version; the map in force stays).",
	}, []string{"outcome"})
	m.toastBases = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tributary_loader_toast_bases_total", Help: "Rows of a batch with unchanged-TOAST updates, by where their base came from: batch (an earlier change in the batch), cache (the image cache: hits), clickhouse (read back: misses).",
	}, []string{"source"})
	m.imageBytes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tributary_loader_image_cache_bytes", Help: "Approximate memory held by the image cache (newest written values of the columns that arrive as unchanged TOAST).",
	})
	m.imageEntries = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tributary_loader_image_cache_entries", Help: "Rows whose newest image the image cache holds.",
	})
	m.imageEvictions = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tributary_loader_image_cache_evictions_total", Help: "Images dropped from the image cache to stay within its budget (not counting those dropped on rebalances and truncates).",
	})
}

// zero creates, at 0, the series of the label values known from the table
// config: per table and per topic.
func (m *metrics) zero(tc *tables.Config) {
	for _, o := range ringReloadOutcomes {
		m.ringReloads.WithLabelValues(o)
	}
	for _, n := range monitorNames {
		m.monitorErrors.WithLabelValues(n)
	}
	if tc == nil {
		return
	}
	for _, t := range tc.Tables {
		m.tableStopped.WithLabelValues(t.Name).Set(0)
		m.tablePaused.WithLabelValues(t.Name).Set(0)
		m.insertErrors.WithLabelValues(t.Name)
		for _, k := range anomalyKinds {
			m.dupIDs.WithLabelValues(t.Name, k).Set(0)
			m.dupPending.WithLabelValues(t.Name, k).Set(0)
			m.dupDetections.WithLabelValues(t.Name, k)
		}
		for _, r := range dlqReasons {
			m.dlq.WithLabelValues(t.Topic, r)
		}
	}
}

// zeroPlacement creates, at 0, the per-shard placement series of every
// table with a shard key for every shard of rm and of its staged map: at
// start-up and for each ring map applied later.
func (m *metrics) zeroPlacement(tc *tables.Config, rm *ring.Map) {
	if tc == nil || rm == nil {
		return
	}
	shards := rm.Shards()
	if n := rm.Next(); n != nil {
		shards = append(shards, n.Shards()...)
	}
	for _, t := range tc.Tables {
		if t.ShardKey == "" {
			continue
		}
		for _, sh := range shards {
			id := strconv.Itoa(sh.ID)
			m.misplacedWrites.WithLabelValues(t.Name, id)
			m.movingWrites.WithLabelValues(t.Name, id)
			m.misplacedRows.WithLabelValues(t.Name, id)
			m.movingRows.WithLabelValues(t.Name, id)
		}
	}
}

// since adds the time elapsed since start to a stage and returns now, so
// consecutive stages chain: t = m.since(stageX, t).
func (m *metrics) since(stage string, start time.Time) time.Time {
	now := time.Now()
	m.stageSeconds.WithLabelValues(stage).Add(now.Sub(start).Seconds())
	return now
}
