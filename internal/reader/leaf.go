package reader

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tributary/tributary/internal/decode"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/tables"
)

// partitionPrefix is the prefix of the logical messages
// schema/postgres/20_partitions.sql emits when a partition is truncated,
// detached or dropped: events PostgreSQL does not publish through the
// partitioned table.
const partitionPrefix = "tributary.partition"

// partitionGone is such a message's content.
type partitionGone struct {
	Root string `json:"root"`
	envelope.PartitionScope
}

// pendingPartition is a partition gone (or attached) waiting for its
// transaction's commit.
type pendingPartition struct {
	at    envelope.LSN
	table string // the configured table's name
	scope envelope.PartitionScope
}

// partitionMessage notes a transactional 'tributary.partition' message of
// the current transaction for its commit. Its position is the truncate's
// version: the statement holds its lock on the partition when the message
// is written, so every change of the partition's rows before it is below,
// every later one above.
func (r *Reader) partitionMessage(at envelope.LSN, m *decode.LogicalMessage) error {
	var g partitionGone
	if err := json.Unmarshal(m.Content, &g); err != nil {
		return fmt.Errorf("partition message at %s: %w", at, err)
	}
	schema, name, err := splitRegclass(g.Root)
	if err != nil {
		return fmt.Errorf("partition message at %s: %w", at, err)
	}
	t, ok := r.cfg.Tables.BySource(schema, name)
	if !ok {
		return nil // a partitioned table nobody configured
	}
	if g.Cause == "truncate" && r.truncated[t.Name] {
		// A TRUNCATE of the whole table fires every partition's trigger
		// right after pgoutput's truncate of the table: nothing is left
		// for the partition's own to remove.
		return nil
	}
	r.resnapshotTruncated(t.Name) // a partition gone or attached: a copy in progress starts over
	r.pendingParts = append(r.pendingParts, pendingPartition{at: at, table: t.Name, scope: g.PartitionScope})
	return nil
}

// flushPartitions produces, at the commit of the current transaction, one
// scoped truncate per partition gone (to every partition of the table's
// topic, like a truncate), and the rows of partitions attached.
func (r *Reader) flushPartitions(ctx context.Context) error {
	defer func() { r.pendingParts, r.truncated = r.pendingParts[:0], nil }()
	for _, pp := range r.pendingParts {
		t, _ := r.cfg.Tables.ByName(pp.table)
		scope := pp.scope
		if scope.Cause == "attach" {
			if err := r.copyAttached(ctx, pp); err != nil {
				return err
			}
			continue
		}
		if err := r.scopeTypes(ctx, *t, &scope); err != nil {
			return err
		}
		r.m.changes.WithLabelValues(t.Name, string(envelope.OpTruncate)).Inc()
		r.log.Info("partition gone: its rows are deleted downstream", slog.String("table", t.Name),
			slog.String("partition", scope.Partition), slog.String("cause", scope.Cause), slog.String("lsn", pp.at.String()))
		for p := int32(0); p < r.parts[t.Topic]; p++ {
			ev := &envelope.Event{
				Kind: envelope.KindChange, Shard: r.cfg.Shard, Schema: t.Schema, Table: t.Name, Op: envelope.OpTruncate,
				LSN: pp.at, CommitLSN: r.begin.FinalLSN, Seq: r.seq, XID: r.begin.XID, CommitTime: r.begin.CommitTime.UTC(),
				Partitions: r.parts[t.Topic], Partition: &scope,
			}
			if err := r.produceTo(ctx, r.producer, r.cur, t.Topic, p, ev); err != nil {
				return err
			}
		}
		r.seq++
	}
	return nil
}

