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

	"github.com/tributary/tributary/internal/query"
)

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

// copies reads the live copies of ids (decimal integers) in table with
// the API's by-id read (query.RowsOf) and turns each into the JSON the API
// writes, decoded with UseNumber like an API answer. An id with no live
// copy is absent from the map.
func (r *chReader) copies(ctx context.Context, table, idColumn string, ids []string) (map[string][]apiCopy, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	read, err := query.New(r.conn, r.db).RowsOf(ctx, table, idColumn, ids)
	if errors.Is(err, query.ErrUnknownTable) {
		return map[string][]apiCopy{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("clickhouse: %w", err)
	}
	out := make(map[string][]apiCopy, len(read))
	for id, cs := range read {
		for _, c := range cs {
			row, err := asAPIJSON(c.Row)
			if err != nil {
				return nil, fmt.Errorf("clickhouse: rows of %s: id %s: %w", table, id, err)
			}
			out[id] = append(out[id], apiCopy{Shard: c.Shard, Row: row})
		}
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
