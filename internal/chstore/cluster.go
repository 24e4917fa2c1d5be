package chstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Cluster mode (Options.Cluster names a cluster of the servers'
// remote_servers configuration; schema/clickhouse.md "Cluster mode"):
//
//   - a replicated source table T is a ReplicatedReplacingMergeTree table
//     T + LocalSuffix on every node, one replica set per ClickHouse shard
//     ({shard} macro), and a Distributed table T over them on every node,
//     sharded by cityHash64 of the id column's text. Every version and every
//     source shard's copy of an id hash alike, so they meet on one
//     ClickHouse shard, where FINAL, the duplicate-id check and ownership
//     stay exact. Readers and writers use T, as in single-node mode.
//   - every other table (watermarks, stopped tables, anomalies, ownership,
//     index and pre-aggregate state) is small and read whole: it is one
//     replica set over all nodes (ClusterReplicated), so each node answers
//     it alone and a lost node loses nothing.
//
// DDL runs on every node, one by one (not ON CLUSTER): the loader then
// names the node that is down or refuses, and waits for it, instead of
// queueing the DDL in ZooKeeper and timing out after 180 s without saying
// which node did not take it. Inserts go through the Distributed tables
// with insert_distributed_sync = 1: the insert returns once every
// ClickHouse shard it touched has the rows, so the loader commits Kafka
// offsets only after that (docs/benchmarks.md has its cost). Those rows
// are on one replica of each shard; watermarks wait for the others
// (replicas.go).

// LocalSuffix names the local table behind a Distributed one.
const LocalSuffix = "_local"

// ZooKeeperRoot is where the replicated tables keep their state in
// ZooKeeper: ZooKeeperRoot/<database>/<shard>/<table> for a source
// table's shard, ZooKeeperRoot/<database>/all/<table> for the others.
const ZooKeeperRoot = "/clickhouse/tributary"

// ErrUnknownCluster: no server configuration defines the cluster.
var ErrUnknownCluster = errors.New("unknown clickhouse cluster")

// errProfile: a node's configuration (its macros, the user's profile)
// lacks what cluster mode needs; waiting does not fix it.
var errProfile = errors.New("clickhouse profile not fit for cluster mode")

// ErrNodeDown: a node of the cluster does not answer, or cannot reach
// ZooKeeper. OpenWait waits for it; Open returns it.
var ErrNodeDown = errors.New("clickhouse cluster node not reachable")

// Node is one server of the cluster.
type Node struct {
	Shard, Replica int
	// Addr is host_address:port of system.clusters (the IP), Name
	// host_name:port (as remote_servers names it); DialOptions.ForNode
	// gives the address to dial.
	Addr, Name string
	conn       driver.Conn
	macro      string // its {shard} macro
}

// String names the node in errors and logs.
func (n Node) String() string {
	return fmt.Sprintf("shard %d replica %d (%s)", n.Shard, n.Replica, n.Addr)
}

// Conn is the node's own connection (DDL, system tables).
func (n Node) Conn() driver.Conn { return n.conn }

// Cluster is the cluster name, "" in single-node mode.
func (s *Store) Cluster() string { return s.cluster }

// Nodes are the cluster's servers (nil in single-node mode).
func (s *Store) Nodes() []Node { return s.nodes }

// LocalTable is the table holding name's rows on each node: name itself on
// one server, name + LocalSuffix in a cluster.
func (s *Store) LocalTable(name string) string {
	if s.cluster == "" {
		return name
	}
	return name + LocalSuffix
}

// openCluster finds the cluster's nodes on the server s.conn reaches and
// connects to each. Every node must answer and reach ZooKeeper: the
// tables are created on all of them, and a store that silently used fewer
// would be a different layout. The error names the node.
func (s *Store) openCluster(ctx context.Context, o Options) error {
	nodes, err := s.clusterNodes(ctx, o)
	if err != nil {
		return err
	}
	for i := range nodes {
		var no DialOptions
		no, err = DialOptions{Username: o.Username, Password: o.Password, MaxOpenConns: 2, TLS: o.TLS, NodeAddrs: o.NodeAddrs}.ForNode(nodes[i])
		if err == nil {
			nodes[i].conn, err = Dial(ctx, no)
		}
		if err == nil {
			err = ping(ctx, nodes[i].conn, o.Cluster, &nodes[i])
		}
		switch {
		case err == nil:
		case errors.Is(err, ErrNodeDown):
			closeNodes(nodes)
			return err
		case errors.Is(err, ErrNoNodeAddr):
			closeNodes(nodes)
			return fmt.Errorf("cluster %s: %w", o.Cluster, err)
		case Refused(err) || errors.Is(err, errProfile):
			closeNodes(nodes)
			return fmt.Errorf("cluster %s: %s: %w", o.Cluster, nodes[i], err)
		default:
			closeNodes(nodes)
			return fmt.Errorf("%w: cluster %s: %s: %w", ErrNodeDown, o.Cluster, nodes[i], err)
		}
	}
	if err := checkMacros(o.Cluster, nodes); err != nil {
		closeNodes(nodes)
		return err
	}
	s.cluster, s.nodes = o.Cluster, nodes
	return nil
}

// checkMacros: the replicas of one shard share a {shard} macro and no two
// shards do. Otherwise replicas of one shard would not replicate, or two
// shards would hold one replica set.
func checkMacros(cluster string, nodes []Node) error {
	byShard := map[int]Node{}
	byMacro := map[string]Node{}
	for _, n := range nodes {
		if m, ok := byShard[n.Shard]; ok && m.macro != n.macro {
			return fmt.Errorf("%w: cluster %s: %s has {shard} macro %q, %s of the same shard %q", errProfile, cluster, n, n.macro, m, m.macro)
		}
		if m, ok := byMacro[n.macro]; ok && m.Shard != n.Shard {
			return fmt.Errorf("%w: cluster %s: %s and %s, of different shards, both have {shard} macro %q", errProfile, cluster, n, m, n.macro)
		}
		byShard[n.Shard], byMacro[n.macro] = n, n
	}
	return nil
}

// ping checks that a node answers and reaches ZooKeeper (without it, its
// replicated tables are read-only and every insert would fail later, far
// from the cause), that its macros name its place in the cluster, and
// that the user's profile runs subqueries over Distributed tables as
// GLOBAL: the default, deny, refuses them ("Double-distributed IN/JOIN
// subqueries is denied"), local would read one shard's rows only; global
// runs the subquery once over every shard, exact whatever it selects. A
// client cannot set it on 18.16 (its protocol carries numeric settings
// only), so it is the profile's (schema/clickhouse.md "Cluster mode").
func ping(ctx context.Context, conn driver.Conn, cluster string, n *Node) error {
	var mode string
	if err := conn.QueryRow(ctx, "SELECT value FROM system.settings WHERE name = 'distributed_product_mode'").Scan(&mode); err != nil {
		return fmt.Errorf("read distributed_product_mode: %w", err)
	}
	if mode != "global" {
		return fmt.Errorf("%w: distributed_product_mode is %q for this user: set it to global in the user's profile (and in the API's and verifier's user's)", errProfile, mode)
	}
	var zk uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM system.zookeeper WHERE path = '/'").Scan(&zk); err != nil {
		// %v: the server's exception is not a refusal (Refused) here;
		// ZooKeeper coming back is worth waiting for.
		return fmt.Errorf("%w: cluster %s: %s: its ZooKeeper (<zookeeper> in its configuration) is not usable: %v", ErrNodeDown, cluster, n, err)
	}
	var shard, replica string
	err := conn.QueryRow(ctx, `SELECT anyIf(substitution, macro = 'shard'), anyIf(substitution, macro = 'replica')
		FROM system.macros`).Scan(&shard, &replica)
	if err != nil {
		return fmt.Errorf("read macros: %w", err)
	}
	if shard == "" || replica == "" {
		return fmt.Errorf("%w: macros shard and replica (the replicated tables' ZooKeeper paths use them) are not both set", errProfile)
	}
	n.macro = shard
	return nil
}

