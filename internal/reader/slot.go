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
	"github.com/tributary/tributary/internal/identity"
	"github.com/tributary/tributary/internal/tables"
)

// ErrReplicaIdentity is returned at start-up for a configured table whose
// rows the pipeline could not identify: deletes and key-changing updates
// would not say which row went, or rows would merge (see checkTables).
var ErrReplicaIdentity = errors.New("unusable table identity")

// checkTables verifies each configured table exists and that its id
// column is its whole identity (see internal/identity): the primary key
// or replica identity index, all of it, or any non-null column of a
// keyless table under REPLICA IDENTITY FULL. NOTHING, or DEFAULT without a
// primary key, is refused: PostgreSQL would even reject UPDATE/DELETE on
// such a table once it is published. An id column that is only part of a
// composite key is refused too: rows sharing it would become one row.
// It runs before anything is published or streamed.
func checkTables(ctx context.Context, conn *pgx.Conn, cfg *tables.Config) error {
	var errs []error
	for _, t := range cfg.Tables {
		key, err := identity.Read(ctx, conn, t.Schema, t.Name, t.IDColumn)
		if errors.Is(err, identity.ErrNoTable) {
			errs = append(errs, fmt.Errorf("table %s.%s does not exist on this shard", t.Schema, t.Name))
			continue
		}
		if err != nil {
			return fmt.Errorf("check table %s.%s: %w", t.Schema, t.Name, err)
		}
		var p *identity.Problem
		switch err := key.Check(); {
		case errors.As(err, &p) && p.Field != "":
			errs = append(errs, fmt.Errorf("%w: table %s: %s: %w", ErrReplicaIdentity, t.Name, p.Field, err))
		case err != nil:
			errs = append(errs, fmt.Errorf("%w: table %s: %w", ErrReplicaIdentity, t.Name, err))
		}
	}
	return errors.Join(errs...)
}

// ensurePublication creates the publication for the configured tables if
// it does not exist, and adds configured tables it lacks. It never drops
// anything.
func ensurePublication(ctx context.Context, conn *pgx.Conn, name string, cfg *tables.Config, log *slog.Logger) error {
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
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("create publication %s (the role needs to own the tables, or an administrator runs: %s): %w", name, q, err)
		}
		log.Info("publication created", slog.String("publication", name))
		return nil
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
