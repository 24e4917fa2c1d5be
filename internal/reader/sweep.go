package reader

// The sweep: the deletes of a resnapshot with a predicate. A resnapshot of
// every row ends with a snapshot end that makes the loader delete what the
// copy did not contain; with a predicate the loader cannot do that, since
// the rows the copy skipped are mostly rows that exist and did not match,
// and the predicate is PostgreSQL's, which ClickHouse cannot evaluate. The
// sweep asks the shard instead, row by row, whether each candidate exists.
//
// Candidates are the shard's live rows of the table in ClickHouse whose
// version is below the resnapshot's epoch E (E<<48): neither copied again
// nor changed since the epoch switch S. Each one the shard does not have
// (in the table, and within the table's row filter) gets a delete of
// version E<<48 — the copied rows' version, below every change streamed
// after S. Why that is exact under concurrent writes, with no predicate to
// evaluate:
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
// Durable: the reader runs the sweep as the resnapshot's last phase
// (PhaseSweeping, stored in the reader state before it starts), so a
// reader killed mid-sweep sweeps again when it restarts, and a failed
// attempt (ClickHouse or the shard unreachable) is retried; the
// resnapshot is done only once a sweep finished. The sweep is idempotent
// and may run again at any later time: the argument above holds for any
// moment after S.
//
// It reads ClickHouse only (SweepStore: no DDL, no insert; a readonly
// user is enough) and writes its deletes to Kafka, like every change.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/rowkey"
	"github.com/tributary/tributary/internal/tables"
)

// SweepBatch is how many candidates one question to the shard covers.
const SweepBatch = 5000

// SweepStore is what a sweep reads of the loaders' ClickHouse database
// (a *chstore.Store from chstore.OpenReadOnly is one).
type SweepStore interface {
	// WatermarkLSN is shard's watermark in partition of topic: the loader
	// applied every change of the shard committed before it there.
	WatermarkLSN(ctx context.Context, topic string, partition int32, shard uint16) (uint64, error)
	// EachLiveIDOf calls fn with the key texts of shard's live rows of
	// table (key columns key) whose version is below before, n at a time.
	EachLiveIDOf(ctx context.Context, table string, key []string, shard uint16, before uint64, n int, fn func(ids []string) error) error
	Close() error
}

// SweepProgress is a sweep's progress, stored with its resnapshot.
type SweepProgress struct {
	// Checked and Deleted count the current attempt's candidates and the
	// deletes it produced.
	Checked int64 `json:"checked"`
	Deleted int64 `json:"deleted"`
	// Attempts counts the sweeps started (more than one: a restart or a
	// retry began it again).
	Attempts int `json:"attempts"`
	// Waiting is set while the sweep waits for the loader to apply the
	// shard up to the switch (a paused table waits here).
	Waiting bool `json:"waiting,omitempty"`
	// Error is the last failed attempt's error (retried).
	Error string `json:"error,omitempty"`
}

// Sweep is one resnapshot's sweep: its table, shard and epoch.
type Sweep struct {
	Table tables.Table
	Shard int
	// Epoch and SwitchAt are the resnapshot's (Resnapshot).
	Epoch    uint16
	SwitchAt envelope.LSN
	// Partitions is the number of partitions of the table's topic.
	Partitions int32
	// Batch is how many candidates one question to the shard covers
	// (0: SweepBatch).
	Batch int
}

// Run waits until the loader applied the shard's changes up to the switch,
// then deletes the candidates the shard (conn) does not have, producing
// the deletes with cl to the partition the reader sends each id's changes
// to. progress, if set, is told after each batch and while waiting.
func (s Sweep) Run(ctx context.Context, store SweepStore, conn *pgx.Conn, cl *kgo.Client, progress func(SweepProgress)) (SweepProgress, error) {
	var res SweepProgress
	tell := func() {
		if progress != nil {
			progress(res)
		}
	}
	if err := s.waitApplied(ctx, store, func(waiting bool) { res.Waiting = waiting; tell() }); err != nil {
		return res, err
	}
	absent, err := absentQuery(ctx, conn, s.Table)
	if err != nil {
		return res, err
	}
	// The deletes carry the table's column list, as the copy's rows do: a
	// batch of the loader's may hold nothing else, and a change without
	// one is a dead letter there.
	cols, err := snapshotColumns(ctx, conn, s.Table)
	if err != nil {
		return res, err
	}
	batch := s.Batch
	if batch <= 0 {
		batch = SweepBatch
	}
	err = store.EachLiveIDOf(ctx, s.Table.Name, s.Table.Key(), uint16(s.Shard), uint64(s.Epoch)<<48, batch, func(ids []string) error {
		gone, err := absent.run(ctx, conn, ids)
		if err != nil {
			return err
		}
		if err := s.produceDeletes(ctx, cl, cols, gone); err != nil {
			return err
		}
		res.Checked += int64(len(ids))
		res.Deleted += int64(len(gone))
		tell()
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("sweep of %s on shard %d: %w", s.Table.Name, s.Shard, err)
	}
	return res, nil
}

// waitApplied waits until the shard's watermark in every partition of the
// table's topic is at the switch or beyond: the loader applied every
// change committed before it. A paused table waits here until resumed.
func (s Sweep) waitApplied(ctx context.Context, store SweepStore, waiting func(bool)) error {
	told := false
	for {
		behind := false
		for p := int32(0); p < s.Partitions && !behind; p++ {
			lsn, err := store.WatermarkLSN(ctx, s.Table.Topic, p, uint16(s.Shard))
			if err != nil {
				return err
			}
			behind = envelope.LSN(lsn) < s.SwitchAt
		}
		if behind != told {
			waiting(behind)
			told = behind
		}
		if !behind {
			return nil
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
func (s Sweep) produceDeletes(ctx context.Context, cl *kgo.Client, cols []envelope.Column, ids []string) error {
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
			Op: envelope.OpDelete, ID: id, Epoch: s.Epoch, CommitLSN: s.SwitchAt, CommitTime: now, Columns: cols, Before: before})
		if err != nil {
			return err
		}
		rec := &kgo.Record{Topic: s.Table.Topic, Key: []byte(id), Value: b}
		// Set for a client with a manual partitioner; the reader's own
		// partitions keyed records by the key, to the same partition.
		rec.Partition = int32(idPartitioner.Partition(rec, int(s.Partitions)))
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