// clusterNodes reads the cluster from system.clusters of the seed server.
func (s *Store) clusterNodes(ctx context.Context, o Options) ([]Node, error) {
	nodes, err := ClusterNodes(ctx, s.conn, o.Cluster)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.Addr, err)
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("%w %q: %s defines only %s (remote_servers in its configuration)",
			ErrUnknownCluster, o.Cluster, o.Addr, knownClusters(ctx, s.conn))
	}
	return nodes, nil
}

// ClusterNodes reads the servers of cluster from system.clusters of the
// server conn reaches, in shard and replica order, unconnected (none: no
// cluster of that name there).
func ClusterNodes(ctx context.Context, conn driver.Conn, cluster string) ([]Node, error) {
	rows, err := conn.Query(ctx, `SELECT toUInt64(shard_num), toUInt64(replica_num), host_address, host_name, toUInt64(port)
		FROM system.clusters WHERE cluster = ? ORDER BY shard_num, replica_num`, cluster)
	if err != nil {
		return nil, fmt.Errorf("read cluster %s from system.clusters: %w", cluster, err)
	}
	defer rows.Close()
	var nodes []Node
	for rows.Next() {
		var shard, replica, port uint64
		var host, name string
		if err := rows.Scan(&shard, &replica, &host, &name, &port); err != nil {
			return nil, fmt.Errorf("read cluster %s: %w", cluster, err)
		}
		p := fmt.Sprint(port)
		nodes = append(nodes, Node{Shard: int(shard), Replica: int(replica), Addr: net.JoinHostPort(host, p), Name: net.JoinHostPort(name, p)})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read cluster %s: %w", cluster, err)
	}
	return nodes, nil
}

