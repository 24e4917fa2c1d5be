package chstore

import (
	"errors"

	"github.com/tributary/tributary/internal/flagenv"
)

// Conn is a ClickHouse connection as every binary's flags give it
// (AddFlags): the same flags, environment variables and defaults in the
// loader, the API, verify and tributaryctl.
type Conn struct {
	// Addr is host:port of the native protocol, or several separated by
	// commas (DialOptions.Addr).
	Addr     string
	Database string
	User     string
	// Password comes from $TRIBUTARY_CLICKHOUSE_PASSWORD or, after
	// ReadPassword, from PasswordFile.
	Password     string
	PasswordFile string
	TLS          TLSOptions
	// NodeAddrs is --clickhouse-node-addrs of a binary with a
	// --clickhouse-cluster (AddNodeAddrsFlag).
	NodeAddrs string
}

// ReplicasUsage is the --clickhouse-addr of a binary that only reads.
const ReplicasUsage = "ClickHouse native protocol host:port (required); several, comma-separated, are tried in order, so that with a ClickHouse cluster (whose Distributed tables every node serves) reads go on while one node is down"

// ConnUsage is what a binary's ClickHouse flags say about its use of them;
// an empty field keeps the common text.
type ConnUsage struct {
	Addr, Database, User string
}

// AddFlags registers the ClickHouse connection's flags on fs into c:
// --clickhouse-addr, --clickhouse-db, --clickhouse-user, the password
// ($TRIBUTARY_CLICKHOUSE_PASSWORD, never a flag, or
// --clickhouse-password-file) and the TLS flags (addTLSFlags).
func AddFlags(fs *flagenv.Set, c *Conn, u ConnUsage) {
	or := func(s, def string) string {
		if s == "" {
			return def
		}
		return s
	}
	fs.String(&c.Addr, "clickhouse-addr", "TRIBUTARY_CLICKHOUSE_ADDR", "", or(u.Addr, "ClickHouse native protocol host:port (required)"))
	fs.String(&c.Database, "clickhouse-db", "TRIBUTARY_CLICKHOUSE_DB", "tributary", or(u.Database, "ClickHouse database"))
	fs.String(&c.User, "clickhouse-user", "TRIBUTARY_CLICKHOUSE_USER", "default", or(u.User, "ClickHouse user"))
	fs.Secret(&c.Password, "TRIBUTARY_CLICKHOUSE_PASSWORD")
	AddPasswordFileFlag(fs, &c.PasswordFile)
	addTLSFlags(fs, &c.TLS)
}

// Validate reports every setting of c that cannot work, before anything
// connects: no address, or TLS files that do not go together.
func (c Conn) Validate() []error {
	var errs []error
	if c.Addr == "" {
		errs = append(errs, errors.New("--clickhouse-addr (or $TRIBUTARY_CLICKHOUSE_ADDR) is required"))
	}
	return append(errs, c.TLS.Validate()...)
}

// ValidateCluster reports a --clickhouse-node-addrs that does not parse,
// or given without --clickhouse-cluster (the map is of its nodes).
func (c Conn) ValidateCluster(cluster string) error {
	if c.NodeAddrs != "" && cluster == "" {
		return errors.New("--clickhouse-node-addrs maps the nodes of a cluster: it needs --clickhouse-cluster")
	}
	_, err := parseNodeAddrs(c.NodeAddrs)
	return err
}

// ReadPassword sets c.Password from --clickhouse-password-file when it is
// given (Password: both ways at once are refused).
func (c *Conn) ReadPassword() error {
	var err error
	c.Password, err = Password(c.Password, c.PasswordFile)
	return err
}

// DialOptions is what Dial needs of c (the database is the caller's).
func (c Conn) DialOptions() DialOptions {
	return DialOptions{Addr: c.Addr, Username: c.User, Password: c.Password, TLS: c.TLS, NodeAddrs: c.NodeAddrs}
}
