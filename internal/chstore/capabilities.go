package chstore

import (
	"context"
	"fmt"
)

// Capabilities are server features newer than ClickHouse 18.16 that the
// loader could use, detected from the server itself: never assumed from a
// version number.
type Capabilities struct {
	// Version is the server's version() text, for logs.
	Version string
	// InsertDeduplicationToken: the server knows the insert setting
	// insert_deduplication_token (ClickHouse 22.2 and later). With it a
	// Replicated* table drops a retried INSERT block carrying the same
	// token. 18.16 has neither the setting nor insert deduplication on
	// ordinary MergeTree tables, so exactness comes from source versions
	// (ReplacingMergeTree(_version)) and this stays false here.
	InsertDeduplicationToken bool
}

// InsertDeduplicationTokenSetting is the setting's name in system.settings.
const InsertDeduplicationTokenSetting = "insert_deduplication_token"

// DetectCapabilities asks the server which optional features it has.
func (s *Store) DetectCapabilities(ctx context.Context) (Capabilities, error) {
	var c Capabilities
	if err := s.conn.QueryRow(ctx, "SELECT version()").Scan(&c.Version); err != nil {
		return c, fmt.Errorf("server version: %w", err)
	}
	var n uint64
	q := "SELECT count() FROM system.settings WHERE name = ?"
	if err := s.conn.QueryRow(ctx, q, InsertDeduplicationTokenSetting).Scan(&n); err != nil {
		return c, fmt.Errorf("detect %s: %w", InsertDeduplicationTokenSetting, err)
	}
	c.InsertDeduplicationToken = n > 0
	return c, nil
}

// UseInsertDeduplicationToken says whether inserts into the loader's tables
// may carry a deduplication token: only where the server has the setting
// and the table engine honours it (Replicated*). The loader's tables are
// ReplacingMergeTree, not replicated, so today this is false on every
// server; it becomes true only with both a capable server and replicated
// tables, and exactness never depends on it (versions still decide).
func (c Capabilities) UseInsertDeduplicationToken(replicatedTables bool) bool {
	return c.InsertDeduplicationToken && replicatedTables
}
