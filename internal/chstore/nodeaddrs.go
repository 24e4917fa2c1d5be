package chstore

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/tributary/tributary/internal/flagenv"
)

// Node addresses (schema/clickhouse.md "Cluster mode"): in cluster mode
// the nodes are read from system.clusters, which lists each at the port
// of its remote_servers entry, the plain native port the servers use
// between themselves. To reach a node elsewhere (its TLS port, through a
// proxy), --clickhouse-node-addrs maps that listed address to the one to
// dial. A map, not one TLS port for every node: nodes sharing a host (the
// local stack, a test fleet) listen on different ports, and a map covers
// a fleet whose nodes all use 9440 as well, one entry a node. With TLS on,
// a node the map does not name is an error naming it, never a plaintext
// dial of its listed port.

// ErrNoNodeAddr: TLS is on and --clickhouse-node-addrs gives no address
// for a node of the cluster. Waiting does not fix it.
var ErrNoNodeAddr = errors.New("no TLS address for the clickhouse cluster node")

// AddNodeAddrsFlag registers --clickhouse-node-addrs, beside a binary's
// --clickhouse-cluster.
func AddNodeAddrsFlag(fs *flagenv.Set, p *string) {
	fs.String(p, "clickhouse-node-addrs", "TRIBUTARY_CLICKHOUSE_NODE_ADDRS", "",
		"with --clickhouse-cluster: listed=dial,... maps a node's address as system.clusters lists it (host:port of its remote_servers entry, by name or IP) to the host:port to dial it at, such as its TLS port (tcp_port_secure); with TLS on, every node needs an entry (empty: dial each node where it is listed)")
}

// parseNodeAddrs parses --clickhouse-node-addrs: listed=dial pairs
// separated by commas, each a host:port, no listed address twice.
func parseNodeAddrs(s string) (map[string]string, error) {
	m := map[string]string{}
	for _, pair := range flagenv.List(s) {
		listed, dial, ok := strings.Cut(pair, "=")
		listed, dial = strings.TrimSpace(listed), strings.TrimSpace(dial)
		if !ok {
			return nil, fmt.Errorf("--clickhouse-node-addrs: %q is not listed=dial (host:port=host:port)", pair)
		}
		for _, a := range []string{listed, dial} {
			if host, port, err := net.SplitHostPort(a); err != nil || host == "" || port == "" {
				return nil, fmt.Errorf("--clickhouse-node-addrs: %q in %q is not host:port", a, pair)
			}
		}
		if d, dup := m[listed]; dup {
			return nil, fmt.Errorf("--clickhouse-node-addrs: %s is mapped twice (to %s and to %s)", listed, d, dial)
		}
		m[listed] = dial
	}
	return m, nil
}

// ForNode is o for dialling node n of a cluster: Addr is where
// o.NodeAddrs maps n's listed address (its name, else its IP), else the
// listed address itself. With TLS on, a node without an entry is an
// ErrNoNodeAddr naming it: the listed port is the plain one.
func (o DialOptions) ForNode(n Node) (DialOptions, error) {
	m, err := parseNodeAddrs(o.NodeAddrs)
	if err != nil {
		return o, err
	}
	switch dial, ok := m[n.Name]; {
	case ok:
		o.Addr = dial
	case m[n.Addr] != "":
		o.Addr = m[n.Addr]
	case o.TLS.On():
		listed := n.Addr
		if n.Name != n.Addr {
			listed = n.Name + " or " + n.Addr
		}
		return o, fmt.Errorf("%w: %s: TLS is on and --clickhouse-node-addrs ($TRIBUTARY_CLICKHOUSE_NODE_ADDRS) has no entry for %s (system.clusters lists the plain port): add %s=<host>:<its tcp_port_secure>",
			ErrNoNodeAddr, n, listed, n.Name)
	default:
		o.Addr = n.Addr
	}
	return o, nil
}
