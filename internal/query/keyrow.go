package query

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// A table identified by several columns (a composite key) is read by the
// values of all of them: KeyRow. The key's ClickHouse types come from
// system.columns (the API knows only the table config), read once per
// table; each part of the key text is converted to its column's type here,
// so a part that does not convert is the caller's 400, never a query
// error.

// KeyPartError is a part of a key that does not convert to its column's
// type.
type KeyPartError struct {
	Column, Type, Value string
}

func (e *KeyPartError) Error() string {
	return fmt.Sprintf("%q is not a value of %s (%s)", e.Value, e.Column, e.Type)
}

// keyTypes reads the ClickHouse types of table's key columns.
func (q *Queries) keyTypes(ctx context.Context, table string, key []string) ([]string, error) {
	cacheKey := table + "\x00" + strings.Join(key, "\x00")
	if v, ok := q.keyTypeCache.Load(cacheKey); ok {
		return v.([]string), nil
	}
	rows, err := q.conn.Query(ctx, "SELECT name, type FROM system.columns WHERE database = ? AND table = ?", q.db, table)
	if err != nil {
		return nil, fmt.Errorf("key types of %s: %w", table, err)
	}
	defer rows.Close()
	byName := map[string]string{}
	for rows.Next() {
		var n, t string
		if err := rows.Scan(&n, &t); err != nil {
			return nil, fmt.Errorf("key types of %s: %w", table, err)
		}
		byName[n] = t
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("key types of %s: %w", table, err)
	}
	if len(byName) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrUnknownTable, table)
	}
	types := make([]string, len(key))
	for i, c := range key {
		if types[i] = byName[c]; types[i] == "" {
			return nil, fmt.Errorf("key types of %s: no key column %s in ClickHouse", table, c)
		}
	}
	q.keyTypeCache.Store(cacheKey, types)
	return types, nil
}

// keyValue converts one part of a key text to a value of ClickHouse type
// typ.
func keyValue(column, typ, part string) (any, error) {
	bad := &KeyPartError{Column: column, Type: typ, Value: part}
	switch typ {
	case "Int16", "Int32", "Int64":
		bits, _ := strconv.Atoi(strings.TrimPrefix(typ, "Int"))
		n, err := strconv.ParseInt(part, 10, bits)
		if err != nil {
			return nil, bad
		}
		return n, nil
	case "UUID":
		u, err := uuid.Parse(part)
		if err != nil || strings.Count(part, "-") != 4 {
			return nil, bad
		}
		return u.String(), nil
	case "String":
		return part, nil
	}
	return nil, fmt.Errorf("key column %s has type %s, not one a key of several columns takes", column, typ)
}

// KeyRow is Row for a table identified by the columns key: every live
// copy of the row whose key columns hold parts (the split key text, in
// key order). A part that does not convert to its column's type is a
// *KeyPartError.
func (q *Queries) KeyRow(ctx context.Context, table string, key, parts []string) ([]Copy, error) {
	if len(parts) != len(key) {
		return nil, fmt.Errorf("read %s: %d key parts for the %d key columns", table, len(parts), len(key))
	}
	types, err := q.keyTypes(ctx, table, key)
	if err != nil {
		return nil, err
	}
	args := make([]any, len(key))
	conds := make([]string, len(key))
	for i, c := range key {
		if args[i], err = keyValue(c, types[i], parts[i]); err != nil {
			return nil, err
		}
		conds[i] = quote(c) + " = ?"
	}
	// PREWHERE on key columns only: every version of a row carries the
	// same key, so FINAL still merges all of them (planRow's rule).
	sql := fmt.Sprintf("SELECT * FROM %s.%s FINAL PREWHERE %s WHERE _deleted = 0 ORDER BY _shard",
		quote(q.db), quote(table), strings.Join(conds, " AND "))
	return q.pointCopies(ctx, table, sql, args...)
}

// IsKeyPartError says whether err is a *KeyPartError.
func IsKeyPartError(err error) bool {
	var kp *KeyPartError
	return errors.As(err, &kp)
}
