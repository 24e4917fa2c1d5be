package chstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// DialOptions says how to reach ClickHouse.
type DialOptions struct {
	// Addr is host:port, or several separated by commas (the replicas of a
	// cluster, say): a connection goes to the first that answers, so that
	// readers keep answering while one server is down.
	Addr               string
	Username, Password string
	MaxOpenConns       int
	DialTimeout        time.Duration
	// ReadOnly refuses writes and DDL on every connection (readonly = 2,
	// which still lets the settings below be applied). A user whose profile
	// has readonly = 2 already accepts it; one with readonly = 1 refuses
	// every client setting, so it cannot run Tributary's queries at all.
	ReadOnly bool
	// TLS wraps the native protocol in TLS; the zero value is plain TCP.
	TLS TLSOptions
	// NodeAddrs is --clickhouse-node-addrs: where to dial each node of a
	// cluster (ForNode).
	NodeAddrs string
	// Settings are added to the ones every connection has (the loader's
	// insert_distributed_sync in cluster mode).
	Settings clickhouse.Settings
	// Lazy returns the pool even when the first ping fails (with the ping's
	// error as ErrNotReachable alongside): a server that starts later is
	// used as soon as it answers.
	Lazy bool
}

// ErrNotReachable wraps a failed first ping of a Lazy dial.
var ErrNotReachable = errors.New("clickhouse not reachable yet")

// Dial opens a native-protocol connection pool with the settings every
// Tributary reader and writer needs, and checks the server answers. It is
// the one place that sets them: optimize_move_to_prewhere = 0, because the
// optimizer turning a WHERE into a PREWHERE makes FINAL return superseded
// versions (schema/clickhouse.md); and, for reads through Distributed
// tables (cluster mode; nothing on one server),
// max_replica_delay_for_distributed_queries = 1: a replica with a part to
// fetch for a second or more is not read while another replica of its
// shard is up to date (the default, 300 s, would read a replica that
// came back behind). When every replica of a shard is behind, the least
// behind one is still read (fallback_to_stale_replicas_for_distributed_queries
// left at 1): with ZooKeeper lost every replica counts as behind, and
// reads must go on (schema/clickhouse.md "Cluster mode").
func Dial(ctx context.Context, o DialOptions) (driver.Conn, error) {
	if o.Username == "" {
		o.Username = "default"
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	tlsConf, err := o.TLS.config()
	if err != nil {
		return nil, fmt.Errorf("clickhouse %s: %w", o.Addr, err)
	}
	return open(ctx, o, tlsConf)
}

// open opens the pool and pings it. The error names the address, the user
// and what failed; never the password.
func open(ctx context.Context, o DialOptions, tlsConf *tls.Config) (driver.Conn, error) {
	settings := clickhouse.Settings{"optimize_move_to_prewhere": 0, "max_replica_delay_for_distributed_queries": 1}
	for k, v := range o.Settings {
		settings[k] = v
	}
	if o.ReadOnly {
		settings["readonly"] = 2
	}
	conn, err := clickhouse.Open(&clickhouse.Options{
		Addr:         addrs(o.Addr),
		Auth:         clickhouse.Auth{Database: "default", Username: o.Username, Password: o.Password},
		Settings:     settings,
		MaxOpenConns: o.MaxOpenConns,
		MaxIdleConns: o.MaxOpenConns,
		DialTimeout:  o.DialTimeout,
		TLS:          tlsConf,
	})
	if err != nil {
		return nil, fmt.Errorf("clickhouse open: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, o.DialTimeout)
	defer cancel()
	if err := conn.Ping(pctx); err != nil {
		// A refusal is final even for a Lazy dial: waiting cannot fix a
		// password or a certificate, and serving "not ready" would hide it.
		if o.Lazy && !Refused(err) {
			return conn, fmt.Errorf("%w: ping %s: %w", ErrNotReachable, o.Addr, err)
		}
		conn.Close()
		return nil, fmt.Errorf("clickhouse %s (user %s, %s): %s: %w", o.Addr, o.Username, transport(tlsConf), what(err, tlsConf != nil), err)
	}
	return conn, nil
}

// addrs splits a comma-separated address list.
func addrs(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

func transport(c *tls.Config) string {
	if c == nil {
		return "plain TCP"
	}
	return "TLS"
}

// Quote quotes an identifier for ClickHouse. Names reaching here were
// validated as plain identifiers (internal/tables) or come from PostgreSQL's
// catalog; backquotes inside are escaped regardless.
func Quote(id string) string {
	return "`" + strings.ReplaceAll(id, "`", "\\`") + "`"
}
