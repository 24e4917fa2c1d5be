package reader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/tables"
)

// ErrReplicaIdentity is returned at start-up for a configured table whose
// deletes and key-changing updates could not be replicated.
var ErrReplicaIdentity = errors.New("table has no usable replica identity")

// checkTables verifies each configured table exists and has a replica
// identity that carries the id column: a primary key (DEFAULT), a chosen
// unique index (INDEX) or FULL. NOTHING, or DEFAULT without a primary key,
// is refused: PostgreSQL would even reject UPDATE/DELETE on such a table
// once it is published.
func checkTables(ctx context.Context, conn *pgx.Conn, cfg *tables.Config) error {
	var errs []error
	for _, t := range cfg.Tables {
		var ident string
		var hasPK, idInIdentity bool
		err := conn.QueryRow(ctx, `
			SELECT c.relreplident::text,
			       EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary),
			       EXISTS (SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey)
			               WHERE i.indrelid = c.oid AND a.attname = $3
			                 AND ((c.relreplident = 'd' AND i.indisprimary) OR (c.relreplident = 'i' AND i.indisreplident)))
			         OR c.relreplident = 'f'
			FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`,
			t.Schema, t.Name, t.IDColumn).Scan(&ident, &hasPK, &idInIdentity)
		if errors.Is(err, pgx.ErrNoRows) {
			errs = append(errs, fmt.Errorf("table %s.%s does not exist on this shard", t.Schema, t.Name))
			continue
		}
		if err != nil {
			return fmt.Errorf("check table %s.%s: %w", t.Schema, t.Name, err)
		}
		switch {
		case ident == "n" || (ident == "d" && !hasPK):
			errs = append(errs, fmt.Errorf("%w: %s.%s (add a primary key, or ALTER TABLE ... REPLICA IDENTITY FULL)",
				ErrReplicaIdentity, t.Schema, t.Name))
		case !idInIdentity:
			errs = append(errs, fmt.Errorf("%w: %s.%s: id column %q is not part of the replica identity, so deletes would not say which row went",
				ErrReplicaIdentity, t.Schema, t.Name, t.IDColumn))
		}
	}
	return errors.Join(errs...)
}

// ensurePublication creates the publication for the configured tables if
// it does not exist, and adds configured tables it lacks. It never drops
// anything. With a partitioned table among them (partitioned), the
// publication publishes via the partition root (partitions.go), and an
// existing one that does not is refused.
func ensurePublication(ctx context.Context, conn *pgx.Conn, name string, cfg *tables.Config, partitioned bool, log *slog.Logger) error {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)", name).Scan(&exists); err != nil {
		return fmt.Errorf("check publication: %w", err)
	}
	quoted := make([]string, 0, len(cfg.Tables))
	for _, t := range cfg.Tables {
		quoted = append(quoted, pgx.Identifier{t.Schema, t.Name}.Sanitize())
	}
	if !exists {
		q := fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pgx.Identifier{name}.Sanitize(), strings.Join(quoted, ", "))
		if partitioned {
			q += " WITH (publish_via_partition_root = true)"
		}
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("create publication %s (the role needs to own the tables, or an administrator runs: %s): %w", name, q, err)
		}
		log.Info("publication created", slog.String("publication", name))
		return nil
	}
	if partitioned {
		if err := checkViaRoot(ctx, conn, name); err != nil {
			return err
		}
	}
	for i, t := range cfg.Tables {
		var in bool
		err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication_tables
			WHERE pubname = $1 AND schemaname = $2 AND tablename = $3)`, name, t.Schema, t.Name).Scan(&in)
		if err != nil {
			return fmt.Errorf("check publication tables: %w", err)
		}
		if in {
			continue
		}
		q := fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", pgx.Identifier{name}.Sanitize(), quoted[i])
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("publication %s lacks table %s.%s and adding it failed (an administrator can run: %s): %w",
				name, t.Schema, t.Name, q, err)
		}
		log.Info("table added to publication", slog.String("publication", name), slog.String("table", t.Name))
	}
	return nil
}

// slotInfo is what pg_replication_slots says about our slot.
type slotInfo struct {
	exists    bool
	plugin    string
	confirmed envelope.LSN
	walStatus string
	active    bool
	// timeline is the source's current WAL timeline (IDENTIFY_SYSTEM).
	timeline uint32
}

func readSlot(ctx context.Context, conn *pgx.Conn, name string) (slotInfo, error) {
	var s slotInfo
	var confirmed, walStatus *string
	err := conn.QueryRow(ctx, `SELECT plugin, confirmed_flush_lsn::text, wal_status, active
		FROM pg_replication_slots WHERE slot_name = $1`, name).Scan(&s.plugin, &confirmed, &walStatus, &s.active)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("read slot %s: %w", name, err)
	}
	s.exists = true
	if confirmed != nil {
		if s.confirmed, err = envelope.ParseLSN(*confirmed); err != nil {
			return s, err
		}
	}
	if walStatus != nil {
		s.walStatus = *walStatus
	}
	return s, nil
}

// createSlot creates the logical slot on the replication connection and
// exports its snapshot. The snapshot stays importable only until the next
// command on repl, so the caller imports it before START_REPLICATION.
func createSlot(ctx context.Context, repl *pgconn.PgConn, name string) (pglogrepl.CreateReplicationSlotResult, error) {
	res, err := pglogrepl.CreateReplicationSlot(ctx, repl, name, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{SnapshotAction: "EXPORT_SNAPSHOT"})
	if err != nil {
		return res, fmt.Errorf("create slot %s: %w", name, err)
	}
	return res, nil
}
