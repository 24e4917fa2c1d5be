package reader

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	changes        *prometheus.CounterVec // table, op
	bytes          prometheus.Counter
	produced       *prometheus.CounterVec // topic
	produceSeconds prometheus.Histogram
	commitAck      prometheus.Histogram
	errors         *prometheus.CounterVec // kind
	lagBytes       prometheus.Gauge
	lagSeconds     prometheus.Gauge
	confirmedLSN   prometheus.Gauge
	retainedBytes  prometheus.Gauge
	walStatus      *prometheus.GaugeVec   // status
	walOther       string                 // a status walStatuses lacks, set to 1; the monitor goroutine's
	snapshotRows   *prometheus.CounterVec // table
	// Snapshot progress, by table.
	snapshotChunks    *prometheus.CounterVec
	snapshotEstimated *prometheus.GaugeVec
	snapshotProgress  *prometheus.GaugeVec
	snapshotResumes   prometheus.Counter
	heartbeats        prometheus.Counter
	watermarks        prometheus.Counter
	unrouted          *prometheus.CounterVec // relation
	resnapshots       *prometheus.CounterVec // result
	resnapshotActive  *prometheus.GaugeVec   // table
	// resnapshotSweepPending: 1 from a predicate's copy done until its
	// sweep finished.
	resnapshotSweepPending *prometheus.GaugeVec // table
	// up and restarts are the shard's supervisor's (supervise.go): 1
	// while a run copies or streams, 0 while it connects or waits to retry.
	up       prometheus.Gauge
	restarts prometheus.Counter
	// kafkaRetries counts transient Kafka answers retried at start-up
	// (stateStore.endOffsets).
	kafkaRetries prometheus.Counter
}

// resnapshotResults are the result labels of tributary_reader_resnapshots_total.
var resnapshotResults = []string{"done", "failed", "refused"}

// errorKinds are the kind labels of tributary_reader_errors_total
// (TestErrorKindsListed keeps them with the code that counts them).
var errorKinds = []string{"decode", "produce", "replication", "sql", "catalog", "watermark"}

// walStatuses are pg_replication_slots.wal_status's values.
var walStatuses = []string{"reserved", "extended", "unreserved", "lost"}

