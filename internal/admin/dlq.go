// Package admin is what tributaryctl does: operator actions on a running
// deployment. Every action logs what it did (log/slog, one line per
// change), is safe to run twice, and refuses with the reason when it is
// not safe.
//
// Dead letters are the loader's: a record it could not apply, copied to
// the dead-letter topic with its key and value unchanged and the headers
// tributary.source.{topic,partition,offset}, tributary.reason and
// tributary.error (internal/loader's sendDead). Replaying one produces its
// key and value again to its source topic and partition; the loader keeps
// the newest version of each row, so a replayed change that is older than
// what ClickHouse holds is dropped and replaying twice changes nothing.
package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/tables"
)

// Dead-letter headers, as the loader writes them.
const (
	headerSourceTopic     = "tributary.source.topic"
	headerSourcePartition = "tributary.source.partition"
	headerSourceOffset    = "tributary.source.offset"
	headerReason          = "tributary.reason"
	headerError           = "tributary.error"
)

// DeadLetter is one record of the dead-letter topic.
type DeadLetter struct {
	// Partition and Offset are its position in the dead-letter topic.
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
	// Time is when the loader dead-lettered it.
	Time time.Time `json:"time"`
	// SourceTopic, SourcePartition and SourceOffset are where it was read.
	SourceTopic     string `json:"source_topic"`
	SourcePartition int32  `json:"source_partition"`
	SourceOffset    int64  `json:"source_offset"`
	// Table is the configured table of SourceTopic ("" when none is).
	Table  string `json:"table,omitempty"`
	Reason string `json:"reason"`
	Error  string `json:"error"`
	Key    string `json:"key"`
	// Problem says why the record cannot be replayed ("" when it can).
	Problem string `json:"problem,omitempty"`

	value []byte
}

// Filter picks dead letters: a zero field matches all.
type Filter struct {
	Reason, Table string
}

func (f Filter) match(d DeadLetter) bool {
	return (f.Reason == "" || d.Reason == f.Reason) && (f.Table == "" || d.Table == f.Table)
}

// ReadDLQ reads the dead-letter topic from its start to its end as of the
// call, keeping the records f matches. A record without the loader's
// headers is kept with a Problem saying so.
func ReadDLQ(ctx context.Context, cl *kgo.Client, topic string, cfg *tables.Config, f Filter) ([]DeadLetter, error) {
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("dead-letter topic %s: end offsets: %w", topic, err)
	}
	if err := ends.Error(); err != nil {
		return nil, fmt.Errorf("dead-letter topic %s: end offsets: %w", topic, err)
	}
	want := map[int32]int64{}
	start := map[string]map[int32]kgo.Offset{topic: {}}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
			start[topic][o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	if len(want) == 0 {
		return nil, nil
	}
	cl.AddConsumePartitions(start)
	defer cl.RemoveConsumePartitions(map[string][]int32{topic: slices.Collect(maps.Keys(want))})
	var out []DeadLetter
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("dead-letter topic %s: read: %w", topic, err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = errors.Join(ferr, fmt.Errorf("%s[%d]: %w", t, p, err)) })
		if ferr != nil {
			return nil, fmt.Errorf("dead-letter topic %s: read: %w", topic, ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if r.Offset+1 >= end {
				delete(want, r.Partition)
			}
			if d := parseDeadLetter(r, cfg); f.match(d) {
				out = append(out, d)
			}
		})
	}
	return out, nil
}

func parseDeadLetter(r *kgo.Record, cfg *tables.Config) DeadLetter {
	h := map[string]string{}
	for _, kv := range r.Headers {
		h[kv.Key] = string(kv.Value)
	}
	d := DeadLetter{Partition: r.Partition, Offset: r.Offset, Time: r.Timestamp, Key: string(r.Key), value: r.Value,
		SourceTopic: h[headerSourceTopic], Reason: h[headerReason], Error: h[headerError]}
	part, perr := strconv.ParseInt(h[headerSourcePartition], 10, 32)
	off, oerr := strconv.ParseInt(h[headerSourceOffset], 10, 64)
	d.SourcePartition, d.SourceOffset = int32(part), off
	switch {
	case d.SourceTopic == "" || perr != nil || oerr != nil:
		d.Problem = "no tributary.source.* headers: not written by the loader"
		return d
	}
	if t, ok := cfg.ByTopic(d.SourceTopic); ok {
		d.Table = t.Name
	} else {
		d.Problem = fmt.Sprintf("no table of the table config reads topic %q: add it first", d.SourceTopic)
	}
	return d
}

// Replay re-produces each replayable dead letter to its source topic and
// partition (its key's partition, so it stays in order with the row's
// other changes) and returns how many it produced. Dead letters with a
// Problem are skipped and logged.
func Replay(ctx context.Context, cl *kgo.Client, dead []DeadLetter, log *slog.Logger) (int, error) {
	var out []*kgo.Record
	for _, d := range dead {
		if d.Problem != "" {
			log.Warn("dead letter not replayed", slog.Int("partition", int(d.Partition)), slog.Int64("offset", d.Offset),
				slog.String("problem", d.Problem))
			continue
		}
		out = append(out, &kgo.Record{Topic: d.SourceTopic, Partition: d.SourcePartition, Key: []byte(d.Key), Value: d.value})
	}
	if len(out) == 0 {
		return 0, nil
	}
	if err := cl.ProduceSync(ctx, out...).FirstErr(); err != nil {
		return 0, fmt.Errorf("replay: produce: %w", err)
	}
	for i, d := range dead {
		if d.Problem != "" {
			continue
		}
		log.Info("dead letter replayed", slog.Int("partition", int(d.Partition)), slog.Int64("offset", d.Offset),
			slog.String("topic", d.SourceTopic), slog.Int("source_partition", int(d.SourcePartition)),
			slog.Int64("new_offset", out[countOK(dead[:i])].Offset), slog.String("reason", d.Reason))
	}
	return len(out), nil
}

func countOK(dead []DeadLetter) int {
	n := 0
	for _, d := range dead {
		if d.Problem == "" {
			n++
		}
	}
	return n
}

// NewProducer is the Kafka client replay needs: it writes to the
// partition a record names, as the source records were routed.
func NewProducer(brokers []string, opts ...kgo.Opt) (*kgo.Client, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return cl, nil
}
