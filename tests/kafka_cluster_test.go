package tests

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/tributary/tributary/internal/envelope"
)

// clusterNode is what makes an ownKafka one node of a KRaft cluster: its
// node id, the static controller quorum (every node votes), the cluster id
// all nodes are formatted with, and the replication the cluster gives
// topics by default.
type clusterNode struct {
	id, nodes  int
	rf, minISR int
	voters     string
	clusterID  string
}

// startKafkaCluster starts n broker+controller nodes, configured as
// deploy/local/stack.d/kafka.sh configures TRIBUTARY_KAFKA_BROKERS_COUNT=n:
// replication factor min(n, 3), min.insync.replicas one less. It returns
// once every node lists all n brokers.
func startKafkaCluster(t *testing.T, n int) []*ownKafka {
	t.Helper()
	jars := kafkaJarsDir(t)
	b := make([]byte, 16)
	rand.Read(b) //nolint:errcheck // never fails
	rf := min(n, 3)
	shape := clusterNode{nodes: n, rf: rf, minISR: max(rf-1, 1), clusterID: base64.RawURLEncoding.EncodeToString(b)}
	nodes := make([]*ownKafka, n)
	var voters []string
	for i := range nodes {
		nodes[i] = &ownKafka{t: t, jars: jars, dir: t.TempDir(), port: freePort(t), ctrlPort: freePort(t)}
		voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d", i+1, nodes[i].ctrlPort))
	}
	shape.voters = strings.Join(voters, ",")
	for i, k := range nodes {
		c := shape
		c.id = i + 1
		k.cluster = &c
		t.Cleanup(k.shutdown)
		if err := k.writeConfig(); err != nil {
			t.Fatal(err)
		}
	}
	// The formats and the starts run side by side: a node waits for a
	// quorum of the others before it answers.
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, k := range nodes {
		wg.Go(func() { errs[i] = k.format() })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range nodes {
		k.launch()
	}
	for i, k := range nodes {
		wg.Go(func() { errs[i] = k.waitReady(120 * time.Second) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			var logs strings.Builder
			for j, k := range nodes {
				state := "running"
				select {
				case <-k.exited:
					state = "exited"
				default:
				}
				fmt.Fprintf(&logs, "=== node %d (%s, %s) ===\n%s", j+1, k.addr(), state, k.logTail())
			}
			t.Fatalf("kafka node %d on %s: %v\n%s", i+1, nodes[i].addr(), err, logs.String())
		}
	}
	return nodes
}

// clusterAddrs is every node's bootstrap address.
func clusterAddrs(nodes []*ownKafka) []string {
	var out []string
	for _, k := range nodes {
		out = append(out, k.addr())
	}
	return out
}

// TestKafkaClusterBrokerKilled: the pipeline runs on a 3-node Kafka
// cluster while two shards take writes; the node leading the table topic's
// partition 0 is SIGKILLed, stays away ~15 s, and is restarted on its data.
// It asserts:
//   - the topics the reader created have 3 replicas and
//     min.insync.replicas 2 (from the cluster's defaults: nothing in the
//     reader says 1 or 3);
//   - no component returned; writes flowed on during the outage (the slots
//     moved on with one node down: acks=all needs 2 of 3);
//   - no slot was confirmed past what the surviving nodes held: every change
//     committed below a position the slot was confirmed to before the
//     surviving nodes were read is in what they hold;
//   - afterwards ClickHouse equals the shards exactly, no live (id, shard)
//     is stored twice, the DLQ is empty, and the restarted node is back in
//     every partition's in-sync replicas.
func TestKafkaClusterBrokerKilled(t *testing.T) {
	const outage = 15 * time.Second
	t0 := time.Now()
	nodes := startKafkaCluster(t, 3)
	brokers := clusterAddrs(nodes)
	t.Logf("3-node kafka ready on %v in %s", brokers, time.Since(t0).Round(100*time.Millisecond))
	p := newPipeline(t, []int{0, 1}, brokers)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tbl := p.table()

	writes, stopWrites := p.startSteadyWrites(ctx, tbl)
	defer stopWrites()
	p.waitFor(ctx, 30*time.Second, "every shard's slot confirmed", func() bool {
		pos := p.slotPositions(ctx)
		for _, s := range p.shards {
			if pos[s] == 0 {
				return false
			}
		}
		return true
	})

	adm := kadm.NewClient(p.kafka())
	stateTopic := "e2e_" + p.suffix + ".state"
	checkReplication(ctx, t, adm, 3, "2", p.topic(), stateTopic)

	victim := partitionLeader(ctx, t, adm, p.topic(), 0)
	k := nodes[victim-1]
	before := p.slotPositions(ctx)
	stopAt := time.Now()
	k.kill()
	writesAtStop := writes.Load()
	t.Logf("killed node %d (leader of %s/0); slots %v", victim, p.topic(), before)

	// Positions are sampled while the node is down; the survivors are read
	// last, so every sampled position is bounded by what they hold.
	outageMax := map[int]envelope.LSN{}
	for time.Since(stopAt) < outage {
		for s, pos := range p.slotPositions(ctx) {
			outageMax[s] = max(outageMax[s], pos)
		}
		time.Sleep(250 * time.Millisecond)
	}
	var survivors []string
	for _, n := range nodes {
		if n != k {
			survivors = append(survivors, n.addr())
		}
	}
	recs, err := readTopic(ctx, survivors, p.topic())
	if err != nil {
		t.Fatalf("read %s from the surviving nodes: %v", p.topic(), err)
	}
	duringWrites := writes.Load() - writesAtStop
	if err := p.failed(); err != nil {
		t.Errorf("a component returned with one node down: %v", err)
	}
	for _, s := range p.shards {
		if outageMax[s] <= before[s] {
			t.Errorf("shard %d: the slot stayed at %s with one of three nodes down; acks=all with min.insync.replicas 2 should go on", s, before[s])
		}
	}
	held := map[string]bool{}
	for _, r := range recs {
		ev, err := envelope.Decode(r.Value)
		if err != nil {
			t.Fatalf("undecodable record at %s/%d@%d: %v", r.Topic, r.Partition, r.Offset, err)
		}
		if ev.Kind == envelope.KindChange {
			held[changeKey(ev)] = true
		}
	}

	k.launch()
	if err := k.waitReady(120 * time.Second); err != nil {
		t.Fatalf("restarted node %d: %v\n%s", victim, err, k.logTail())
	}
	t.Logf("node %d down for %s; %d writes meanwhile; slots during (max) %v", victim,
		time.Since(stopAt).Round(100*time.Millisecond), duringWrites, outageMax)
	time.Sleep(3 * time.Second) // writes go on with the node back
	stopWrites()

	convStart := time.Now()
	var diff string
	for time.Since(convStart) < 60*time.Second {
		if diff = p.compare(ctx, tbl); diff == "" {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if diff != "" {
		t.Fatalf("ClickHouse differs from the shards after the node came back:\n%s", diff)
	}
	t.Logf("converged %s after the writes stopped (%d writes in all)", time.Since(convStart).Round(100*time.Millisecond), writes.Load())
	if d := p.chDuplicates(ctx); d != 0 {
		t.Errorf("%d live (id, shard) pairs stored more than once", d)
	}
	if n := p.dlqRecords(ctx); n != 0 {
		t.Errorf("%d records in the DLQ", n)
	}
	if err := p.failed(); err != nil {
		t.Fatalf("a component returned: %v", err)
	}

	// Every change the slots confirmed during the outage was on the
	// survivors: the full topic now holds every change, so walk it.
	all, err := readTopic(ctx, brokers, p.topic())
	if err != nil {
		t.Fatal(err)
	}
	unbacked := 0
	for _, r := range all {
		ev, err := envelope.Decode(r.Value)
		if err != nil {
			t.Fatalf("undecodable record at %s/%d@%d: %v", r.Topic, r.Partition, r.Offset, err)
		}
		if ev.Kind != envelope.KindChange || ev.CommitLSN >= outageMax[ev.Shard] || held[changeKey(ev)] {
			continue
		}
		if unbacked < 5 {
			t.Errorf("shard %d: the slot was confirmed to %s with node %d down, but the change %s (commit %s) was not on the surviving nodes",
				ev.Shard, outageMax[ev.Shard], victim, changeKey(ev), ev.CommitLSN)
		}
		unbacked++
	}
	t.Logf("%d records on the survivors during the outage, %d in all afterwards, %d changes confirmed without being held", len(recs), len(all), unbacked)

	p.waitFor(ctx, 60*time.Second, fmt.Sprintf("node %d back in every in-sync replica set", victim), func() bool {
		return inAllISRs(ctx, adm, int32(victim), p.topic(), stateTopic)
	})
}

// changeKey names one change (shard, position, op, id) across its copies.
func changeKey(ev *envelope.Event) string {
	return fmt.Sprintf("%d/%s/%d/%v/%s", ev.Shard, ev.LSN, ev.Seq, ev.Op, ev.ID)
}

// checkReplication asserts that every partition of topics has rf replicas
// and the topic's min.insync.replicas is minISR.
func checkReplication(ctx context.Context, t *testing.T, adm *kadm.Client, rf int, minISR string, topics ...string) {
	t.Helper()
	md, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range topics {
		d, ok := md[topic]
		if !ok || d.Err != nil {
			t.Fatalf("topic %s: not listed (%v)", topic, d.Err)
		}
		for _, part := range d.Partitions.Sorted() {
			if len(part.Replicas) != rf {
				t.Errorf("%s/%d has %d replicas %v, want %d", topic, part.Partition, len(part.Replicas), part.Replicas, rf)
			}
		}
	}
	cfgs, err := adm.DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range cfgs {
		if rc.Err != nil {
			t.Fatalf("topic %s: configs: %v", rc.Name, rc.Err)
		}
		got := "(absent)"
		for _, c := range rc.Configs {
			if c.Key == "min.insync.replicas" {
				got = c.MaybeValue()
			}
		}
		if got != minISR {
			t.Errorf("topic %s: min.insync.replicas %s, want %s", rc.Name, got, minISR)
		}
	}
}

// partitionLeader is the node id leading topic/partition.
func partitionLeader(ctx context.Context, t *testing.T, adm *kadm.Client, topic string, partition int32) int {
	t.Helper()
	md, err := adm.ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	part, ok := md[topic].Partitions[partition]
	if !ok || part.Leader < 0 {
		t.Fatalf("%s/%d has no leader", topic, partition)
	}
	return int(part.Leader)
}

// inAllISRs tells whether node is in the in-sync replicas of every
// partition of topics.
func inAllISRs(ctx context.Context, adm *kadm.Client, node int32, topics ...string) bool {
	md, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		return false
	}
	for _, d := range md {
		for _, part := range d.Partitions {
			found := false
			for _, r := range part.ISR {
				found = found || r == node
			}
			if !found {
				return false
			}
		}
	}
	return true
}
