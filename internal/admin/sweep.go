package admin

// sweep: the deletes of a resnapshot with a predicate. A resnapshot of
// every row ends with a snapshot end that makes the loader delete what the
// copy did not contain; with a predicate the loader cannot do that, since
// the rows the copy skipped are mostly rows that exist and did not match,
// and the predicate is PostgreSQL's, which ClickHouse cannot evaluate. The
// sweep asks the shard instead, row by row, whether each candidate exists.
//
// Candidates are the shard's live rows of the table whose version is below
// the resnapshot's epoch E (E<<48): neither copied again nor changed since
// the epoch switch S. Each one the shard does not have (in the table, and
// within the table's row filter) gets a delete of version E<<48 — the
// copied rows' version, below every change streamed after S. Why that is
// exact under concurrent writes, with no predicate to evaluate:
//
//   - a candidate the shard has when it is asked keeps its row: the sweep
//     only deletes what is absent;
//   - a candidate absent when asked and not changed after S was absent
//     since before S: its row is stale (a delete the slot never saw, a row
//     written by hand); deleting it makes ClickHouse equal to the shard;
//   - a candidate changed after S (deleted, inserted again) has that change
//     at version E<<48 | LSN, above the sweep's delete, in whatever order
//     the loader receives the two;
//   - the candidates are read once the loader applied every change of the
//     shard committed before S in every partition of the table's topic (its
//     watermark there is at S or beyond): a stale row still on its way
//     through Kafka is not missed.
//
// Rows outside the predicate that the shard no longer has are deleted too:
// a deleted row has no values left at the source to test the predicate
// on, and deleting a row the shard does not have is never wrong. The cost
// is one index lookup on the shard per candidate: every row of the table
// and shard the copy skipped.
//
// The sweep is idempotent and may run again at any later time (a killed
// tributaryctl: resnapshot --sweep): the argument above holds for any
// moment after S.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/reader"
	"github.com/tributary/tributary/internal/rowkey"
	"github.com/tributary/tributary/internal/tables"
)

// SweepBatch is how many candidates one question to the shard covers.
const SweepBatch = 5000

// Sweep is one resnapshot's sweep: its table, shard and epoch.
type Sweep struct {
	Table tables.Table
	Shard int
	// Epoch and SwitchAt are the resnapshot's (reader.Resnapshot).
	Epoch    uint16
	SwitchAt envelope.LSN
}

// SweepOf is the sweep of resnapshot a of shard, refused when a did not
// copy (not done, or without an epoch).
func SweepOf(t tables.Table, shard int, a *reader.Resnapshot) (Sweep, error) {
	switch {
	case a == nil:
		return Sweep{}, fmt.Errorf("%w: shard %d has no finished resnapshot to sweep after", ErrResnapshotRefused, shard)
	case a.Table != t.Name:
		return Sweep{}, fmt.Errorf("%w: the last resnapshot of shard %d copied table %s, not %s", ErrResnapshotRefused, shard, a.Table, t.Name)
	case a.Phase != reader.PhaseDone || a.Epoch == 0:
		return Sweep{}, fmt.Errorf("%w: the last resnapshot of %s on shard %d ended %s (%s): sweep after one that is done",
			ErrResnapshotRefused, t.Name, shard, a.Phase, a.Error)
	}
	return Sweep{Table: t, Shard: shard, Epoch: a.Epoch, SwitchAt: a.SwitchAt}, nil
}

// SweepResult counts a sweep's candidates and deletes.
type SweepResult struct {
	Checked, Deleted int
}

