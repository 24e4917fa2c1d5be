package verify

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/pgdsn"
	"github.com/tributary/tributary/internal/rowkey"
	"github.com/tributary/tributary/internal/tables"
)

// shardSource reads one shard, read-only. Every query runs under its own
// timeout, so one slow shard fails on its own instead of stalling the rest.
type shardSource struct {
	id      int
	pool    *pgxpool.Pool
	timeout time.Duration
}

// openShard connects to one shard. The session is read-only and reads
// values in the text forms pgoutput sends: DateStyle ISO, and TimeZone UTC
// (timestamptz text carries its offset either way).
func openShard(ctx context.Context, s Shard, timeout time.Duration) (*shardSource, error) {
	// pgx's own parse error may show part of the DSN's password.
	if err := pgdsn.Check(s.DSN); err != nil {
		return nil, fmt.Errorf("shard %d: %w", s.ID, err)
	}
	cfg, err := pgxpool.ParseConfig(s.DSN)
	if err != nil {
		return nil, fmt.Errorf("shard %d: bad DSN", s.ID)
	}
	rp := cfg.ConnConfig.RuntimeParams
	rp["default_transaction_read_only"] = "on"
	rp["DateStyle"] = "ISO, MDY"
	rp["TimeZone"] = "UTC"
	rp["application_name"] = "tributary-verify"
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("shard %d: %w", s.ID, err)
	}
	src := &shardSource{id: s.ID, pool: pool, timeout: timeout}
	qctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := pool.Ping(qctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("shard %d: connect: %w", s.ID, err)
	}
	return src, nil
}

func (s *shardSource) close() { s.pool.Close() }

// walLSN is the shard's current WAL write position.
func (s *shardSource) walLSN(ctx context.Context) (envelope.LSN, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var text string
	if err := s.pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&text); err != nil {
		return 0, fmt.Errorf("shard %d: read WAL position: %w", s.id, err)
	}
	lsn, err := envelope.ParseLSN(text)
	if err != nil {
		return 0, fmt.Errorf("shard %d: %w", s.id, err)
	}
	return lsn, nil
}

// sourceTable is one table as one shard has it.
type sourceTable struct {
	ident  string // quoted schema.name
	filter string // the table's row filter as a WHERE condition, "TRUE" when it has none
	cols   []column
	idCol  int    // index of the id column in cols
	idType string // format_type of the id column
	// idCols and idTypes are the same for every column of the table's
	// key, in key order (one entry for a one-column key); ids are key
	// texts (internal/rowkey).
	idCols  []int
	idTypes []string
}

// keyText is the key text of a row of st, ok false when a key column is
// NULL.
func (st *sourceTable) keyText(values []*string) (string, bool) {
	parts := make([]string, len(st.idCols))
	for i, at := range st.idCols {
		if values[at] == nil {
			return "", false
		}
		parts[i] = *values[at]
	}
	return rowkey.Encode(parts), true
}

// table reads the table's columns from the catalog.
func (s *shardSource) table(ctx context.Context, t *tables.Table) (*sourceTable, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	st := &sourceTable{ident: pgx.Identifier{t.Schema, t.Name}.Sanitize(), filter: rowFilter(t), idCol: -1}
	// A domain's values are its base type's (the loader maps it so):
	// compare them as that type, with the domain's modifier.
	rows, err := s.pool.Query(ctx, `SELECT a.attname, (
		    WITH RECURSIVE d(oid, typmod, depth) AS (
		        SELECT a.atttypid, a.atttypmod, 0
		        UNION ALL
		        SELECT t.typbasetype, t.typtypmod, d.depth + 1 FROM d JOIN pg_type t ON t.oid = d.oid
		        WHERE t.typtype = 'd' AND d.depth < 64)
		    SELECT format_type(oid, typmod) FROM d ORDER BY depth DESC LIMIT 1)
		FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY a.attnum`, st.ident)
	if err != nil {
		return nil, fmt.Errorf("shard %d: columns of %s: %w", s.id, st.ident, err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			return nil, fmt.Errorf("shard %d: columns of %s: %w", s.id, st.ident, err)
		}
		if !t.Replicates(name) {
			continue // left on the shard by the table's column list
		}
		if k := slices.Index(t.Key(), name); k >= 0 {
			if st.idCols == nil {
				st.idCols, st.idTypes = make([]int, len(t.Key())), make([]string, len(t.Key()))
				for i := range st.idCols {
					st.idCols[i] = -1
				}
			}
			st.idCols[k], st.idTypes[k] = len(st.cols), typ
		}
		st.cols = append(st.cols, newColumn(name, typ))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("shard %d: columns of %s: %w", s.id, st.ident, err)
	}
	if len(st.cols) == 0 {
		return nil, fmt.Errorf("shard %d: table %s does not exist", s.id, st.ident)
	}
	for i, at := range st.idCols {
		if at < 0 {
			return nil, fmt.Errorf("shard %d: table %s has no id column %q", s.id, st.ident, t.Key()[i])
		}
	}
	if st.idCols == nil {
		return nil, fmt.Errorf("shard %d: table %s has no id column %q", s.id, st.ident, t.Key()[0])
	}
	st.idCol, st.idType = st.idCols[0], st.idTypes[0]
	// The API looks ids up as 64-bit integers or UUIDs only; the parts of
	// a composite key may be texts too.
	for i, at := range st.idCols {
		k := st.cols[at].kind
		if k != kindInt && k != kindBigint && k != kindUUID && (len(st.idCols) == 1 || k != kindText) {
			return nil, fmt.Errorf("shard %d: table %s: id column %q is %s; the API looks up integer and uuid ids only (and text parts of a composite key)",
				s.id, st.ident, t.Key()[i], st.idTypes[i])
		}
	}
	return st, nil
}

