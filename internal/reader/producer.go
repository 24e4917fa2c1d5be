package reader

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/envelope"
)

// partitioner routes keyed records (changes) exactly as Kafka's default
// partitioner does (murmur2 of the key), so any Kafka client agrees on
// where an id lives; unkeyed records (watermarks) go to the partition set
// on the record.
type partitioner struct{ keyed kgo.Partitioner }

func (p partitioner) ForTopic(t string) kgo.TopicPartitioner {
	return topicPartitioner{p.keyed.ForTopic(t)}
}

type topicPartitioner struct{ keyed kgo.TopicPartitioner }

func (topicPartitioner) RequiresConsistency(*kgo.Record) bool { return true }
func (p topicPartitioner) Partition(r *kgo.Record, n int) int {
	if r.Key == nil {
		return int(r.Partition)
	}
	return p.keyed.Partition(r, n)
}

// newProducer builds the idempotent, acks=all producer. MaxBufferedRecords
// and MaxBufferedBytes bound memory: when Kafka is slow, Produce blocks and the reader stops
// reading WAL (backpressure); the slot holds the WAL meanwhile.
func newProducer(brokers []string, maxBuffered, maxBufferedBytes int) (*kgo.Client, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(5*time.Millisecond),
		kgo.MaxBufferedRecords(maxBuffered),
		// Bytes too: with 1 KB rows, 100k records alone would be 100 MB.
		kgo.MaxBufferedBytes(maxBufferedBytes),
		kgo.RecordPartitioner(partitioner{kgo.StickyKeyPartitioner(nil)}),
		// Records are retried without limit (the default): a stuck broker
		// shows as lag and backpressure, never as a skipped change. Topics
		// are created before producing, so unknown-topic errors are retried
		// too (metadata may lag creation).
		kgo.UnknownTopicRetries(-1),
	)
	if err != nil {
		return nil, fmt.Errorf("kafka producer: %w", err)
	}
	return cl, nil
}

// ensureTopics creates missing topics and returns the partition count of
// each.
func ensureTopics(ctx context.Context, cl *kgo.Client, topics []string, partitions int32) (map[string]int32, error) {
	adm := kadm.NewClient(cl)
	res, err := adm.CreateTopics(ctx, partitions, -1, nil, topics...)
	if err != nil {
		return nil, fmt.Errorf("create topics: %w", err)
	}
	for _, r := range res.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			return nil, fmt.Errorf("create topic %s: %w", r.Topic, r.Err)
		}
	}
	md, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("describe topics: %w", err)
	}
	out := map[string]int32{}
	for _, t := range topics {
		d, ok := md[t]
		if !ok || d.Err != nil || len(d.Partitions) == 0 {
			return nil, fmt.Errorf("topic %s has no partitions after creation (err %v)", t, d.Err)
		}
		out[t] = int32(len(d.Partitions))
	}
	return out, nil
}

// watermarkRecords builds one watermark per partition of every topic.
func watermarkRecords(shard int, lsn envelope.LSN, ts time.Time, parts map[string]int32) ([]*kgo.Record, error) {
	var out []*kgo.Record
	for topic, n := range parts {
		for p := int32(0); p < n; p++ {
			b, err := envelope.Encode(&envelope.Event{
				Kind: envelope.KindWatermark, Shard: shard, CommitLSN: lsn, CommitTime: ts.UTC(), Partitions: n,
			})
			if err != nil {
				return nil, fmt.Errorf("encode watermark: %w", err)
			}
			out = append(out, &kgo.Record{Topic: topic, Partition: p, Value: b})
		}
	}
	return out, nil
}
