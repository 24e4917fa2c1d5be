package reader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
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
		key, err := identity.Read(ctx, conn, t.Schema, t.Name, t.Key())
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
// anything. With a partitioned table among them (partitioned), the
// publication publishes via the partition root (partitions.go), and an
// existing one that does not is refused. Column lists and row filters go
// into the publication, checked in the same transaction against the
// replica identity (replicate.go); an existing publication that publishes
// a table otherwise is refused with the statements that fix it.
func ensurePublication(ctx context.Context, conn *pgx.Conn, name string, cfg *tables.Config, partitioned bool, log *slog.Logger) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("check publication: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit a no-op
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)", name).Scan(&exists); err != nil {
		return fmt.Errorf("check publication: %w", err)
	}
	specs := make([]string, 0, len(cfg.Tables))
	for _, t := range cfg.Tables {
		cols, err := publishedColumns(ctx, tx, t)
		if err != nil {
			return err
		}
		specs = append(specs, tableSpec(t, cols))
	}
	if !exists {
		return createPublication(ctx, tx, name, cfg, specs, partitioned, log)
	}
	if partitioned {
		if err := checkViaRoot(ctx, tx, name); err != nil {
			return err
		}
	}
	var added []string
	for i, t := range cfg.Tables {
		add, err := checkPublished(ctx, tx, name, t, specs[i])
		if err != nil {
			return err
		}
		if add {
			if err := addToPublication(ctx, tx, name, t, specs[i]); err != nil {
				return err
			}
			added = append(added, t.Name)
		}
	}
	if err := probeAll(ctx, tx, cfg); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("publication %s: %w", name, err)
	}
	for _, t := range added {
		log.Info("table added to publication", slog.String("publication", name), slog.String("table", t))
	}
	return nil
}

// createPublication creates publication name for the tables of specs (a
// table's spec carries its column list and row filter), probes their
// writes and commits.
func createPublication(ctx context.Context, tx pgx.Tx, name string, cfg *tables.Config, specs []string, partitioned bool, log *slog.Logger) error {
	q := fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pgx.Identifier{name}.Sanitize(), strings.Join(specs, ", "))
	if partitioned {
		q += " WITH (publish_via_partition_root = true)"
	}
	if _, err := tx.Exec(ctx, q); err != nil {
		return fmt.Errorf("create publication %s (the role needs to own the tables, or an administrator runs: %s): %w", name, q, err)
	}
	if err := probeAll(ctx, tx, cfg); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("create publication %s: %w", name, err)
	}
	log.Info("publication created", slog.String("publication", name))
	return nil
}

// checkPublished says whether the existing publication name lacks table t
// (add), and refuses one that publishes t with other columns or another
// row filter than spec, the table's config, asks for.
func checkPublished(ctx context.Context, tx pgx.Tx, name string, t tables.Table, spec string) (add bool, err error) {
	have, in, err := readPublished(ctx, tx, name, t)
	if err != nil {
		return false, err
	}
	if !in {
		return true, nil
	}
	if !t.HasColumnList() && t.RowFilter == "" && have.filter == nil {
		if err := sameColumns(ctx, tx, t, have); err != nil {
			return false, fmt.Errorf("publication %s: %w", name, err)
		}
		return false, nil
	}
	want, err := wantPublished(ctx, tx, t, spec)
	if err != nil {
		return false, err
	}
	if !slices.Equal(have.columns, want.columns) || !equalFilter(have.filter, want.filter) {
		pub := pgx.Identifier{name}.Sanitize()
		return false, fmt.Errorf("publication %s publishes %s.%s with columns %v and row filter %s, the table config says %v and %s: run ALTER PUBLICATION %s DROP TABLE %s; ALTER PUBLICATION %s ADD TABLE %s",
			name, t.Schema, t.Name, have.columns, filterText(have.filter), want.columns, filterText(want.filter),
			pub, pgx.Identifier{t.Schema, t.Name}.Sanitize(), pub, spec)
	}
	return false, nil
}

// addToPublication adds table t, as spec, to the existing publication name.
func addToPublication(ctx context.Context, tx pgx.Tx, name string, t tables.Table, spec string) error {
	q := fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", pgx.Identifier{name}.Sanitize(), spec)
	if _, err := tx.Exec(ctx, q); err != nil {
		return fmt.Errorf("publication %s lacks table %s.%s and adding it failed (an administrator can run: %s): %w",
			name, t.Schema, t.Name, q, err)
	}
	return nil
}

// probeAll probes every configured table's writes (replicate.go).
func probeAll(ctx context.Context, tx pgx.Tx, cfg *tables.Config) error {
	for _, t := range cfg.Tables {
		if err := probeWrites(ctx, tx, t); err != nil {
			return err
		}
	}
	return nil
}

// sameColumns refuses a publication with a column list of its own for a
// table configured to replicate every column.
func sameColumns(ctx context.Context, tx pgx.Tx, t tables.Table, have publishedAs) error {
	var all []string
	err := tx.QueryRow(ctx, `SELECT array_agg(attname::text ORDER BY attnum) FROM pg_attribute
		WHERE attrelid = format('%I.%I', $1::text, $2::text)::regclass AND attnum > 0 AND NOT attisdropped AND attgenerated = ''`, t.Schema, t.Name).Scan(&all)
	if err != nil {
		return fmt.Errorf("columns of %s.%s: %w", t.Schema, t.Name, err)
	}
	if !slices.Equal(all, have.columns) {
		return fmt.Errorf("it publishes only columns %v of %s.%s, the table config replicates all (%v): set columns or exclude_columns in the table config, or run ALTER PUBLICATION ... DROP TABLE then ADD TABLE %s",
			have.columns, t.Schema, t.Name, all, pgx.Identifier{t.Schema, t.Name}.Sanitize())
	}
	return nil
}

func equalFilter(a, b *string) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

func filterText(f *string) string {
	if f == nil {
		return "none"
	}
	return *f
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
