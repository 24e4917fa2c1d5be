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
		if err == nil || Refused(err) || errors.Is(err, ErrUnknownCluster) || errors.Is(err, errProfile) || errors.Is(err, ErrNoNodeAddr) || ctx.Err() != nil {
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

// OpenReadOnly connects to read o.Database only: it creates nothing and
// asks for readonly = 2 on every connection (DialOptions.ReadOnly), so a
// read-only user as the API's is enough (the reader's resnapshot sweep
// reads the loaders' tables with it). It needs no cluster option in cluster
// mode: a source table is read through its Distributed table, where every
// version and every shard's copy of an id meet on one ClickHouse shard
// (FINAL stays exact), and the watermarks are one replica set over every
// node, which each node answers alone.
func OpenReadOnly(ctx context.Context, o Options) (*Store, error) {
	if o.Database == "" {
		o.Database = "tributary"
	}
	conn, err := Dial(ctx, DialOptions{Addr: o.Addr, Username: o.Username, Password: o.Password, MaxOpenConns: 2, TLS: o.TLS, ReadOnly: true})
	if err != nil {
		return nil, err
	}
	return &Store{conn: conn, db: o.Database, tables: map[string]*Table{}}, nil
}