// knownClusters lists the clusters the server defines, for an error.
func knownClusters(ctx context.Context, conn driver.Conn) string {
	var known []string
	rows, err := conn.Query(ctx, "SELECT DISTINCT cluster FROM system.clusters ORDER BY cluster")
	if err != nil {
		return "(system.clusters unreadable: " + err.Error() + ")"
	}
	defer rows.Close()
	for rows.Next() {
		var c string
		if rows.Scan(&c) == nil {
			known = append(known, c)
		}
	}
	if len(known) == 0 {
		return "none"
	}
	return strings.Join(known, ", ")
}

// DialNodes connects to every node of cluster, as read from
// system.clusters of the server o.Addr reaches, each with o's user,
// password and TLS at the address o.NodeAddrs gives it (tributaryctl teardown, which drops the database on
// each). A node that does not answer is an ErrNodeDown naming it; close
// the nodes with CloseNodes.
func DialNodes(ctx context.Context, o DialOptions, cluster string) ([]Node, error) {
	seed, err := Dial(ctx, o)
	if err != nil {
		return nil, err
	}
	defer seed.Close()
	nodes, err := ClusterNodes(ctx, seed, cluster)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.Addr, err)
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("%w %q: %s defines only %s (remote_servers in its configuration)",
			ErrUnknownCluster, cluster, o.Addr, knownClusters(ctx, seed))
	}
	for i := range nodes {
		no, err := o.ForNode(nodes[i])
		if err != nil {
			CloseNodes(nodes)
			return nil, fmt.Errorf("cluster %s: %w", cluster, err)
		}
		if nodes[i].conn, err = Dial(ctx, no); err != nil {
			CloseNodes(nodes)
			return nil, fmt.Errorf("%w: cluster %s: %s: %w", ErrNodeDown, cluster, nodes[i], err)
		}
	}
	return nodes, nil
}

// CloseNodes closes the nodes' connections.
func CloseNodes(nodes []Node) { closeNodes(nodes) }

func closeNodes(nodes []Node) {
	for _, n := range nodes {
		if n.conn != nil {
			n.conn.Close()
		}
	}
}

// ExecDDL runs a DDL statement on the one server, or on every node of the
// cluster; the error names the node that refused it.
func (s *Store) ExecDDL(ctx context.Context, q string) error {
	if s.cluster == "" {
		return s.conn.Exec(ctx, q)
	}
	for _, n := range s.nodes {
		if err := n.conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("cluster %s: %s: %w", s.cluster, n, err)
		}
	}
	return nil
}