// scopeTypes gives every level of scope its key columns' types, read from
// the table's columns as the initial copy reads them (a partition key
// column's type cannot change while the table is partitioned, so now is
// as good as the message's position). The loader matches the bound with
// them even when the truncate is the first record of the table it sees.
func (r *Reader) scopeTypes(ctx context.Context, t tables.Table, scope *envelope.PartitionScope) error {
	conn, err := pgx.Connect(ctx, r.cfg.DSN)
	if err != nil {
		return fmt.Errorf("partition %s: key column types: %w", scope.Partition, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	cols, err := snapshotColumns(ctx, conn, t)
	if err != nil {
		return fmt.Errorf("partition %s: key column types: %w", scope.Partition, err)
	}
	types := map[string]string{}
	for _, c := range cols {
		types[c.Name] = c.Type
	}
	for i := range scope.Levels {
		lv := &scope.Levels[i]
		lv.Types = make([]string, len(lv.Columns))
		for j, c := range lv.Columns {
			lv.Types[j] = types[c] // "": an expression, or a column not replicated; the loader says so
		}
	}
	return nil
}

// splitRegclass splits a schema-qualified regclass text ("public.t",
// `"My Schema"."T"`) into its parts.
func splitRegclass(s string) (schema, name string, err error) {
	var parts []string
	for len(s) > 0 {
		var part string
		if s[0] == '"' {
			end := 1
			var b strings.Builder
			for ; end < len(s); end++ {
				if s[end] == '"' {
					if end+1 < len(s) && s[end+1] == '"' {
						b.WriteByte('"')
						end++
						continue
					}
					break
				}
				b.WriteByte(s[end])
			}
			if end >= len(s) {
				return "", "", fmt.Errorf("relation name %q: unterminated quote", s)
			}
			part, s = b.String(), s[end+1:]
		} else {
			i := strings.IndexByte(s, '.')
			if i < 0 {
				i = len(s)
			}
			part, s = s[:i], s[i:]
		}
		parts = append(parts, part)
		if len(s) > 0 {
			if s[0] != '.' {
				return "", "", fmt.Errorf("relation name: unexpected %q", s)
			}
			s = s[1:]
		}
	}
	if len(parts) != 2 {
		return "", "", fmt.Errorf("relation name %v is not schema-qualified", parts)
	}
	return parts[0], parts[1], nil
}

// checkPartitionHelpers refuses to stream a partitioned table whose
// truncates, detaches and drops of partitions would go unseen: the helpers
// of schema/postgres/20_partitions.sql must be installed, and every
// partition must carry their TRUNCATE trigger.
func checkPartitionHelpers(ctx context.Context, conn *pgx.Conn, schema, name string) error {
	var events int
	var missing []string
	err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_event_trigger
		WHERE evtname IN ('tributary_partitions_before', 'tributary_partitions_after') AND evtenabled <> 'D'`).Scan(&events)
	if err != nil {
		return fmt.Errorf("check partition helpers: %w", err)
	}
	rows, err := conn.Query(ctx, `SELECT p.relid::regclass::text
		FROM pg_partition_tree(format('%I.%I', $1::text, $2::text)::regclass) p
		WHERE p.level > 0 AND NOT EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = p.relid AND t.tgname = 'tributary_partition_truncated')`,
		schema, name)
	if err != nil {
		return fmt.Errorf("check partition helpers: %w", err)
	}
	if missing, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return fmt.Errorf("check partition helpers: %w", err)
	}
	switch {
	case events < 2:
		return fmt.Errorf("%w: %s.%s: the shard lacks the event triggers that report partitions detached or dropped: run schema/postgres/20_partitions.sql on it as a superuser",
			ErrPartition, schema, name)
	case len(missing) > 0:
		return fmt.Errorf("%w: %s.%s: partitions %v lack the trigger that reports their TRUNCATE: run SELECT tributary.watch_partitions() on the shard (schema/postgres/20_partitions.sql)",
			ErrPartition, schema, name, missing)
	}
	return nil
}

// copyAttached copies the rows of a partition attached to a configured
// table, as rows read at the attach message's position: ATTACH PARTITION
// publishes nothing, yet the partition's rows are the table's from then on.
// The copy reads the partition's rows under the table now, so it sees the
// state after later changes, and those changes carry higher positions than
// the attach (they follow its commit, or its statement), so they win over
// the copy; a partition detached again since reads as empty, and its own
// detach message removes what the copy would have added. The stream waits
// for the copy (attaching a partition that has rows is rare); memory stays
// bounded by the producer's buffer, and the slot is not confirmed past the
// attach until Kafka has every copied row.
func (r *Reader) copyAttached(ctx context.Context, pp pendingPartition) error {
	t, _ := r.cfg.Tables.ByName(pp.table)
	conn, err := pgx.Connect(ctx, r.cfg.DSN)
	if err != nil {
		return fmt.Errorf("copy attached partition %s: %w", pp.scope.Partition, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tab, err := r.snapTable(ctx, conn, *t)
	if err != nil {
		return fmt.Errorf("copy attached partition %s: %w", pp.scope.Partition, err)
	}
	schema, name, err := splitRegclass(pp.scope.Partition)
	if err != nil {
		return fmt.Errorf("copy attached partition: %w", err)
	}
	q := tab.sel.from + " WHERE tableoid IN (SELECT relid FROM pg_partition_tree(format('%I.%I', $1::text, $2::text)::regclass))"
	if tab.sel.filter != "" {
		q += " AND " + tab.sel.filter
	}
	res := conn.PgConn().ExecParams(ctx, q, [][]byte{[]byte(schema), []byte(name)}, nil, nil, []int16{0})
	img := newRowImage(&tab)
	var n int
	for res.NextRow() {
		vals := res.Values()
		if len(vals) != len(tab.cols) {
			res.Close()
			return fmt.Errorf("copy attached partition %s: %d values for %d columns", pp.scope.Partition, len(vals), len(tab.cols))
		}
		for i, v := range vals {
			if v == nil {
				img.strs[i] = ""
				img.after[tab.cols[i].Name] = nil
				continue
			}
			img.strs[i] = string(v)
			img.after[tab.cols[i].Name] = &img.strs[i]
		}
		id, ok := tab.id(vals, img.strs)
		if !ok {
			res.Close()
			return fmt.Errorf("copy attached partition %s: NULL id", pp.scope.Partition)
		}
		ev := &envelope.Event{
			Kind: envelope.KindChange, Shard: r.cfg.Shard, Schema: t.Schema, Table: t.Name, Op: envelope.OpRead,
			ID: id, LSN: pp.at, CommitLSN: r.begin.FinalLSN, Seq: r.seq, XID: r.begin.XID,
			CommitTime: r.begin.CommitTime.UTC(), Columns: tab.cols, After: img.after,
		}
		r.seq++
		if err := r.produce(ctx, r.cur, t.Topic, ev); err != nil {
			res.Close()
			return err
		}
		n++
	}
	if _, err := res.Close(); err != nil {
		return fmt.Errorf("copy attached partition %s: %w", pp.scope.Partition, err)
	}
	r.m.changes.WithLabelValues(t.Name, string(envelope.OpRead)).Add(float64(n))
	r.log.Info("partition attached: its rows are copied", slog.String("table", t.Name),
		slog.String("partition", pp.scope.Partition), slog.Int("rows", n), slog.String("lsn", pp.at.String()))
	return nil
}