// rowFilter is t's row filter as a condition: the rows the publication
// leaves on the shard are not expected in ClickHouse.
func rowFilter(t *tables.Table) string {
	if t.RowFilter == "" {
		return "TRUE"
	}
	return "(" + t.RowFilter + ")"
}

// count is the number of live rows.
func (s *shardSource) count(ctx context.Context, st *sourceTable) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var n int64
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM "+st.ident+" WHERE "+st.filter).Scan(&n); err != nil {
		return 0, fmt.Errorf("shard %d: count %s: %w", s.id, st.ident, err)
	}
	return n, nil
}

// ids lists the live ids as text: all of them, or a random sample of limit
// when there are more than limit (limit 0: all).
func (s *shardSource) ids(ctx context.Context, st *sourceTable, total int64, limit int) (ids []string, sampled bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	keyCols := make([]string, len(st.idCols))
	for i, at := range st.idCols {
		keyCols[i] = pgx.Identifier{st.cols[at].Name}.Sanitize() + "::text"
	}
	sql := fmt.Sprintf("SELECT %s FROM %s WHERE %s", strings.Join(keyCols, ", "), st.ident, st.filter)
	if limit > 0 && total > int64(limit) {
		// A top-N sort: one scan, memory bounded by limit.
		sql += fmt.Sprintf(" ORDER BY random() LIMIT %d", limit)
		sampled = true
	}
	rows, err := s.pool.Query(ctx, sql)
	if err != nil {
		return nil, false, fmt.Errorf("shard %d: ids of %s: %w", s.id, st.ident, err)
	}
	ids, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (string, error) {
		parts := make([]string, len(st.idCols))
		dst := make([]any, len(parts))
		for i := range parts {
			dst[i] = &parts[i]
		}
		err := row.Scan(dst...)
		return rowkey.Encode(parts), err
	})
	if err != nil {
		return nil, false, fmt.Errorf("shard %d: ids of %s: %w", s.id, st.ident, err)
	}
	return ids, sampled, nil
}

// rows reads the live rows with the given ids, keyed by id text. Values
// come in PostgreSQL's text format, exactly what pgoutput sends.
func (s *shardSource) rows(ctx context.Context, st *sourceTable, ids []string) (map[string]*sourceRow, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	names := make([]string, len(st.cols))
	for i, c := range st.cols {
		names[i] = pgx.Identifier{c.Name}.Sanitize()
	}
	// The cast is on the parameter, so the id index is used.
	sql := fmt.Sprintf("SELECT %s FROM %s WHERE %s = ANY($1::text[]::%s[]) AND %s",
		strings.Join(names, ", "), st.ident, names[st.idCol], st.idType, st.filter)
	args := []any{pgx.QueryResultFormats{pgx.TextFormatCode}, ids}
	if len(st.idCols) > 1 {
		// A composite key: one text array per key column, each cast to
		// the column's type, zipped by unnest.
		keys, arrays, casts := make([]string, len(st.idCols)), make([]string, len(st.idCols)), make([]string, len(st.idCols))
		args = []any{pgx.QueryResultFormats{pgx.TextFormatCode}}
		cols := make([][]string, len(st.idCols))
		for _, id := range ids {
			parts, err := rowkey.Parse(id, len(st.idCols))
			if err != nil {
				return nil, fmt.Errorf("shard %d: rows of %s: %w", s.id, st.ident, err)
			}
			for i, p := range parts {
				cols[i] = append(cols[i], p)
			}
		}
		for i, at := range st.idCols {
			keys[i] = names[at]
			arrays[i] = fmt.Sprintf("$%d::text[]", i+1)
			casts[i] = fmt.Sprintf("u.k%d::%s", i, st.idTypes[i])
			args = append(args, cols[i])
		}
		un := make([]string, len(st.idCols))
		for i := range un {
			un[i] = fmt.Sprintf("k%d", i)
		}
		sql = fmt.Sprintf("SELECT %s FROM %s WHERE (%s) IN (SELECT %s FROM unnest(%s) u(%s)) AND %s",
			strings.Join(names, ", "), st.ident, strings.Join(keys, ", "), strings.Join(casts, ", "),
			strings.Join(arrays, ", "), strings.Join(un, ", "), st.filter)
	}
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("shard %d: rows of %s: %w", s.id, st.ident, err)
	}
	defer rows.Close()
	out := make(map[string]*sourceRow, len(ids))
	for rows.Next() {
		raw := rows.RawValues()
		if len(raw) != len(st.cols) {
			return nil, fmt.Errorf("shard %d: rows of %s: %d values for %d columns", s.id, st.ident, len(raw), len(st.cols))
		}
		r := &sourceRow{cols: st.cols, values: make([]*string, len(raw))}
		for i, b := range raw {
			if b != nil { // RawValues are reused by the next row: copy
				v := string(b)
				r.values[i] = &v
			}
		}
		id, ok := st.keyText(r.values)
		if !ok {
			return nil, fmt.Errorf("shard %d: rows of %s: NULL id", s.id, st.ident)
		}
		out[id] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("shard %d: rows of %s: %w", s.id, st.ident, err)
	}
	return out, nil
}
