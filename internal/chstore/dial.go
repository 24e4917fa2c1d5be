package chstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// DialOptions says how to reach ClickHouse.
type DialOptions struct {
	Addr, Username, Password string
	MaxOpenConns             int
	DialTimeout              time.Duration
	// ReadOnly refuses writes and DDL on every connection (readonly = 2,
	// which still lets the settings below be applied).
	ReadOnly bool
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
// versions (schema/clickhouse.md).
func Dial(ctx context.Context, o DialOptions) (driver.Conn, error) {
	if o.Username == "" {
		o.Username = "default"
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	settings := clickhouse.Settings{"optimize_move_to_prewhere": 0}
	if o.ReadOnly {
		settings["readonly"] = 2
	}
	conn, err := clickhouse.Open(&clickhouse.Options{
		Addr:         []string{o.Addr},
		Auth:         clickhouse.Auth{Database: "default", Username: o.Username, Password: o.Password},
		Settings:     settings,
		MaxOpenConns: o.MaxOpenConns,
		MaxIdleConns: o.MaxOpenConns,
		DialTimeout:  o.DialTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("clickhouse open: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, o.DialTimeout)
	defer cancel()
	if err := conn.Ping(pctx); err != nil {
		if o.Lazy {
			return conn, fmt.Errorf("%w: ping %s: %w", ErrNotReachable, o.Addr, err)
		}
		conn.Close()
		return nil, fmt.Errorf("clickhouse ping %s: %w", o.Addr, err)
	}
	return conn, nil
}

// Quote quotes an identifier for ClickHouse. Names reaching here were
// validated as plain identifiers (internal/tables) or come from PostgreSQL's
// catalog; backquotes inside are escaped regardless.
func Quote(id string) string {
	return "`" + strings.ReplaceAll(id, "`", "\\`") + "`"
}
