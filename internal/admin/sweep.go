package admin

// sweep: a resnapshot's sweep run again by hand (tributaryctl resnapshot
// --sweep). The reader sweeps after every resnapshot with a predicate, as
// the resnapshot's last phase, and again after a restart
// (internal/reader, sweep.go, says how and why it is exact); running it
// again later is idempotent and never needed for exactness, but it is a
// way to check one: it prints how many rows it found to delete.

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/reader"
	"github.com/tributary/tributary/internal/tables"
)

// SweepOf is the sweep of resnapshot a of shard, over parts partitions of
// the table's topic, refused when a did not copy (not done, or without an
// epoch).
func SweepOf(t tables.Table, shard int, a *reader.Resnapshot, parts int32) (reader.Sweep, error) {
	switch {
	case a == nil:
		return reader.Sweep{}, fmt.Errorf("%w: shard %d has no finished resnapshot of %s to sweep after", ErrResnapshotRefused, shard, t.Name)
	case a.Table != t.Name:
		return reader.Sweep{}, fmt.Errorf("%w: the last resnapshot of shard %d copied table %s, not %s", ErrResnapshotRefused, shard, a.Table, t.Name)
	case a.Phase != reader.PhaseDone || a.Epoch == 0:
		return reader.Sweep{}, fmt.Errorf("%w: the last resnapshot of %s on shard %d ended %s (%s): sweep after one that is done",
			ErrResnapshotRefused, t.Name, shard, a.Phase, a.Error)
	}
	return reader.Sweep{Table: t, Shard: shard, Epoch: a.Epoch, SwitchAt: a.SwitchAt, Partitions: parts}, nil
}

// RunSweep runs sw with store (the loaders' database, read only) and the
// shard (conn), producing its deletes with cl (a client with a manual
// partitioner, NewProducer), a progress line to w every interval.
func RunSweep(ctx context.Context, sw reader.Sweep, store reader.SweepStore, conn *pgx.Conn, cl *kgo.Client, w io.Writer, interval time.Duration) (reader.SweepProgress, error) {
	next := time.Now().Add(interval)
	return sw.Run(ctx, store, conn, cl, func(p reader.SweepProgress) {
		if time.Now().Before(next) {
			return
		}
		next = time.Now().Add(interval)
		if p.Waiting {
			fmt.Fprintf(w, "sweep shard %d table %s: waiting for the loader to apply the shard up to %s (paused table?)\n", sw.Shard, sw.Table.Name, sw.SwitchAt)
			return
		}
		fmt.Fprintf(w, "sweep shard %d table %s: %d rows checked, %d deleted\n", sw.Shard, sw.Table.Name, p.Checked, p.Deleted)
	})
}

// TopicPartitions is the number of partitions of topic.
func TopicPartitions(ctx context.Context, cl *kgo.Client, topic string) (int32, error) {
	td, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("topic %s: %w", topic, err)
	}
	d, ok := td[topic]
	if !ok || d.Err != nil || len(d.Partitions) == 0 {
		return 0, fmt.Errorf("topic %s: not found in Kafka (%v): is --tables the table config the readers run with?", topic, d.Err)
	}
	return int32(len(d.Partitions)), nil
}
