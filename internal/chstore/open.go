package chstore

import (
	"context"
	"errors"
	"time"
)

// OpenWait is Open, retried while ClickHouse cannot be reached (a loader
// started before its database, or during a restart), with a backoff from 1 s
// to 30 s, until ctx ends. A refusal (Refused: a bad password, a server
// certificate the CA did not sign) is not retried, nor is a cluster that no
// server defines (ErrUnknownCluster); a node of the cluster that is down or
// cannot reach ZooKeeper (ErrNodeDown) is waited for. onRetry, if set, is
// told of each failure.
//
// Never does a cluster that cannot be opened fall back to one server.
func OpenWait(ctx context.Context, o Options, onRetry func(err error, wait time.Duration)) (*Store, error) {
	wait := time.Second
	for {
		s, err := Open(ctx, o)
		if err == nil || Refused(err) || errors.Is(err, ErrUnknownCluster) || errors.Is(err, errProfile) || ctx.Err() != nil {
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
