package reader

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestEnsureTopicsAsksControllerOnlyForMissing: topics that exist cost
// a metadata request, not a CreateTopics (which queues on the controller);
// a missing one is created, with the partitions asked for.
func TestEnsureTopicsAsksControllerOnlyForMissing(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "t.a", "t.b", "t.state"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var creates atomic.Int32
	c.ControlKey(kmsg.CreateTopics.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		creates.Add(1)
		return nil, nil, false // counted, then handled by the cluster as usual
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	parts, err := ensureTopics(ctx, cl, []string{"t.a", "t.b"}, 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	if parts["t.a"] != 3 || parts["t.b"] != 3 {
		t.Errorf("partitions of existing topics = %v, want 3 each (as they are)", parts)
	}
	if err := ensureStateTopic(ctx, cl, "t.state", 0); err != nil {
		t.Fatal(err)
	}
	if n := creates.Load(); n != 0 {
		t.Errorf("CreateTopics sent %d times for topics that exist, want 0", n)
	}

	parts, err = ensureTopics(ctx, cl, []string{"t.a", "t.new"}, 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	if parts["t.a"] != 3 || parts["t.new"] != 4 {
		t.Errorf("partitions = %v, want t.a 3 and t.new 4 (created)", parts)
	}
	if n := creates.Load(); n != 1 {
		t.Errorf("CreateTopics sent %d times for one missing topic, want 1", n)
	}
}
