package latency

// The physical floor of bench latency: what one change costs at least on
// its way from a shard to the API with this Kafka and this ClickHouse — a
// Kafka produce acknowledgement (acks=all, idempotent, no linger) plus a
// one-row ClickHouse insert round trip, one after the other as the
// pipeline does them. Measured in the same run as the samples, at the same
// rate, so that the ratios in the table compare numbers taken under the
// same machine load.

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/flagenv"
)

// floor is the floor's connections: a producer and a ClickHouse pool,
// and the bench's own topic and table (dropped by close).
type floor struct {
	producer *kgo.Client
	ch       driver.Conn
	topic    string
	table    string
}

func newFloor(ctx context.Context, brokers, chAddr, chUser, chPassword string) (*floor, error) {
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	f := &floor{topic: "tributary_bench_floor_" + run, table: "default.tributary_bench_floor_" + run}
	var err error
	f.producer, err = kgo.NewClient(kgo.SeedBrokers(flagenv.List(brokers)...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0), kgo.AllowAutoTopicCreation(), kgo.DefaultProduceTopic(f.topic))
	if err != nil {
		return nil, fmt.Errorf("floor: kafka client: %w", err)
	}
	if f.ch, err = chstore.Dial(ctx, chstore.DialOptions{Addr: chAddr, Username: chUser, Password: chPassword, MaxOpenConns: 2}); err != nil {
		f.producer.Close()
		return nil, fmt.Errorf("floor: %w", err)
	}
	// ORDER BY in the engine clause: ClickHouse 18.16 and current accept it.
	if err := f.ch.Exec(ctx, "CREATE TABLE "+f.table+" (n UInt64, at DateTime) ENGINE = MergeTree ORDER BY n"); err != nil {
		f.close(ctx)
		return nil, fmt.Errorf("floor: create %s: %w", f.table, err)
	}
	// The first produce creates the topic: not part of any sample.
	if err := f.producer.ProduceSync(ctx, &kgo.Record{Value: []byte("warmup")}).FirstErr(); err != nil {
		f.close(ctx)
		return nil, fmt.Errorf("floor: produce to %s: %w", f.topic, err)
	}
	return f, nil
}

// sample is one floor measurement: the produce acknowledgement, then the
// insert; it returns both and their sum's outcome.
func (f *floor) sample(ctx context.Context, n int) (produce, insert time.Duration, err error) {
	t0 := time.Now()
	if err := f.producer.ProduceSync(ctx, &kgo.Record{Value: []byte(strconv.Itoa(n))}).FirstErr(); err != nil {
		return 0, 0, fmt.Errorf("floor produce: %w", err)
	}
	t1 := time.Now()
	b, err := f.ch.PrepareBatch(ctx, "INSERT INTO "+f.table+" (n, at)")
	if err == nil {
		if err = b.Append(uint64(n), t1); err == nil {
			err = b.Send()
		} else {
			b.Abort() //nolint:errcheck // the append's error is the one to report
		}
	}
	if err != nil {
		return 0, 0, fmt.Errorf("floor insert: %w", err)
	}
	return t1.Sub(t0), time.Since(t1), nil
}

// close drops the bench's table and closes the connections (the topic
// stays: it is one record per sample).
func (f *floor) close(ctx context.Context) {
	if f.ch != nil {
		f.ch.Exec(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+f.table) //nolint:errcheck // best effort
		f.ch.Close()
	}
	f.producer.Close()
}

// floorSample is one floor measurement.
type floorSample struct {
	ProduceMS float64 `json:"produce_ms"`
	InsertMS  float64 `json:"insert_ms"`
	Err       string  `json:"error,omitempty"`
}

// runFloor takes n floor samples at rate per second, one at a time (a
// sample that takes longer than the interval delays the next).
func runFloor(ctx context.Context, f *floor, n, rate int) []floorSample {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	out := make([]floorSample, 0, n)
	for i := range n {
		if i > 0 {
			select {
			case <-tick.C:
			case <-ctx.Done():
				return out
			}
		}
		p, ins, err := f.sample(ctx, i)
		s := floorSample{ProduceMS: msOf(p), InsertMS: msOf(ins)}
		if err != nil {
			s.Err = err.Error()
		}
		out = append(out, s)
	}
	return out
}

// floorNames are the floor's rows of the table.
const (
	floorRow        = "physical floor (Kafka ack + insert)"
	floorProduceRow = "  Kafka produce ack (acks=all)"
	floorInsertRow  = "  ClickHouse one-row insert"
)

// floorSummaries are the floor's rows (none without samples).
func floorSummaries(fs []floorSample) []summary {
	if len(fs) == 0 {
		return nil
	}
	row := func(name string, v func(floorSample) float64) summary {
		return summarize(name, len(fs), func(i int) (float64, string) {
			if fs[i].Err != "" {
				return 0, "error"
			}
			return v(fs[i]), "ok"
		})
	}
	return []summary{
		row(floorRow, func(s floorSample) float64 { return s.ProduceMS + s.InsertMS }),
		row(floorProduceRow, func(s floorSample) float64 { return s.ProduceMS }),
		row(floorInsertRow, func(s floorSample) float64 { return s.InsertMS }),
	}
}

// ratios are the goals as ratios of p99s in one run (0: a row
// is missing).
type ratios struct {
	RYWToVisibleP99   float64 `json:"ryw_to_visible_p99"`
	VisibleToFloorP99 float64 `json:"visible_to_floor_p99"`
}

func ratiosOf(rows []summary) ratios {
	p99 := map[string]float64{}
	for _, r := range rows {
		if r.OK > 0 {
			p99[r.Name] = r.P99MS
		}
	}
	ratio := func(a, b string) float64 {
		if p99[a] <= 0 || p99[b] <= 0 {
			return 0
		}
		return p99[a] / p99[b]
	}
	return ratios{RYWToVisibleP99: ratio(rywRow, visibleRow), VisibleToFloorP99: ratio(visibleRow, floorRow)}
}
