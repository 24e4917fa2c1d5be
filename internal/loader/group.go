package loader

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The consumer group's health, seen from this loader. A loader that loses
// its group session stops consuming until it has joined again, and its
// uncommitted batch is replayed: harmless for the data, but a loader that
// loses it again and again makes no progress. Why it was lost decides the
// fix, and franz-go knows why, so the loader
//
//   - logs franz-go's own account of the group's life (joins, syncs,
//     heartbeat errors with the error, revokes and losses) through the
//     loader's logger (kafkaLogger), where it used to say only
//     "partitions lost";
//   - times every group request to the coordinator, from the write to the
//     response read (tributary_loader_group_request_seconds{request}:
//     heartbeat, join, sync, commit): a heartbeat that takes longer than
//     the session timeout (or does not come back: its read times out)
//     means the broker, not the loader, let the session expire;
//   - counts the sessions ended by an error
//     (tributary_loader_group_session_errors_total: the member expelled,
//     a join or sync refused, the coordinator unreachable) and the times
//     its partitions were lost rather than revoked
//     (tributary_loader_partitions_lost_total).
//
// A heartbeat runs on franz-go's own goroutine and connection, beside the
// batches: a long batch delays no heartbeat, and a blocked rebalance
// (BlockRebalanceOnPoll) keeps heartbeating until the loader allows it.

// groupRequests names the group requests timed, by Kafka request key.
var groupRequests = map[int16]string{
	kmsg.Heartbeat.Int16():    "heartbeat",
	kmsg.JoinGroup.Int16():    "join",
	kmsg.SyncGroup.Int16():    "sync",
	kmsg.OffsetCommit.Int16(): "commit",
}

// groupMetrics are the consumer group's metrics (see above).
type groupMetrics struct {
	requestSeconds *prometheus.HistogramVec // request
	sessionErrors  prometheus.Counter
	partitionsLost prometheus.Counter
}

func newGroupMetrics(reg prometheus.Registerer) *groupMetrics {
	g := &groupMetrics{
		requestSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tributary_loader_group_request_seconds",
			Help: "Round trip of the consumer group's requests to the coordinator (heartbeat, join, sync, commit), from the write to the response read or the read's timeout.",
			// Up to past the longest session timeout worth having: a
			// heartbeat slower than the session timeout loses the session.
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60},
		}, []string{"request"}),
		sessionErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tributary_loader_group_session_errors_total",
			Help: "Consumer group sessions ended by an error (expelled by the coordinator, a join or sync refused, the coordinator unreachable); the loader joins again. The log says which.",
		}),
		partitionsLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tributary_loader_partitions_lost_total",
			Help: "Times this loader lost its partitions without a rebalance (its session expired or was refused); its uncommitted batch is replayed by whoever owns them next.",
		}),
	}
	for _, r := range groupRequests {
		g.requestSeconds.WithLabelValues(r)
	}
	reg.MustRegister(g.requestSeconds, g.sessionErrors, g.partitionsLost)
	return g
}

// OnBrokerE2E times the group's requests (kgo.HookBrokerE2E).
func (g *groupMetrics) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if r, ok := groupRequests[key]; ok {
		g.requestSeconds.WithLabelValues(r).Observe(e2e.DurationE2E().Seconds())
	}
}

// OnGroupManageError counts a group session ended by err
// (kgo.HookGroupManageError); franz-go logs err itself (kafkaLogger).
func (g *groupMetrics) OnGroupManageError(error) { g.sessionErrors.Inc() }

// lost counts a loss of partitions. franz-go also calls the lost callback
// with none after a failed join (nothing was held): those are counted as
// session errors only.
func (g *groupMetrics) lost(m map[string][]int32) {
	if len(m) > 0 {
		g.partitionsLost.Inc()
	}
}

// kafkaLogger passes franz-go's log lines to the loader's logger, at
// franz-go's level, under one message with franz-go's as the event
// attribute and its key-value pairs as attributes. Its level follows the
// logger's: franz-go's debug lines (every request) only when the loader
// logs at debug.
type kafkaLogger struct{ log *slog.Logger }

// Level is the most verbose level the loader's logger takes.
func (k kafkaLogger) Level() kgo.LogLevel {
	for _, l := range []kgo.LogLevel{kgo.LogLevelDebug, kgo.LogLevelInfo, kgo.LogLevelWarn} {
		if k.log.Enabled(context.Background(), slogLevel(l)) {
			return l
		}
	}
	return kgo.LogLevelError
}

// Log logs one franz-go line.
func (k kafkaLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	attrs := make([]slog.Attr, 0, 1+len(keyvals)/2)
	attrs = append(attrs, slog.String("event", msg))
	for i := 0; i+1 < len(keyvals); i += 2 {
		key, ok := keyvals[i].(string)
		if !ok {
			continue // franz-go's keys are strings; anything else is not a pair
		}
		attrs = append(attrs, slog.Any(key, keyvals[i+1]))
	}
	k.log.LogAttrs(context.Background(), slogLevel(level), "kafka client", attrs...)
}

// slogLevel is slog's level of a franz-go level.
func slogLevel(l kgo.LogLevel) slog.Level {
	switch l {
	case kgo.LogLevelDebug:
		return slog.LevelDebug
	case kgo.LogLevelInfo:
		return slog.LevelInfo
	case kgo.LogLevelWarn:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}
