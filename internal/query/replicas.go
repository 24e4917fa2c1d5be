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

// Replica is one server of the cluster and whether it answers.
type Replica struct {
	Shard   int    `json:"shard"`
	Replica int    `json:"replica"`
	Addr    string `json:"addr"`
	// Err is why it does not answer now; nil when it does.
	Err error `json:"-"`
}

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
			n.Err = c.ping(ctx, node)
		}(&nodes[i], found[i])
	}
	wg.Wait()
	return nodes, nil
}

// ping dials the node (where the options' NodeAddrs say) and closes the
// connection again: a check every few seconds needs no pool, and a fresh
// connection cannot be one the server dropped while it restarted.
func (c *replicaCheck) ping(ctx context.Context, n chstore.Node) error {
	o, err := c.dial.ForNode(n)
	if err != nil {
		return err
	}
	o.MaxOpenConns, o.ReadOnly = 1, true
	if o.DialTimeout <= 0 {
		o.DialTimeout = 2 * time.Second // a node that hangs holds /readyz this long
	}
	conn, err := chstore.Dial(ctx, o)
	if err != nil {
		return err
	}
	return conn.Close()
}
