package reader

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// stateOnFake is a state store on a fake one-broker Kafka whose state
// topic holds one state of its identity (confirmed 42).
func stateOnFake(ctx context.Context, t *testing.T) (*kfake.Cluster, *stateStore) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t.state"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	s := &stateStore{cl: cl, topic: "t.state", id: shardIdentity{SystemID: "7001", Database: "db", Slot: "slot_3"}}
	if err := s.save(ctx, readerState{Slot: "slot_3", Shard: 3, SnapshotDone: true, Confirmed: 42}); err != nil {
		t.Fatal(err)
	}
	return c, s
}

// listOffsetsAnswer answers every partition of a ListOffsets request with
// the error code.
func listOffsetsAnswer(kreq kmsg.Request, code int16) kmsg.Response {
	req := kreq.(*kmsg.ListOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	for _, rt := range req.Topics {
		t := kmsg.NewListOffsetsResponseTopic()
		t.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			p := kmsg.NewListOffsetsResponseTopicPartition()
			p.Partition, p.ErrorCode, p.Offset = rp.Partition, code, -1
			t.Partitions = append(t.Partitions, p)
		}
		resp.Topics = append(resp.Topics, t)
	}
	return resp
}

// TestStateEndOffsetsRetried: what a broker just restarted answers — the
// state topic's partition UNKNOWN_TOPIC_OR_PARTITION, then, asked again,
// its real end — is retried (each retry reported before its wait) and the
// stored state is read; an error Kafka does not call retriable ends the
// load at once, unretried; a transient error that outlasts endsWait is
// returned, naming it. Before the retry, the first answer ended the
// reader's start ("state topic offsets: UNKNOWN_TOPIC_OR_PARTITION").
func TestStateEndOffsetsRetried(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("unknown partition, then its end", func(t *testing.T) {
		c, s := stateOnFake(ctx, t)
		var retries, failed atomic.Int32
		var lastErr atomic.Value
		s.retried = func(err error, wait time.Duration) {
			if wait <= 0 {
				t.Errorf("retry reported with wait %s", wait)
			}
			lastErr.Store(err)
			retries.Add(1)
		}
		// Unknown until the reader has asked again twice: the order is
		// fixed whatever franz-go retries by itself.
		c.ControlKey(kmsg.ListOffsets.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
			if retries.Load() >= 2 {
				return nil, nil, false
			}
			c.KeepControl()
			failed.Add(1)
			return listOffsetsAnswer(kreq, kerr.UnknownTopicOrPartition.Code), nil, true
		})
		st, err := s.load(ctx, c.ListenAddrs(), nil)
		if err != nil {
			t.Fatalf("load after transient answers: %v", err)
		}
		if st.own == nil || st.own.Confirmed != 42 || st.own.Shard != 3 {
			t.Fatalf("state read %+v, want the stored one (shard 3, confirmed 42)", st.own)
		}
		if n := retries.Load(); n < 2 || failed.Load() < 2 {
			t.Errorf("%d retries reported over %d failed answers, want at least 2 of each", n, failed.Load())
		}
		if err, _ := lastErr.Load().(error); !errors.Is(err, kerr.UnknownTopicOrPartition) {
			t.Errorf("retry reported %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
		}
	})

	t.Run("not retriable", func(t *testing.T) {
		c, s := stateOnFake(ctx, t)
		var retries atomic.Int32
		s.retried = func(error, time.Duration) { retries.Add(1) }
		c.ControlKey(kmsg.ListOffsets.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			return listOffsetsAnswer(kreq, kerr.TopicAuthorizationFailed.Code), nil, true
		})
		_, err := s.load(ctx, c.ListenAddrs(), nil)
		if !errors.Is(err, kerr.TopicAuthorizationFailed) || !strings.Contains(err.Error(), "state topic offsets") {
			t.Fatalf("load refused by Kafka: %v, want TOPIC_AUTHORIZATION_FAILED naming the state topic's offsets", err)
		}
		if n := retries.Load(); n != 0 {
			t.Errorf("a refusal was retried %d times, want 0", n)
		}
	})

	t.Run("transient for too long", func(t *testing.T) {
		c, s := stateOnFake(ctx, t)
		var retries atomic.Int32
		s.retried = func(error, time.Duration) { retries.Add(1) }
		s.endsWait = 300 * time.Millisecond
		c.ControlKey(kmsg.ListOffsets.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			return listOffsetsAnswer(kreq, kerr.UnknownTopicOrPartition.Code), nil, true
		})
		_, err := s.load(ctx, c.ListenAddrs(), nil)
		if !errors.Is(err, kerr.UnknownTopicOrPartition) || !strings.Contains(err.Error(), "after 300ms") {
			t.Fatalf("load with the partition unknown throughout: %v, want UNKNOWN_TOPIC_OR_PARTITION after 300ms", err)
		}
		if retries.Load() == 0 {
			t.Error("no retry reported before giving up")
		}
	})
}
