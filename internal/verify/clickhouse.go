package verify

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/rowkey"
)

// ClickHouse error codes the verifier tells apart.
const (
	chUnknownTable    = 60
	chUnknownDatabase = 81
)

// chReader counts and lists live rows in ClickHouse. It only reads; every
// query is exact (FINAL with a plain WHERE, tombstones filtered).
type chReader struct {
	conn    driver.Conn
	db      string
	timeout time.Duration
}

func openClickHouse(ctx context.Context, c ClickHouse, timeout time.Duration) (*chReader, error) {
	// A test tool only reads: ReadOnly refuses writes and DDL.
	conn, err := chstore.Dial(ctx, chstore.DialOptions{Addr: c.Addr, Username: c.User, Password: c.Password,
		MaxOpenConns: 4, DialTimeout: timeout, ReadOnly: true, TLS: c.TLS})
	if err != nil {
		return nil, err // it names ClickHouse, the address and the user
	}
	return &chReader{conn: conn, db: c.Database, timeout: timeout}, nil
}

func (r *chReader) close() error { return r.conn.Close() }

func chQuote(id string) string { return "`" + strings.ReplaceAll(id, "`", "\\`") + "`" }

// notLoaded tells "no such table (yet)" from a failure: a table the loader
// has not created holds no rows.
func notLoaded(err error) bool {
	var ex *clickhouse.Exception
	return errors.As(err, &ex) && (ex.Code == chUnknownTable || ex.Code == chUnknownDatabase)
}

// counts returns the live rows of table per shard.
func (r *chReader) counts(ctx context.Context, table string) (map[int]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	sql := fmt.Sprintf("SELECT _shard, count() FROM %s.%s FINAL WHERE _deleted = 0 GROUP BY _shard",
		chQuote(r.db), chQuote(table))
	rows, err := r.conn.Query(ctx, sql)
	if notLoaded(err) {
		return map[int]int64{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("clickhouse: count %s: %w", table, err)
	}
	defer rows.Close()
	out := map[int]int64{}
	for rows.Next() {
		var shard uint16
		var n uint64
		if err := rows.Scan(&shard, &n); err != nil {
			return nil, fmt.Errorf("clickhouse: count %s: %w", table, err)
		}
		out[int(shard)] = int64(n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: count %s: %w", table, err)
	}
	return out, nil
}

// ids lists the live ids of table on shard as text, at most limit of them.
func (r *chReader) ids(ctx context.Context, table string, key []string, shard, limit int) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	texts := make([]string, len(key))
	for i, c := range key {
		texts[i] = "toString(" + chQuote(c) + ")"
	}
	sql := fmt.Sprintf("SELECT %s FROM %s.%s FINAL WHERE _shard = %d AND _deleted = 0 LIMIT %d",
		strings.Join(texts, ", "), chQuote(r.db), chQuote(table), shard, limit)
	rows, err := r.conn.Query(ctx, sql)
	if notLoaded(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("clickhouse: ids of %s: %w", table, err)
	}
	defer rows.Close()
	var out []string
	parts := make([]string, len(key))
	dst := make([]any, len(key))
	for i := range parts {
		dst[i] = &parts[i]
	}
	for rows.Next() {
		if err := rows.Scan(dst...); err != nil {
			return nil, fmt.Errorf("clickhouse: ids of %s: %w", table, err)
		}
		out = append(out, rowkey.Encode(parts))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: ids of %s: %w", table, err)
	}
	return out, nil
}
