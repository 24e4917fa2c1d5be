package chstore

import (
	"context"
	"time"
)

// OpenWait is Open, retried while ClickHouse cannot be reached (a loader
// started before its database, or during a restart), with a backoff from 1 s
// to 30 s, until ctx ends. A refusal (Refused: a bad password, a server
// certificate the CA did not sign) is not retried. onRetry, if set, is told of each failure.
func OpenWait(ctx context.Context, o Options, onRetry func(err error, wait time.Duration)) (*Store, error) {
	wait := time.Second
	for {
		s, err := Open(ctx, o)
		if err == nil || Refused(err) || ctx.Err() != nil {
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
