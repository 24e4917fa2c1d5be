// Package compact keeps the loader's tables merged: a by-id read opens one
// granule in every active part whose id range covers the id, so its cost
// grows with the number of parts (docs/benchmarks.md, "By-id, session 6":
// 1.7 ms p50 straight on ClickHouse with one part, 2.7 ms with six; the
// ClickHouse CPU per lookup halves). ClickHouse's own merges join parts of
// similar size and leave a handful of large parts and a trail of small
// ones forever; current ClickHouse can force a final merge of old parts
// (min_age_to_force_merge_seconds), 18.16 cannot.
//
// A Keeper looks at its tables every Interval and runs
// OPTIMIZE TABLE ... FINAL on a table that has more than MaxParts active
// parts, no merge running, and at most MaxBytes on disk. The merge is
// ClickHouse's own replacing merge, so every FINAL read answers exactly as
// before it: the loader's exactness never depends on it. Its price is a
// rewrite of the whole table (11 s for 2.1 GB on the 2-core machine the
// benchmarks run on), which MaxBytes bounds. Several keepers on one
// database (one per loader) are harmless: ClickHouse refuses the second
// OPTIMIZE of a table while the first merges it ("busy").
//
// In ClickHouse cluster mode (NewOnNodes) the keeper looks at the local
// tables of every node, each node's parts on their own, and merges on the
// node whose table needs it; a replicated merge reaches the shard's other
// replicas through ZooKeeper, so their next look finds the parts merged.
//
// Metrics, on the registry the loader passes (its own, hence the prefix
// tributary_loader_):
//
//	table_parts{table}                 active parts of each kept table
//	compactions_total{table,result}    whole-table merges: done, busy, failed, too_large
//	compaction_seconds{table}          duration of the merges that completed
package compact

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/chstore"
)

// Defaults of Config.
const (
	DefaultInterval = 5 * time.Minute
	DefaultMaxParts = 3
	DefaultMaxBytes = 8 << 30
)

// Config says which tables to keep and when to merge them.
type Config struct {
	// Tables are the tables of the database to keep (missing ones are
	// skipped until they exist).
	Tables []string
	// Interval is how often the tables are looked at (DefaultInterval).
	Interval time.Duration
	// MaxParts: a table with more active parts is merged (DefaultMaxParts;
	// 1 merges any table of two parts or more).
	MaxParts int
	// MaxBytes: a table larger on disk is never rewritten whole
	// (DefaultMaxBytes); it is counted as too_large instead.
	MaxBytes int64
	// LocalTable, when set, names the table that holds a table's parts on
	// each node (a cluster's local table); metrics and outcomes keep the
	// names of Tables.
	LocalTable func(string) string
}

// Keeper merges tables; see the package doc.
type Keeper struct {
	cfg        Config
	nodes      []Node
	replicated bool // NewOnNodes
	db         string
	log        *slog.Logger
	m          *metrics
}

// Node is a server whose tables a keeper merges.
type Node struct {
	Name string // for logs and Outcome ("" for the one server)
	Conn driver.Conn
}

// New returns a Keeper of cfg.Tables in database db; its metrics go to
// reg (nil: not registered).
func New(cfg Config, conn driver.Conn, db string, log *slog.Logger, reg prometheus.Registerer) *Keeper {
	return newKeeper(cfg, []Node{{Conn: conn}}, db, log, reg)
}

// ForStore is New on store's server or, in ClickHouse cluster mode,
// NewOnNodes over every node of its cluster and their local tables.
func ForStore(cfg Config, store *chstore.Store, log *slog.Logger, reg prometheus.Registerer) *Keeper {
	if store.Cluster() == "" {
		return New(cfg, store.Conn(), store.Database(), log, reg)
	}
	var nodes []Node
	for _, n := range store.Nodes() {
		nodes = append(nodes, Node{Name: n.String(), Conn: n.Conn()})
	}
	cfg.LocalTable = store.LocalTable
	return NewOnNodes(cfg, nodes, store.Database(), log, reg)
}

// NewOnNodes is New over the nodes of a cluster, whose tables are
// replicated: cfg.LocalTable names the tables each node holds. A merge is
// then not waited for (replication_alter_partitions_sync = 0): 18.16 fails
// some waits for a replicated OPTIMIZE ("Unknown log entry type: 0", seen
// under inserts), and the merge runs on every replica from the shard's log
// either way; Outcome.Took is then the time to schedule it.
func NewOnNodes(cfg Config, nodes []Node, db string, log *slog.Logger, reg prometheus.Registerer) *Keeper {
	k := newKeeper(cfg, nodes, db, log, reg)
	k.replicated = true
	return k
}

