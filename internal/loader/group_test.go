package loader

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/internal/tables"
)

// logRecords is a slog handler that keeps what it is given, at level and above.
type logRecords struct {
	level slog.Level
	mu    sync.Mutex
	recs  []slog.Record
}

func (h *logRecords) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }
func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}
func (h *logRecords) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecords) WithGroup(string) slog.Handler      { return h }

// find returns the attributes of the first record with message msg whose
// attribute event is event, or nil.
func (h *logRecords) find(msg, event string) map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		attrs := map[string]string{"level": r.Level.String()}
		r.Attrs(func(a slog.Attr) bool {
			attrs[a.Key] = a.Value.String()
			return true
		})
		if r.Message == msg && attrs["event"] == event {
			return attrs
		}
	}
	return nil
}

// TestGroupRequestsTimed: the group's requests are timed by name, other
// requests not at all; session errors and losses of partitions are
// counted, a lost callback with nothing held (a failed join) not as a loss.
func TestGroupRequestsTimed(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := newGroupMetrics(reg)
	g.OnBrokerE2E(kgo.BrokerMetadata{}, kmsg.Heartbeat.Int16(), kgo.BrokerE2E{TimeToWrite: time.Second, ReadWait: 10 * time.Second, TimeToRead: time.Second})
	g.OnBrokerE2E(kgo.BrokerMetadata{}, kmsg.OffsetCommit.Int16(), kgo.BrokerE2E{ReadWait: 20 * time.Millisecond})
	g.OnBrokerE2E(kgo.BrokerMetadata{}, kmsg.Fetch.Int16(), kgo.BrokerE2E{ReadWait: time.Minute})
	g.OnGroupManageError(kerr.UnknownMemberID)
	g.lost(map[string][]int32{})
	g.lost(map[string][]int32{"t": {0, 1}})

	for request, want := range map[string]uint64{"heartbeat": 1, "commit": 1, "join": 0, "sync": 0} {
		h := observed(t, reg, request)
		if h.GetSampleCount() != want {
			t.Errorf("%s: %d requests timed, want %d", request, h.GetSampleCount(), want)
		}
		if request == "heartbeat" && h.GetSampleSum() != 12 {
			t.Errorf("heartbeat: %v s timed, want 12 (write, wait for the response, read)", h.GetSampleSum())
		}
	}
	if n := seriesCount(g.requestSeconds); n != 4 {
		t.Errorf("%d request series, want the 4 group requests (a fetch is not one)", n)
	}
	if v := counterValue(t, g.sessionErrors); v != 1 {
		t.Errorf("session errors %v, want 1", v)
	}
	if v := counterValue(t, g.partitionsLost); v != 1 {
		t.Errorf("partitions lost %v, want 1 (the lost callback with none held is a failed join)", v)
	}
}

// observed is the histogram of request from reg.
func observed(t *testing.T, reg *prometheus.Registry, request string) interface {
	GetSampleCount() uint64
	GetSampleSum() float64
} {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "tributary_loader_group_request_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "request" && l.GetValue() == request {
					return m.GetHistogram()
				}
			}
		}
	}
	t.Fatalf("no tributary_loader_group_request_seconds{request=%q}", request)
	return nil
}

// TestKafkaLoggerLevels: franz-go's lines reach the logger at their level,
// franz-go asks for lines only down to the logger's level, and key-value
// pairs become attributes.
func TestKafkaLoggerLevels(t *testing.T) {
	for _, tc := range []struct {
		logger slog.Level
		want   kgo.LogLevel
	}{
		{slog.LevelDebug, kgo.LogLevelDebug},
		{slog.LevelInfo, kgo.LogLevelInfo},
		{slog.LevelWarn, kgo.LogLevelWarn},
		{slog.LevelError, kgo.LogLevelError},
	} {
		k := kafkaLogger{slog.New(&logRecords{level: tc.logger})}
		if got := k.Level(); got != tc.want {
			t.Errorf("logger at %v: franz-go asked for %v, want %v", tc.logger, got, tc.want)
		}
	}
	h := &logRecords{level: slog.LevelDebug}
	k := kafkaLogger{slog.New(h)}
	k.Log(kgo.LogLevelInfo, "heartbeat errored", "group", "g", "err", kerr.UnknownMemberID)
	k.Log(kgo.LogLevelWarn, "odd", "dangling")
	got := h.find("kafka client", "heartbeat errored")
	if got == nil {
		t.Fatal("no \"kafka client\" record with event \"heartbeat errored\"")
	}
	if got["level"] != "INFO" || got["group"] != "g" || !strings.Contains(got["err"], "UNKNOWN_MEMBER_ID") {
		t.Errorf("record %v: want level INFO, group g, err UNKNOWN_MEMBER_ID", got)
	}
	if odd := h.find("kafka client", "odd"); odd == nil || odd["level"] != "WARN" || len(odd) != 2 {
		t.Errorf("record %v: want level WARN and the event only (a key without a value is dropped)", odd)
	}
}

// TestLostSessionCountedAndExplained: the loader's group client against a
// broker whose coordinator has forgotten the member (a heartbeat answered
// UNKNOWN_MEMBER_ID, as when a session expired on a broker that answered
// too late): the loss is counted, and the log says why, in franz-go's
// words and with the broker's error — where it used to say only
// "partitions lost".
func TestLostSessionCountedAndExplained(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "tributary.t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h := &logRecords{level: slog.LevelInfo}
	tc := &tables.Config{Tables: []tables.Table{{Name: "t", Topic: "tributary.t"}}}
	l := &Loader{
		cfg: Config{Brokers: c.ListenAddrs(), Group: "g", Tables: tc, SessionTimeout: DefaultSessionTimeout},
		log: slog.New(h), m: newMetrics(prometheus.NewRegistry(), tc, nil),
	}
	cl, err := l.newClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitFor(ctx, t, "the partitions assigned", func() bool { return h.find("partitions assigned", "") != nil })

	c.ControlKey(kmsg.Heartbeat.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = kerr.UnknownMemberID.Code
		return resp, nil, true
	})
	waitFor(ctx, t, "the partitions lost", func() bool { return counterValue(t, l.m.group.partitionsLost) == 1 })

	why := h.find("kafka client", "heartbeat errored")
	if why == nil || !strings.Contains(why["err"], "UNKNOWN_MEMBER_ID") {
		t.Errorf("the log does not say why the partitions were lost: heartbeat errored record %v", why)
	}
	if v := counterValue(t, l.m.group.sessionErrors); v < 1 {
		t.Errorf("session errors %v, want at least 1", v)
	}
	if n := observedCount(t, l.m.group.requestSeconds, "heartbeat"); n < 1 {
		t.Errorf("%d heartbeats timed, want at least the one refused", n)
	}
}

// seriesCount is how many series c collects.
func seriesCount(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	n := 0
	for range ch {
		n++
	}
	return n
}

// observedCount is how many observations the histogram vec holds for request.
func observedCount(t *testing.T, v *prometheus.HistogramVec, request string) uint64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(v)
	return observed(t, reg, request).GetSampleCount()
}

// waitFor polls cond until it holds, failing the test when ctx ends first.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
