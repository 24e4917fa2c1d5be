package chstore

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Pause is an operator's pause or resume of one table (tributaryctl pause
// and resume): every loader of the database reads the newest record per
// table and stops applying a paused table's topic until it is resumed.
type Pause struct {
	Table  string
	Paused bool
	// Reason and By say why and who (the operator's words and user).
	Reason, By string
	At         time.Time
}

// PausedTablesTable holds Pause records.
const PausedTablesTable = "_paused_tables"

// EnsurePaused creates the pause records' table if it is missing; the
// loaders create it at start, tributaryctl before its first pause.
func EnsurePaused(ctx context.Context, conn driver.Conn, db string) error {
	// The newest record per table wins (version: nanoseconds of At, so two
	// records within one second are still ordered).
	q := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (
		table String, paused UInt8, reason String, by String, at DateTime('UTC'), version UInt64
	) ENGINE = ReplacingMergeTree(version) ORDER BY table`, quote(db), PausedTablesTable)
	if err := conn.Exec(ctx, q); err != nil {
		return fmt.Errorf("create paused tables table: %w", err)
	}
	return nil
}

// WritePause stores a pause or resume of p.Table.
func WritePause(ctx context.Context, conn driver.Conn, db string, p Pause) error {
	b, err := conn.PrepareBatch(ctx, fmt.Sprintf("INSERT INTO %s.%s (table, paused, reason, by, at, version)", quote(db), PausedTablesTable))
	if err != nil {
		return fmt.Errorf("prepare pause of %s: %w", p.Table, err)
	}
	defer b.Abort() //nolint:errcheck // no-op after Send
	var paused uint8
	if p.Paused {
		paused = 1
	}
	if err := b.Append(p.Table, paused, p.Reason, p.By, p.At.UTC(), uint64(p.At.UnixNano())); err != nil {
		return fmt.Errorf("append pause of %s: %w", p.Table, err)
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("insert pause of %s: %w", p.Table, err)
	}
	return nil
}

// Pauses returns the newest record of every table that has one, paused
// or resumed, by table.
func Pauses(ctx context.Context, conn driver.Conn, db string) (map[string]Pause, error) {
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT table, argMax(paused, version), argMax(reason, version),
		argMax(by, version), argMax(at, version) FROM %s.%s GROUP BY table`, quote(db), PausedTablesTable))
	if err != nil {
		return nil, fmt.Errorf("read paused tables: %w", err)
	}
	defer rows.Close()
	out := map[string]Pause{}
	for rows.Next() {
		var p Pause
		var paused uint8
		if err := rows.Scan(&p.Table, &paused, &p.Reason, &p.By, &p.At); err != nil {
			return nil, fmt.Errorf("read paused tables: %w", err)
		}
		p.Paused = paused == 1
		out[p.Table] = p
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read paused tables: %w", err)
	}
	return out, nil
}