// Run waits until the loader applied the shard's changes up to the switch,
// then deletes the candidates the shard (conn) does not have, producing
// the deletes with cl (a client with a manual partitioner, NewProducer).
// A progress line goes to w every interval.
func (s Sweep) Run(ctx context.Context, store *chstore.Store, conn *pgx.Conn, cl *kgo.Client, w io.Writer, interval time.Duration, log *slog.Logger) (SweepResult, error) {
	var res SweepResult
	parts, err := topicPartitions(ctx, cl, s.Table.Topic)
	if err != nil {
		return res, err
	}
	if err := s.waitApplied(ctx, store, parts, w, interval); err != nil {
		return res, err
	}
	ct, err := store.Lookup(ctx, s.Table.Name, s.Table.Key())
	if err != nil || ct == nil {
		return res, err // no ClickHouse table: nothing to delete
	}
	absent, err := absentQuery(ctx, conn, s.Table)
	if err != nil {
		return res, err
	}
	next := time.Now().Add(interval)
	err = store.EachLiveID(ctx, ct, uint16(s.Shard), uint64(s.Epoch)<<48, SweepBatch, func(ids []string) error {
		gone, err := absent.run(ctx, conn, ids)
		if err != nil {
			return err
		}
		if err := s.produceDeletes(ctx, cl, gone, parts); err != nil {
			return err
		}
		res.Checked += len(ids)
		res.Deleted += len(gone)
		if time.Now().After(next) {
			fmt.Fprintf(w, "sweep shard %d table %s: %d rows checked, %d deleted\n", s.Shard, s.Table.Name, res.Checked, res.Deleted)
			next = time.Now().Add(interval)
		}
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("sweep of %s on shard %d: %w", s.Table.Name, s.Shard, err)
	}
	log.Info("resnapshot sweep done: rows the shard no longer has are deleted", slog.Int("shard", s.Shard),
		slog.String("table", s.Table.Name), slog.Int("epoch", int(s.Epoch)), slog.Int("checked", res.Checked), slog.Int("deleted", res.Deleted))
	return res, nil
}

// topicPartitions is the number of partitions of topic.
func topicPartitions(ctx context.Context, cl *kgo.Client, topic string) (int32, error) {
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

// waitApplied waits until the shard's watermark in every partition of the
// table's topic is at the switch or beyond: the loader applied every
// change committed before it. A paused table waits here until resumed.
func (s Sweep) waitApplied(ctx context.Context, store *chstore.Store, parts int32, w io.Writer, interval time.Duration) error {
	next := time.Now().Add(interval)
	for {
		behind := -1
		for p := int32(0); p < parts && behind < 0; p++ {
			lsn, err := store.WatermarkLSN(ctx, s.Table.Topic, p, uint16(s.Shard))
			if err != nil {
				return err
			}
			if envelope.LSN(lsn) < s.SwitchAt {
				behind = int(p)
			}
		}
		if behind < 0 {
			return nil
		}
		if time.Now().After(next) {
			fmt.Fprintf(w, "sweep shard %d table %s: waiting for the loader to apply the shard up to %s (partition %d behind; paused table?)\n",
				s.Shard, s.Table.Name, s.SwitchAt, behind)
			next = time.Now().Add(interval)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// produceDeletes sends a resnapshot delete (epoch, LSN 0) of each id to
// the partition the reader sends the id's changes to, and waits for Kafka.
func (s Sweep) produceDeletes(ctx context.Context, cl *kgo.Client, ids []string, parts int32) error {
	if len(ids) == 0 {
		return nil
	}
	key := s.Table.Key()
	now := time.Now().UTC()
	recs := make([]*kgo.Record, 0, len(ids))
	for _, id := range ids {
		vals, err := rowkey.Parse(id, len(key))
		if err != nil {
			return fmt.Errorf("key %q of %s: %w", id, s.Table.Name, err)
		}
		before := make(map[string]*string, len(key))
		for i, c := range key {
			before[c] = &vals[i]
		}
		b, err := envelope.Encode(&envelope.Event{Kind: envelope.KindChange, Shard: s.Shard, Schema: s.Table.Schema, Table: s.Table.Name,
			Op: envelope.OpDelete, ID: id, Epoch: s.Epoch, CommitLSN: s.SwitchAt, CommitTime: now, Before: before})
		if err != nil {
			return err
		}
		rec := &kgo.Record{Topic: s.Table.Topic, Key: []byte(id), Value: b}
		rec.Partition = int32(idPartitioner.Partition(rec, int(parts)))
		recs = append(recs, rec)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("produce deletes to %s: %w", s.Table.Topic, err)
	}
	return nil
}

// idPartitioner routes ids as the reader does (Kafka's murmur2 of the key).
var idPartitioner = kgo.StickyKeyPartitioner(nil).ForTopic("")

// absent asks the shard which of a batch of ids it does not have.
type absent struct {
	q    string
	cols int
}

// absentQuery builds the question for t: the ids, split into their key
// columns and cast to the columns' types, that no row of t (within its
// row filter) has.
func absentQuery(ctx context.Context, conn *pgx.Conn, t tables.Table) (absent, error) {
	key := t.Key()
	var types []string
	err := conn.QueryRow(ctx, `SELECT array_agg(format_type(a.atttypid, a.atttypmod) ORDER BY k.i)
		FROM unnest($3::text[]) WITH ORDINALITY AS k(name, i)
		JOIN pg_attribute a ON a.attname = k.name AND a.attrelid = (quote_ident($1) || '.' || quote_ident($2))::regclass`,
		t.Schema, t.Name, key).Scan(&types)
	if err != nil {
		return absent{}, fmt.Errorf("key columns of %s.%s: %w", t.Schema, t.Name, err)
	}
	if len(types) != len(key) {
		return absent{}, fmt.Errorf("key columns of %s.%s: found %d of (%s) on the shard", t.Schema, t.Name, len(types), strings.Join(key, ", "))
	}
	arrays, names, match := []string{"$1::text[]"}, []string{"_tributary_id"}, make([]string, len(key))
	for i, c := range key {
		arrays = append(arrays, fmt.Sprintf("$%d::text[]", i+2))
		names = append(names, fmt.Sprintf("_tributary_k%d", i))
		match[i] = fmt.Sprintf("%s = u._tributary_k%d::%s", pgx.Identifier{c}.Sanitize(), i, types[i])
	}
	cond := strings.Join(match, " AND ")
	if t.RowFilter != "" {
		cond += " AND (" + t.RowFilter + ")"
	}
	q := fmt.Sprintf("SELECT u._tributary_id FROM unnest(%s) AS u(%s) WHERE NOT EXISTS (SELECT 1 FROM %s WHERE %s)",
		strings.Join(arrays, ", "), strings.Join(names, ", "), pgx.Identifier{t.Schema, t.Name}.Sanitize(), cond)
	return absent{q: q, cols: len(key)}, nil
}

// run returns those of ids the shard does not have.
func (a absent) run(ctx context.Context, conn *pgx.Conn, ids []string) ([]string, error) {
	args := make([]any, 1+a.cols)
	args[0] = ids
	cols := make([][]string, a.cols)
	for _, id := range ids {
		vals, err := rowkey.Parse(id, a.cols)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", id, err)
		}
		for i, v := range vals {
			cols[i] = append(cols[i], v)
		}
	}
	for i := range cols {
		args[1+i] = cols[i]
	}
	rows, err := conn.Query(ctx, a.q, args...)
	if err != nil {
		return nil, fmt.Errorf("ask the shard which rows it has: %w", err)
	}
	gone, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("ask the shard which rows it has: %w", err)
	}
	return gone, nil
}