// ClusterReplicated is the engine of a table every node holds whole:
// engine itself on one server ("ReplacingMergeTree(ver)", "MergeTree"),
// its Replicated form with one replica set over all nodes in a cluster.
func (s *Store) ClusterReplicated(table, engine string) string {
	if s.cluster == "" {
		return engine
	}
	return replicated(engine, fmt.Sprintf("%s/%s/all/%s", ZooKeeperRoot, s.db, table))
}

// replicated turns "XMergeTree(args)" into
// "ReplicatedXMergeTree('path', '{replica}', args)".
func replicated(engine, path string) string {
	name, args, _ := strings.Cut(engine, "(")
	args = strings.TrimSuffix(args, ")")
	out := "Replicated" + name + "('" + path + "', '{replica}'"
	if args != "" {
		out += ", " + args
	}
	return out + ")"
}

// createSharded creates t in a cluster: its local replicated table and the
// Distributed table over them, on every node. columns is the column list
// of CREATE TABLE, tail what follows the engine (ORDER BY, SETTINGS).
func (s *Store) createSharded(ctx context.Context, t *Table, columns, engine, tail string) error {
	local := s.LocalTable(t.Name)
	path := fmt.Sprintf("%s/%s/{shard}/%s", ZooKeeperRoot, s.db, local)
	stmts := []string{
		fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s.%s (%s) ENGINE = %s %s",
			quote(s.db), quote(local), columns, replicated(engine, path), tail),
		// toString: 18.16's cityHash64 takes no UUID; the text form of an
		// id is one value per id whatever its type. A composite key hashes
		// all its columns, so every copy of a key meets on one shard.
		fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s.%s AS %s.%s ENGINE = Distributed(%s, %s, %s, cityHash64(%s))",
			quote(s.db), quote(t.Name), quote(s.db), quote(local), quote(s.cluster), quote(s.db), quote(local), t.keyText()),
	}
	for _, q := range stmts {
		if err := s.ExecDDL(ctx, q); err != nil {
			return fmt.Errorf("create table %s: %w", t.Name, err)
		}
	}
	return nil
}

// addColumn adds a column to table name: in a cluster to the local table
// and the Distributed one on every node. A replicated ALTER reaches the
// other replicas of a shard by itself, so a node that has the column
// already counts as done, as does one where another loader added it.
func (s *Store) addColumn(ctx context.Context, name, column, def string) error {
	if s.cluster == "" {
		q := fmt.Sprintf("ALTER TABLE %s.%s ADD COLUMN %s", quote(s.db), quote(name), def)
		return s.conn.Exec(ctx, q)
	}
	for _, table := range []string{s.LocalTable(name), name} {
		for _, n := range s.nodes {
			q := fmt.Sprintf("ALTER TABLE %s.%s ADD COLUMN %s", quote(s.db), quote(table), def)
			if err := n.conn.Exec(ctx, q); err != nil {
				var have uint64
				if cerr := n.conn.QueryRow(ctx, "SELECT count() FROM system.columns WHERE database = ? AND table = ? AND name = ?",
					s.db, table, column).Scan(&have); cerr != nil || have == 0 {
					return fmt.Errorf("cluster %s: %s: %s: %w", s.cluster, n, table, err)
				}
			}
		}
	}
	return nil
}

// DropDatabase drops the store's database on the server, or on every
// node (tests and teardown). A node that refuses does not keep the others
// from dropping theirs; the error names each that refused.
func (s *Store) DropDatabase(ctx context.Context) error {
	q := "DROP DATABASE IF EXISTS " + quote(s.db)
	if s.cluster == "" {
		return s.conn.Exec(ctx, q)
	}
	var errs []error
	for _, n := range s.nodes {
		if err := n.conn.Exec(ctx, q); err != nil {
			errs = append(errs, fmt.Errorf("cluster %s: %s: drop database %s: %w", s.cluster, n, s.db, err))
		}
	}
	return errors.Join(errs...)
}

// clusterSettings are the settings of a store's own connection in a
// cluster: inserts into a Distributed table return only once every shard
// has the rows, so an acknowledged insert is on a replica (the loader
// commits Kafka offsets after it).
var clusterSettings = clickhouse.Settings{"insert_distributed_sync": 1}
