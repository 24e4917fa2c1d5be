package query

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tributary/tributary/internal/chstore"
)

// Replicas of a ClickHouse cluster, for readiness (the API's /readyz).
//
// Reads go through the Distributed tables of the node the API is
// connected to, which read each ClickHouse shard from one replica that
// answers: with one replica of a shard gone the answers are still exact
// and complete, so a ping of that node says nothing of it. Replicas pings
// every node of the cluster itself, so that readiness can say degraded
// while a replica is gone, and which one.

// Replica is one server of the cluster, whether it answers and whether
// its replication keeps up.
type Replica struct {
	Shard   int    `json:"shard"`
	Replica int    `json:"replica"`
	Addr    string `json:"addr"`
	// Err is why it does not answer now; nil when it does.
	Err error `json:"-"`
	// Behind says why a node that answers does not keep up with its
	// shard: its replicated tables read-only (ZooKeeper lost), or a
	// replication delay over ReplicaBehind ("" when neither). Reads
	// through Distributed tables then go to another replica of its shard
	// when one is up to date (chstore.Dial).
	Behind string `json:"-"`
}

// ReplicaBehind is the replication delay (system.replicas.absolute_delay)
// past which Replicas calls a node behind. A node SIGKILLed and restarted
// within ZooKeeper's session timeout answers at once, but 18.16 cannot
// start its replication until the old session expires ("Replica ...
// appears to be already active", retried every 10 s; measured): its delay
// is then the time since 1970.
const ReplicaBehind = 10 * time.Second

// replicaCheck is what Replicas needs to reach the cluster's nodes.
type replicaCheck struct {
	cluster string
	dial    chstore.DialOptions
}

// WithCluster makes Replicas check every node of cluster (a name in the
// servers' remote_servers, the loader's --clickhouse-cluster), dialled
// with o's user, password and TLS where o.NodeAddrs says
// (chstore.DialOptions.ForNode); o.Addr is not used, the nodes are read
// from system.clusters of the server q is connected to. Call it before
// serving; "" leaves q as it is.
func (q *Queries) WithCluster(cluster string, o chstore.DialOptions) *Queries {
	if cluster != "" {
		q.replicas = &replicaCheck{cluster: cluster, dial: o}
	}
	return q
}

// Cluster is the cluster WithCluster named, "" without one.
func (q *Queries) Cluster() string {
	if q.replicas == nil {
		return ""
	}
	return q.replicas.cluster
}

// Replicas lists the cluster's servers in shard and replica order, each
// pinged now (nil without WithCluster). The error is for the list itself:
// system.clusters unreadable, or the cluster not defined there.
func (q *Queries) Replicas(ctx context.Context) ([]Replica, error) {
	c := q.replicas
	if c == nil {
		return nil, nil
	}
	found, err := chstore.ClusterNodes(ctx, q.conn, c.cluster)
	if err != nil {
		return nil, err
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("%w %q: the server's remote_servers does not define it", chstore.ErrUnknownCluster, c.cluster)
	}
	nodes := make([]Replica, len(found))
	for i, n := range found {
		nodes[i] = Replica{Shard: n.Shard, Replica: n.Replica, Addr: n.Addr}
	}
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Add(1)
		go func(n *Replica, node chstore.Node) {
			defer wg.Done()
			n.Behind, n.Err = c.check(ctx, node, q.db)
		}(&nodes[i], found[i])
	}
	wg.Wait()
	return nodes, nil
}

// check dials the node (where the options' NodeAddrs say), reads how
// its replicated tables of database db keep up, and closes the connection
// again: a check every few seconds needs no pool, and a fresh connection
// cannot be one the server dropped while it restarted. The columns read
// need no ZooKeeper, so a node that lost it still answers.
func (c *replicaCheck) check(ctx context.Context, n chstore.Node, db string) (behind string, err error) {
	o, err := c.dial.ForNode(n)
	if err != nil {
		return "", err
	}
	o.MaxOpenConns, o.ReadOnly = 1, true
	if o.DialTimeout <= 0 {
		o.DialTimeout = 2 * time.Second // a node that hangs holds /readyz this long
	}
	conn, err := chstore.Dial(ctx, o)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	var delay uint64
	var readonly uint8
	if err := conn.QueryRow(ctx, "SELECT toUInt64(max(absolute_delay)), max(is_readonly) FROM system.replicas WHERE database = ?", db).
		Scan(&delay, &readonly); err != nil {
		return "", err
	}
	return behindReason(time.Duration(delay)*time.Second, readonly == 1, time.Now()), nil
}

// behindReason says why a node whose tables are readonly, or whose
// largest replication delay is delay, is behind ("": it is not).
func behindReason(delay time.Duration, readonly bool, now time.Time) string {
	switch {
	case readonly:
		return "its replicated tables are read-only (ZooKeeper lost)"
	case delay >= now.Sub(time.Unix(0, 0))-time.Hour:
		// The delay since 1970: the queue was never updated since the
		// server started.
		return "its replication has not run since it started"
	case delay > ReplicaBehind:
		return fmt.Sprintf("its replication is %s behind", delay)
	}
	return ""
}
