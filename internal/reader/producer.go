package reader

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// DefaultKafkaLinger is how long a change record waits for others to share
// its produce request (Config.KafkaLinger, --kafka-linger). Shorter is
// faster when the fleet is quiet: 1 ms took commit -> visible p50 from 33
// to 25 ms at 100 changes/s (when the watermarks lingered too). But at
// 20,000 changes/s on a saturated 2-core machine 1 ms made requests so
// small that the reader's commit -> ack went from 27 to 160-330 ms p50 and
// the loader fell seconds behind, where 5 ms kept up
// (docs/benchmarks-log.md, "Producer linger").
// 5 ms is the default that holds under load.
const DefaultKafkaLinger = 5 * time.Millisecond

// newProducer builds the idempotent, acks=all producer. MaxBufferedRecords
// and MaxBufferedBytes bound memory: when Kafka is slow, Produce blocks and the reader stops
// reading WAL (backpressure); the slot holds the WAL meanwhile.
// kafkaOpts are the connection's TLS and SASL (kafkaconn.Security).
//
// A commit's records wait linger before they are sent (DefaultKafkaLinger);
// its watermark goes through a producer of its own that does not wait
// (newWatermarkProducer).
func newProducer(brokers []string, kafkaOpts []kgo.Opt, linger time.Duration, maxBuffered, maxBufferedBytes int) (*kgo.Client, error) {
	return newProducerClient("kafka producer", brokers, kafkaOpts,
		kgo.ProducerLinger(linger),
		kgo.MaxBufferedRecords(maxBuffered),
		// Bytes too: with 1 KB rows, 100k records alone would be 100 MB.
		kgo.MaxBufferedBytes(maxBufferedBytes),
		kgo.RecordPartitioner(partitioner{kgo.StickyKeyPartitioner(nil)}))
}

// newWatermarkProducer builds the producer of the watermark records: the
// same as newProducer's but without linger, so a watermark is sent the
// moment its commit's records are acknowledged instead of waiting the
// linger a second time. Its records are few (one round per
// WatermarkMinGap at most, a record per partition), so batching them buys
// nothing. A second producer keeps the watermark invariant: a watermark is
// produced only after Kafka acknowledged the records it covers, so it
// follows them in every partition whichever producer sends it.
func newWatermarkProducer(brokers []string, kafkaOpts []kgo.Opt) (*kgo.Client, error) {
	return newProducerClient("kafka watermark producer", brokers, kafkaOpts,
		kgo.ProducerLinger(0),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
}

// newProducerClient is a producer with what both of the reader's need:
// every in-sync replica's acknowledgement, and records retried without
// limit (the default): a stuck broker shows as lag and backpressure, never
// as a skipped change. Topics are created before producing, so
// unknown-topic errors are retried too (metadata may lag creation).
func newProducerClient(what string, brokers []string, kafkaOpts []kgo.Opt, opts ...kgo.Opt) (*kgo.Client, error) {
	all := append(slices.Clone(kafkaOpts),
		kgo.SeedBrokers(brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.UnknownTopicRetries(-1))
	cl, err := kgo.NewClient(append(all, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return cl, nil
}

// ensureTopics creates missing topics (rf replicas each, 0: the cluster's
// default) and returns the partition count of each.
func ensureTopics(ctx context.Context, cl *kgo.Client, topics []string, partitions int32, rf int16) (map[string]int32, error) {
	adm := kadm.NewClient(cl)
	missing, err := missingTopics(ctx, adm, topics)
	if err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		res, err := adm.CreateTopics(ctx, partitions, brokerReplicas(rf), nil, missing...)
		if err != nil {
			return nil, fmt.Errorf("create topics: %w", err)
		}
		for _, r := range res.Sorted() {
			if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
				return nil, fmt.Errorf("create topic %s: %w", r.Topic, r.Err)
			}
		}
	}
	return waitPartitions(ctx, adm, topics, 30*time.Second)
}

// missingTopics returns the topics that the metadata does not show, so
// that only those are created. The metadata is any broker's to answer;
// CreateTopics, even for topics that exist, queues on the controller,
// which takes them one at a time: a process starting many shards, each
// asking for every topic, timed out there and retried for minutes
// (docs/deploy.md, "A fleet on one machine"). Two shards that both find a
// topic missing both create it; the second gets TopicAlreadyExists.
//
// The metadata asked is every topic's, not the named ones': a metadata
// request naming a topic that does not exist is retried by the client
// until it appears, which cost every new deployment's first start about
// 11 s (TestEndToEndTwoShards: 1.0 s before, 12.2 s with named topics).
func missingTopics(ctx context.Context, adm *kadm.Client, topics []string) ([]string, error) {
	md, err := adm.ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("describe topics: %w", err)
	}
	var out []string
	for _, t := range topics {
		if d, ok := md[t]; !ok || d.Err != nil || len(d.Partitions) == 0 {
			out = append(out, t)
		}
	}
	return out, nil
}

// brokerReplicas is the replication factor CreateTopics sends for rf:
// -1 asks the broker for its default.replication.factor.
func brokerReplicas(rf int16) int16 {
	if rf <= 0 {
		return -1
	}
	return rf
}

// waitPartitions returns the partition count of each topic once the
// cluster's metadata shows all of them. A broker answers CreateTopics
// before every broker's metadata cache knows the topic, so right after
// creation a metadata request may still say UNKNOWN_TOPIC_OR_PARTITION;
// that is retried until the deadline, then reported with the last error.
func waitPartitions(ctx context.Context, adm *kadm.Client, topics []string, within time.Duration) (map[string]int32, error) {
	deadline := time.Now().Add(within)
	backoff := 50 * time.Millisecond
	for {
		out, missing, err := partitionCounts(ctx, adm, topics)
		if err == nil && missing == "" {
			return out, nil
		}
		if err == nil {
			err = errors.New(missing)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("topics not visible in Kafka metadata %s after creation: %w", within, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// partitionCounts reads the metadata once; missing describes the first
// topic that has no partitions yet.
func partitionCounts(ctx context.Context, adm *kadm.Client, topics []string) (map[string]int32, string, error) {
	md, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		return nil, "", fmt.Errorf("describe topics: %w", err)
	}
	out := map[string]int32{}
	for _, t := range topics {
		d, ok := md[t]
		if !ok || d.Err != nil || len(d.Partitions) == 0 {
			return nil, fmt.Sprintf("topic %s has no partitions yet (err %v)", t, d.Err), nil
		}
		out[t] = int32(len(d.Partitions))
	}
	return out, "", nil
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