// newMetrics registers a shard's metrics on reg, the series alert rules
// read already at 0 for every known label value: a counter that appears
// only at its first event has no earlier sample, and increase() over it
// would not see that event.
func newMetrics(reg prometheus.Registerer, shard string) *metrics {
	l := prometheus.Labels{"shard": shard}
	m := &metrics{
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tributary_reader_changes_total",
			Help: "Row changes read from the slot, by table and operation.", ConstLabels: l}, []string{"table", "op"}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "tributary_reader_wal_bytes_total",
			Help: "Bytes of pgoutput messages received.", ConstLabels: l}),
		produced: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tributary_reader_records_produced_total",
			Help: "Records acknowledged by Kafka, by topic.", ConstLabels: l}, []string{"topic"}),
		produceSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tributary_reader_produce_seconds",
			Help: "Time from handing a record to the producer to Kafka's acknowledgement.", ConstLabels: l,
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		commitAck: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tributary_reader_commit_ack_seconds",
			Help: "Time from a transaction's commit on the shard (its commit timestamp) to Kafka's acknowledgement of its last record and of every earlier transaction's: when its watermark may be published. Compares the shard's clock with the reader's.", ConstLabels: l,
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tributary_reader_errors_total",
			Help: "Errors by kind (catalog, decode, produce, replication, sql, watermark).", ConstLabels: l}, []string{"kind"}),
		lagBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tributary_reader_lag_bytes",
			Help: "Server WAL end minus the confirmed position.", ConstLabels: l}),
		lagSeconds: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tributary_reader_lag_seconds",
			Help: "Now minus the commit time of the newest transaction confirmed.", ConstLabels: l}),
		confirmedLSN: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tributary_reader_confirmed_lsn",
			Help: "Position confirmed to the slot (everything before it is acknowledged by Kafka).", ConstLabels: l}),
		retainedBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tributary_reader_slot_retained_wal_bytes",
			Help: "WAL the slot keeps on the server (current WAL LSN minus restart_lsn).", ConstLabels: l}),
		walStatus: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tributary_reader_slot_wal_status",
			Help: "1 for the slot's current wal_status (reserved, extended, unreserved, lost).", ConstLabels: l}, []string{"status"}),
		snapshotRows: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tributary_reader_snapshot_rows_total",
			Help: "Rows copied by the initial snapshot and acknowledged by Kafka, by table.", ConstLabels: l}, []string{"table"}),
		snapshotChunks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tributary_reader_snapshot_chunks_total",
			Help: "Snapshot chunks copied and acknowledged by Kafka (their progress is then stored), by table.", ConstLabels: l}, []string{"table"}),
		snapshotEstimated: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tributary_reader_snapshot_estimated_rows",
			Help: "Rows the snapshot expects to copy per table (pg_class.reltuples when the copy was planned; 0: unknown).", ConstLabels: l}, []string{"table"}),
		snapshotProgress: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tributary_reader_snapshot_progress_ratio",
			Help: "Fraction of each table the snapshot has copied, by its row estimate (1 when done, at most 0.99 before).", ConstLabels: l}, []string{"table"}),
		snapshotResumes: prometheus.NewCounter(prometheus.CounterOpts{Name: "tributary_reader_snapshot_resumes_total",
			Help: "Unfinished snapshots continued from their stored progress instead of started over.", ConstLabels: l}),
		heartbeats: prometheus.NewCounter(prometheus.CounterOpts{Name: "tributary_reader_heartbeats_total",
			Help: "Heartbeat messages written to the shard's WAL.", ConstLabels: l}),
		watermarks: prometheus.NewCounter(prometheus.CounterOpts{Name: "tributary_reader_watermarks_total",
			Help: "Watermark rounds published (one record per partition per table topic).", ConstLabels: l}),
	}
	m.up = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tributary_reader_up",
		Help: "1 while the shard's reader copies or streams; 0 while it connects, or waits to retry after a failure (tributary_reader_restarts_total counts those).", ConstLabels: l})
	m.restarts = prometheus.NewCounter(prometheus.CounterOpts{Name: "tributary_reader_restarts_total",
		Help: "Runs of the shard's reader that failed and were retried after a backoff (a process serving several shards retries each alone).", ConstLabels: l})
	m.kafkaRetries = prometheus.NewCounter(prometheus.CounterOpts{Name: "tributary_reader_kafka_retries_total",
		Help: "Kafka answers retried at start-up because they were transient (the state topic's partition unknown to a broker or without a leader, as right after a broker restart).", ConstLabels: l})
	m.unrouted = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tributary_reader_unrouted_changes_total",
		Help:        "Changes of published relations that no configured table names (skipped). A table renamed at the source shows here: its changes are not replicated until the table config names it.",
		ConstLabels: l}, []string{"relation"})
	m.resnapshots = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tributary_reader_resnapshots_total",
		Help: "Resnapshots ended, by result (done, failed; refused: a request the reader would not run).", ConstLabels: l}, []string{"result"})
	m.resnapshotActive = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tributary_reader_resnapshot_active",
		Help: "1 while a resnapshot of the table runs (its rows count in tributary_reader_snapshot_rows_total).", ConstLabels: l}, []string{"table"})
	m.resnapshotSweepPending = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tributary_reader_resnapshot_sweep_pending",
		Help: "1 while a resnapshot of the table with a predicate has copied and its sweep (deleting the rows the shard no longer has) is not done.", ConstLabels: l}, []string{"table"})
	for _, res := range resnapshotResults {
		m.resnapshots.WithLabelValues(res)
	}
	reg.MustRegister(m.resnapshots, m.resnapshotActive, m.resnapshotSweepPending, m.unrouted, m.changes, m.bytes, m.produced, m.produceSeconds, m.commitAck, m.errors, m.lagBytes, m.lagSeconds,
		m.confirmedLSN, m.retainedBytes, m.walStatus, m.snapshotRows, m.heartbeats, m.watermarks,
		m.snapshotChunks, m.snapshotEstimated, m.snapshotProgress, m.snapshotResumes, m.up, m.restarts, m.kafkaRetries)
	for _, k := range errorKinds {
		m.errors.WithLabelValues(k)
	}
	m.setWALStatus("")
	return m
}

// setWALStatus sets the slot's wal_status gauge: 1 for status, 0 for every
// other one (none while the status is not known yet, "").
func (m *metrics) setWALStatus(status string) {
	if m.walOther != "" && m.walOther != status {
		m.walStatus.DeleteLabelValues(m.walOther)
		m.walOther = ""
	}
	for _, s := range walStatuses {
		v := 0.0
		if s == status {
			v = 1
		}
		m.walStatus.WithLabelValues(s).Set(v)
	}
	if status != "" && !slices.Contains(walStatuses, status) {
		m.walOther = status // a status newer than this code
		m.walStatus.WithLabelValues(status).Set(1)
	}
}
