package reader

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/tables"
)

// snapshotColumns reads a table's columns as the envelope describes them,
// inside the snapshot transaction.
func snapshotColumns(ctx context.Context, tx pgx.Tx, t tables.Table) ([]envelope.Column, error) {
	rows, err := tx.Query(ctx, `
		SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.atttypid::int8,
		       COALESCE(a.attnum = ANY(i.indkey), false)
		FROM pg_attribute a
		JOIN pg_class c ON c.oid = a.attrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary
		WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY a.attnum`, t.Schema, t.Name)
	if err != nil {
		return nil, fmt.Errorf("columns of %s: %w", t.Name, err)
	}
	defer rows.Close()
	var cols []envelope.Column
	for rows.Next() {
		var c envelope.Column
		var oid int64
		if err := rows.Scan(&c.Name, &c.Type, &oid, &c.Key); err != nil {
			return nil, fmt.Errorf("columns of %s: %w", t.Name, err)
		}
		c.OID = uint32(oid)
		cols = append(cols, c)
	}
	return cols, rows.Err()
}

// snapshot copies every configured table as it was at the slot's
// consistent point, producing OpRead envelopes (version 0: any streamed
// change of the same row wins). It returns once Kafka committed all of
// them.
//
// The whole snapshot is one Kafka transaction (transactional id
// "tributary-snapshot-<slot>"), and loaders read committed records only: a
// reader killed mid-snapshot leaves nothing half-visible, and its
// successor's first transaction fences and aborts the orphan. Kafka bounds
// a transaction's duration (transaction.max.timeout.ms, 15 min by default):
// a snapshot that takes longer fails loudly; chunked, resumable snapshots
// are future work.
func (r *Reader) snapshot(ctx context.Context, conn *pgx.Conn, snapshotName string, consistent envelope.LSN) error {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(r.cfg.Brokers...),
		kgo.TransactionalID("tributary-snapshot-"+r.cfg.Slot),
		kgo.TransactionTimeout(15*time.Minute),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(5*time.Millisecond),
		kgo.MaxBufferedRecords(r.cfg.MaxBuffered),
		kgo.MaxBufferedBytes(r.cfg.MaxBufferedBytes),
		kgo.RecordPartitioner(partitioner{kgo.StickyKeyPartitioner(nil)}),
		kgo.UnknownTopicRetries(-1),
	)
	if err != nil {
		return fmt.Errorf("snapshot producer: %w", err)
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		return fmt.Errorf("snapshot transaction: %w", err)
	}
	if err := r.copyTables(ctx, cl, conn, snapshotName, consistent); err != nil {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		cl.AbortBufferedRecords(actx)         //nolint:errcheck // best effort before the abort
		cl.EndTransaction(actx, kgo.TryAbort) //nolint:errcheck // a successor fences it anyway
		return err
	}
	if err := cl.Flush(ctx); err != nil {
		return fmt.Errorf("snapshot flush: %w", err)
	}
	if _, _, err := r.tracker.position(); err != nil {
		return fmt.Errorf("snapshot produce: %w", err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return fmt.Errorf("snapshot commit: %w", err)
	}
	return nil
}

func (r *Reader) copyTables(ctx context.Context, cl *kgo.Client, conn *pgx.Conn, snapshotName string, consistent envelope.LSN) error {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("snapshot begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+strings.ReplaceAll(snapshotName, "'", "")+"'"); err != nil {
		return fmt.Errorf("import snapshot %s: %w", snapshotName, err)
	}
	st := r.tracker.begin()
	now := time.Now().UTC()
	for _, t := range r.cfg.Tables.Tables {
		cols, err := snapshotColumns(ctx, tx, t)
		if err != nil {
			return err
		}
		idIdx := -1
		for i, c := range cols {
			if c.Name == t.IDColumn {
				idIdx = i
			}
		}
		if idIdx < 0 {
			return fmt.Errorf("snapshot %s: no id column %q", t.Name, t.IDColumn)
		}
		start := time.Now()
		q := "SELECT * FROM " + pgx.Identifier{t.Schema, t.Name}.Sanitize()
		// Text results: the same output functions pgoutput uses.
		res := conn.PgConn().ExecParams(ctx, q, nil, nil, nil, []int16{0})
		n := 0
		for res.NextRow() {
			vals := res.Values()
			if len(vals) != len(cols) {
				res.Close()
				return fmt.Errorf("snapshot %s: %d values for %d columns", t.Name, len(vals), len(cols))
			}
			after := make(map[string]*string, len(cols))
			for i, v := range vals {
				if v != nil {
					s := string(v)
					after[cols[i].Name] = &s
				} else {
					after[cols[i].Name] = nil
				}
			}
			if after[t.IDColumn] == nil {
				res.Close()
				return fmt.Errorf("snapshot %s: NULL id", t.Name)
			}
			ev := &envelope.Event{
				Kind: envelope.KindChange, Shard: r.cfg.Shard, Schema: t.Schema, Table: t.Name,
				Op: envelope.OpRead, ID: *after[t.IDColumn], CommitLSN: consistent, CommitTime: now,
				Columns: cols, After: after,
			}
			if err := r.produceTo(ctx, cl, st, t.Topic, -1, ev); err != nil {
				res.Close()
				return err
			}
			n++
			if n%100000 == 0 {
				r.log.Info("snapshot progress", slog.String("table", t.Name), slog.Int("rows", n),
					slog.Float64("rows_per_s", float64(n)/time.Since(start).Seconds()))
			}
		}
		if _, err := res.Close(); err != nil {
			return fmt.Errorf("snapshot %s: %w", t.Name, err)
		}
		r.m.snapshotRows.WithLabelValues(t.Name).Add(float64(n))
		r.log.Info("snapshot table done", slog.String("table", t.Name), slog.Int("rows", n), slog.Duration("took", time.Since(start)))
	}
	r.tracker.seal(st, consistent, now.UnixMicro())
	return nil
}
