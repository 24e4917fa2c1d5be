package verify

// Rows read from ClickHouse in bulk: the copies GET
// /v1/tables/{table}/rows/{id} would answer for many ids at once, so that
// every row can be compared without one API request each (a by-id read
// costs ClickHouse a merge of one granule per part, ~100 requests/s on a
// busy 2-core machine). The API's own answers are still read for a
// random sample of every table and shard (Config.APISample), and for
// every difference before it is reported.

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/tributary/tributary/internal/query"
)

// chMetaColumns are the loader's columns that are not part of a row's
// copy (the API returns the shard and the version beside the row).
var chMetaColumns = map[string]bool{"_shard": true, "_version": true, "_commit_lsn": true,
	"_commit_ts": true, "_deleted": true, "_loaded_at": true}

// bulkIDType reports whether table's id column in ClickHouse is an integer
// type, whose ids can be listed as literals in one IN (false when the
// table does not exist yet).
func (r *chReader) bulkIDType(ctx context.Context, table, idColumn string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	var typ string
	err := r.conn.QueryRow(ctx, "SELECT type FROM system.columns WHERE database = ? AND table = ? AND name = ?",
		r.db, table, idColumn).Scan(&typ)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		return false, fmt.Errorf("clickhouse: type of %s.%s: %w", table, idColumn, err)
	}
	return intIDType(typ), nil
}

// intIDType: the ClickHouse integer types (ids of every seed000, Snowflake
// and serial layout).
func intIDType(typ string) bool {
	switch typ {
	case "Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64":
		return true
	}
	return false
}

// copies reads the live copies of ids (decimal integers) in table with the
// API's by-id read — FINAL, the id in PREWHERE, tombstones filtered, by
// shard — and turns each into the JSON the API writes (internal/query's
// JSONValue, then decoded with UseNumber like an API answer). An id with no
// live copy is absent from the map.
func (r *chReader) copies(ctx context.Context, table, idColumn string, ids []string) (map[string][]apiCopy, error) {
	if len(ids) == 0 {
		return map[string][]apiCopy{}, nil
	}
	list := make([]string, len(ids))
	for i, id := range ids {
		// Checked, so the literal list cannot be anything but integers.
		if _, err := strconv.ParseInt(id, 10, 64); err != nil {
			if _, uerr := strconv.ParseUint(id, 10, 64); uerr != nil {
				return nil, fmt.Errorf("clickhouse: rows of %s: id %q is not an integer", table, id)
			}
		}
		list[i] = id
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	q := fmt.Sprintf("SELECT toString(%[1]s) AS _verify_id, * FROM %[2]s.%[3]s FINAL PREWHERE %[1]s IN (%[4]s) WHERE _deleted = 0 ORDER BY %[1]s, _shard",
		chQuote(idColumn), chQuote(r.db), chQuote(table), strings.Join(list, ","))
	rows, err := r.conn.Query(ctx, q)
	if notLoaded(err) {
		return map[string][]apiCopy{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("clickhouse: rows of %s: %w", table, err)
	}
	defer rows.Close()
	cols, types := rows.Columns(), rows.ColumnTypes()
	out := make(map[string][]apiCopy, len(ids))
	for rows.Next() {
		dest := make([]any, len(types))
		for i, ct := range types {
			dest[i] = reflect.New(ct.ScanType()).Interface()
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("clickhouse: rows of %s: %w", table, err)
		}
		var id string
		c := apiCopy{Shard: -1}
		row := map[string]any{}
		for i, name := range cols {
			v := reflect.ValueOf(dest[i]).Elem().Interface()
			switch {
			case i == 0:
				id = v.(string)
			case name == "_shard":
				c.Shard = int(v.(uint16))
			case !chMetaColumns[name]:
				row[name] = query.JSONValue(v)
			}
		}
		if c.Row, err = asAPIJSON(row); err != nil {
			return nil, fmt.Errorf("clickhouse: rows of %s: id %s: %w", table, id, err)
		}
		out[id] = append(out[id], c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: rows of %s: %w", table, err)
	}
	return out, nil
}

// asAPIJSON encodes a row as the API does and decodes it as the verifier
// decodes the API's answers (numbers kept as json.Number).
func asAPIJSON(row map[string]any) (map[string]any, error) {
	b, err := json.Marshal(row)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out map[string]any
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}