func newKeeper(cfg Config, nodes []Node, db string, log *slog.Logger, reg prometheus.Registerer) *Keeper {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.MaxParts <= 0 {
		cfg.MaxParts = DefaultMaxParts
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	k := &Keeper{cfg: cfg, nodes: nodes, db: db, log: log, m: newMetrics(reg)}
	// Every table's results at 0 from the start: an alert on the increase
	// of too_large or failed then sees the first one.
	for _, t := range cfg.Tables {
		for _, r := range []string{ResultDone, ResultBusy, ResultFailed, ResultTooLarge} {
			k.m.compactions.WithLabelValues(t, r)
		}
	}
	return k
}

// Outcome is what a round did with one table (on one node).
type Outcome struct {
	Table  string
	Node   string
	Parts  int   // active parts before
	Bytes  int64 // on disk before
	Result string
	Took   time.Duration // of the merge, when one ran
}

// Results of a table in a round (the result label of
// tributary_loader_compactions_total, except the first two, which are not
// counted).
const (
	ResultMissing  = "missing"   // the table does not exist (yet)
	ResultFewParts = "few_parts" // MaxParts or fewer: nothing to do
	ResultMerging  = "merging"   // ClickHouse is merging it: look again next round
	ResultTooLarge = "too_large" // over MaxBytes: left to ClickHouse's merges
	ResultDone     = "done"      // merged
	ResultBusy     = "busy"      // ClickHouse refused: another merge took its parts
	ResultFailed   = "failed"
)

// decide is what a round does with a table in state st.
func decide(st tableState, cfg Config) string {
	switch {
	case !st.exists:
		return ResultMissing
	case st.parts <= cfg.MaxParts:
		return ResultFewParts
	case st.merges > 0:
		return ResultMerging
	case st.bytes > cfg.MaxBytes:
		return ResultTooLarge
	}
	return ""
}

// tableState is a table's parts and merges as system tables show them.
type tableState struct {
	exists bool
	parts  int
	bytes  int64
	merges int
}

// Round looks at every table once and merges those that need it, one at a
// time (a merge is one ClickHouse thread; two at once would compete with
// the loader's inserts and the API's reads for the same cores).
func (k *Keeper) Round(ctx context.Context) ([]Outcome, error) {
	var out []Outcome
	var errs []error
	most := map[string]int{} // per table, the most parts of any node
	for _, n := range k.nodes {
		o, err := k.roundOn(ctx, n, most)
		out = append(out, o...)
		if err != nil {
			errs = append(errs, err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	for name, parts := range most {
		k.m.parts.WithLabelValues(name).Set(float64(parts))
	}
	return out, errors.Join(errs...)
}

// roundOn is a round on one node; most collects each table's parts.
func (k *Keeper) roundOn(ctx context.Context, n Node, most map[string]int) ([]Outcome, error) {
	states, err := k.states(ctx, n.Conn, k.local())
	if err != nil {
		if n.Name != "" {
			err = fmt.Errorf("%s: %w", n.Name, err)
		}
		return nil, err
	}
	var out []Outcome
	var errs []error
	for _, name := range k.cfg.Tables {
		st := states[name]
		if st.exists {
			most[name] = max(most[name], st.parts)
		}
		o := Outcome{Table: name, Node: n.Name, Parts: st.parts, Bytes: st.bytes, Result: decide(st, k.cfg)}
		switch o.Result {
		case ResultMissing, ResultFewParts, ResultMerging:
		case ResultTooLarge:
			k.m.compactions.WithLabelValues(name, o.Result).Inc()
			k.log.Warn("table too large to merge whole; its lookups open every part",
				slog.String("table", name), slog.String("node", n.Name), slog.Int("parts", st.parts), slog.Int64("bytes", st.bytes),
				slog.Int64("max_bytes", k.cfg.MaxBytes))
		default:
			o.Result, o.Took, err = k.merge(ctx, n.Conn, name)
			k.m.compactions.WithLabelValues(name, o.Result).Inc()
			if err != nil {
				errs = append(errs, err)
				break
			}
			if o.Result == ResultDone {
				k.m.seconds.WithLabelValues(name).Observe(o.Took.Seconds())
				k.log.Info("table merged", slog.String("table", name), slog.String("node", n.Name), slog.Int("parts_before", st.parts),
					slog.Int64("bytes", st.bytes), slog.Duration("took", o.Took))
			}
		}
		out = append(out, o)
		if ctx.Err() != nil {
			break
		}
	}
	return out, errors.Join(errs...)
}

// states reads the active parts and running merges of the tables.
// local maps the names of the node's tables to the names of Tables.
func (k *Keeper) local() map[string]string {
	m := make(map[string]string, len(k.cfg.Tables))
	for _, t := range k.cfg.Tables {
		m[k.localName(t)] = t
	}
	return m
}

func (k *Keeper) localName(t string) string {
	if k.cfg.LocalTable == nil {
		return t
	}
	return k.cfg.LocalTable(t)
}

// states reads the active parts and running merges of the tables, by the
// names of Tables; names maps a node's table to it.
func (k *Keeper) states(ctx context.Context, conn driver.Conn, names map[string]string) (map[string]tableState, error) {
	out := make(map[string]tableState, len(k.cfg.Tables))
	local := make([]string, 0, len(names))
	for l := range names {
		local = append(local, l)
	}
	rows, err := conn.Query(ctx, `SELECT table, toUInt64(count()), toUInt64(sum(bytes)) FROM system.parts
		WHERE database = ? AND active AND has(?, table) GROUP BY table`, k.db, local)
	if err != nil {
		return nil, fmt.Errorf("read parts: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var parts, bytes uint64
		if err := rows.Scan(&name, &parts, &bytes); err != nil {
			return nil, fmt.Errorf("read parts: %w", err)
		}
		name = names[name]
		out[name] = tableState{exists: true, parts: int(parts), bytes: int64(bytes)}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read parts: %w", err)
	}
	mrows, err := conn.Query(ctx, `SELECT table, toUInt64(count()) FROM system.merges
		WHERE database = ? AND has(?, table) GROUP BY table`, k.db, local)
	if err != nil {
		return nil, fmt.Errorf("read merges: %w", err)
	}
	defer mrows.Close()
	for mrows.Next() {
		var name string
		var n uint64
		if err := mrows.Scan(&name, &n); err != nil {
			return nil, fmt.Errorf("read merges: %w", err)
		}
		name = names[name]
		st := out[name]
		st.merges = int(n)
		out[name] = st
	}
	return out, mrows.Err()
}

// merge runs OPTIMIZE ... FINAL on table. With optimize_throw_if_noop,
// ClickHouse says when it did nothing (a merge it started meanwhile holds
// the parts): that is busy, not an error.
func (k *Keeper) merge(ctx context.Context, conn driver.Conn, table string) (string, time.Duration, error) {
	start := time.Now()
	sql := fmt.Sprintf("OPTIMIZE TABLE %s.%s FINAL", chstore.Quote(k.db), chstore.Quote(k.localName(table)))
	settings := clickhouse.Settings{"optimize_throw_if_noop": 1}
	if k.replicated {
		settings["replication_alter_partitions_sync"] = 0
	}
	err := conn.Exec(clickhouse.Context(ctx, clickhouse.WithSettings(settings)), sql)
	took := time.Since(start)
	switch {
	case err == nil:
		return ResultDone, took, nil
	case isNoop(err):
		return ResultBusy, took, nil
	case ctx.Err() != nil:
		return ResultFailed, took, ctx.Err()
	}
	return ResultFailed, took, fmt.Errorf("merge %s: %w", table, err)
}

// isNoop says whether err is ClickHouse declining an OPTIMIZE (code 388,
// CANNOT_ASSIGN_OPTIMIZE).
func isNoop(err error) bool {
	var ex *clickhouse.Exception
	if errors.As(err, &ex) {
		return ex.Code == 388
	}
	return strings.Contains(err.Error(), "Cannot OPTIMIZE") || strings.Contains(err.Error(), "CANNOT_ASSIGN_OPTIMIZE")
}

type metrics struct {
	parts       *prometheus.GaugeVec     // table
	compactions *prometheus.CounterVec   // table, result
	seconds     *prometheus.HistogramVec // table
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		parts: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tributary_loader_table_parts",
			Help: "Active ClickHouse parts of a loader table, as the compaction keeper last read them: every by-id read opens a granule in each part covering the id.",
		}, []string{"table"}),
		compactions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tributary_loader_compactions_total",
			Help: "Whole-table merges (OPTIMIZE FINAL) by table and result: done, busy (ClickHouse was merging it), failed, too_large (over --compact-max-bytes, left to ClickHouse's merges; counted every round it would have been merged).",
		}, []string{"table", "result"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tributary_loader_compaction_seconds",
			Help:    "Duration of whole-table merges that completed, by table.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2.5, 12), // 50 ms .. 20 min
		}, []string{"table"}),
	}
	if reg != nil {
		reg.MustRegister(m.parts, m.compactions, m.seconds)
	}
	return m
}
