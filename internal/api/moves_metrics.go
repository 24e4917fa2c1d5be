package api

// Move gauges, computed when Prometheus scrapes the API:
//
//	tributary_moves_stuck{table}  moves in progress for longer than the grace period
//	tributary_moves_lost{table}   moves done whose document is on neither shard
//
// Why the API and not the loader: the gauges are the same query as
// GET /v1/anomalies/moves (one definition, so the alert and the listing
// never disagree), the API already reads ClickHouse and knows the grace
// period from the table config, and a scrape-time count needs no state. A
// loader would have to poll the same query on a timer. With several API
// replicas each exports the same value; the alert takes max by table.
// A failed count exports nothing for that scrape (the error is logged), so
// a broken query is never a reassuring zero. The count reads the whole log
// (about 0.3 s at 100k moves, 4 s at 1M, measured on the 2-core machine),
// so a count younger than movesCountMaxAge is reused: several scrapers, or
// a short scrape interval, do not multiply it.

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/query"
)

var (
	movesStuckDesc = prometheus.NewDesc("tributary_moves_stuck",
		"Moves in progress for longer than the move log's grace period.", []string{"table"}, nil)
	movesLostDesc = prometheus.NewDesc("tributary_moves_lost",
		"Moves done whose document is live on neither shard (and never arrived at the target).", []string{"table"}, nil)
)

// movesCountMaxAge is how long a count is reused by later scrapes.
const movesCountMaxAge = 15 * time.Second

// movesCollector counts stuck and lost moves at scrape time.
type movesCollector struct {
	q       *query.Queries
	log     *slog.Logger
	l       *query.MoveLog
	timeout time.Duration

	mu          sync.Mutex // serializes counts; guards the fields below
	at          time.Time  // when stuck and lost were counted
	stuck, lost int64
}

// counts returns a count no older than movesCountMaxAge.
func (c *movesCollector) counts() (stuck, lost int64, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < movesCountMaxAge {
		return c.stuck, c.lost, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	now := time.Now()
	stuck, lost, err = c.q.MoveAnomalyCounts(ctx, c.l, movesCutoff(now, c.l))
	if err != nil {
		return 0, 0, err
	}
	c.at, c.stuck, c.lost = now, stuck, lost
	return stuck, lost, nil
}

// registerMoveMetrics registers the move gauges when a move log is
// configured.
func (s *Server) registerMoveMetrics(reg prometheus.Registerer) {
	if l, ok := query.MoveLogOf(s.cfg.Tables, s.cfg.DocumentsTable); ok {
		reg.MustRegister(&movesCollector{q: s.q, log: s.log, l: l, timeout: max(s.cfg.QueryTimeout, time.Second)})
	}
}

// Describe implements prometheus.Collector.
func (c *movesCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- movesStuckDesc
	ch <- movesLostDesc
}

// Collect implements prometheus.Collector.
func (c *movesCollector) Collect(ch chan<- prometheus.Metric) {
	stuck, lost, err := c.counts()
	if err != nil {
		c.log.Warn("move gauges not exported", slog.Any("err", err))
		return
	}
	table := c.l.Documents.Name
	ch <- prometheus.MustNewConstMetric(movesStuckDesc, prometheus.GaugeValue, float64(stuck), table)
	ch <- prometheus.MustNewConstMetric(movesLostDesc, prometheus.GaugeValue, float64(lost), table)
}
