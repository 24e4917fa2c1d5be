package chstore

import (
	"context"
	"errors"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// OpenWait is Open, retried while ClickHouse cannot be reached (a loader
// started before its database, or during a restart), with a backoff from 1 s
// to 30 s, until ctx ends. An error the server itself returns (a bad
// password, say) is not retried. onRetry, if set, is told of each failure.
func OpenWait(ctx context.Context, o Options, onRetry func(err error, wait time.Duration)) (*Store, error) {
	wait := time.Second
	for {
		s, err := Open(ctx, o)
		var exc *clickhouse.Exception
		if err == nil || errors.As(err, &exc) || ctx.Err() != nil {
			return s, err
		}
		if onRetry != nil {
			onRetry(err, wait)
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}
