package chstore

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/tributary/tributary/internal/rowkey"
)

// Row is one version of one source row, ready to be written.
type Row struct {
	Shard     uint16
	Version   uint64
	Deleted   bool
	CommitLSN uint64
	CommitTS  time.Time
	// Values are PostgreSQL text values by column; nil is NULL. Columns
	// missing from Values are NULL (key columns of a tombstone get zero).
	Values map[string]*string
	// Keep lists columns whose previous value must be kept (unchanged
	// TOAST); Fill supplies them before Convert.
	Keep []string
	// Filled holds typed values for Keep columns, set by FillUnchanged.
	Filled map[string]any
}

// ConvertError says which column of which row could not be converted.
type ConvertError struct {
	Table, Column, Value string
	Err                  error
}

func (e *ConvertError) Error() string {
	v := e.Value
	if len(v) > 64 {
		v = v[:64] + "..."
	}
	return fmt.Sprintf("table %s column %s: cannot convert %q: %v", e.Table, e.Column, v, e.Err)
}

func (e *ConvertError) Unwrap() error { return e.Err }

// Convert turns a row into the values of one INSERT row, in the order of
// InsertColumns. Errors are *ConvertError.
func (t *Table) Convert(r *Row, loadedAt time.Time) ([]any, error) {
	out := make([]any, 0, len(t.Columns)+len(metaColumns))
	for _, c := range t.Columns {
		if v, ok := r.Filled[c.Name]; ok {
			out = append(out, v)
			continue
		}
		p, present := r.Values[c.source()]
		if !present && c.missing != nil && !r.Deleted {
			out = append(out, c.missing) // as Block.Set
			continue
		}
		if p == nil {
			if c.Nullable {
				out = append(out, nil)
				continue
			}
			if r.Deleted {
				out = append(out, c.typ.zero())
				continue
			}
			return nil, &ConvertError{Table: t.Name, Column: c.Name, Err: fmt.Errorf("NULL in key column")}
		}
		v, err := c.typ.convert(*p)
		if err != nil {
			return nil, &ConvertError{Table: t.Name, Column: c.Name, Value: *p, Err: err}
		}
		out = append(out, v)
	}
	var del uint8
	if r.Deleted {
		del = 1
	}
	out = append(out, r.Shard, r.Version, del, r.CommitLSN, r.CommitTS.UTC(), loadedAt.UTC())
	return out, nil
}

// InsertColumns is the column list of an INSERT into t.
func (t *Table) InsertColumns() []string {
	names := make([]string, 0, len(t.Columns)+len(metaColumns))
	for _, c := range t.Columns {
		names = append(names, c.Name)
	}
	for _, m := range metaColumns {
		names = append(names, m.name)
	}
	return names
}

// RowKey identifies a row in ClickHouse: id text and shard.
type RowKey struct {
	ID    string
	Shard uint16
}

// Current reads the newest stored version of the given rows (deleted or
// not) — only the columns asked for, as typed values by column name — with
// their _version and _deleted. It is used to keep unchanged TOAST values,
// so cols are usually just the large ones. The ids travel as an external
// table: one query however many keys.
//
// The ids are a PREWHERE, the one exception to "exact reads never
// PREWHERE" (package doc): every version of an (id, _shard) carries the
// same id, so the replacing merge that FINAL runs after it still sees every
// version of each row it returns. It then merges the matching rows only,
// not every row of each granule the ids touch (with the large columns
// read, that is most of the cost: docs/benchmarks.md, Loader).

func (s *Store) Current(ctx context.Context, t *Table, keys []RowKey, cols []string) (map[RowKey]Stored, error) {
	out := map[RowKey]Stored{}
	if len(keys) == 0 {
		return out, nil
	}
	idList := make([]string, len(keys))
	for i, k := range keys {
		idList[i] = k.ID
	}
	ids, err := idTable(t, idList)
	if err != nil {
		return nil, err
	}
	sel := []string{t.keyText(), "_shard", "_version", "_deleted"}
	var names []string
	for _, c := range cols {
		if _, ok := t.byName[c]; ok {
			sel = append(sel, quote(c))
			names = append(names, c)
		}
	}
	q := fmt.Sprintf("SELECT %s FROM %s.%s FINAL PREWHERE %s IN _ids",
		strings.Join(sel, ", "), quote(s.db), quote(t.Name), t.keyTuple())
	rows, err := s.conn.Query(clickhouse.Context(ctx, clickhouse.WithExternalTable(ids), clickhouse.WithSettings(baseLookup)), q)
	if err != nil {
		return nil, fmt.Errorf("read current %s: %w", t.Name, err)
	}
	defer rows.Close()
	types := rows.ColumnTypes()
	for rows.Next() {
		dest := make([]any, len(types))
		for i, ct := range types {
			dest[i] = reflect.New(ct.ScanType()).Interface()
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("read current %s: %w", t.Name, err)
		}
		nk := len(t.Key)
		parts := make([]string, nk)
		for i := range parts {
			parts[i] = *(dest[i].(*string))
		}
		key := RowKey{ID: rowkey.Encode(parts), Shard: *(dest[nk].(*uint16))}
		st := Stored{Values: make(map[string]any, len(names)), Version: *(dest[nk+1].(*uint64)), Deleted: *(dest[nk+2].(*uint8)) == 1}
		for i, name := range names {
			st.Values[name] = reflect.ValueOf(dest[nk+3+i]).Elem().Interface()
		}
		out[key] = st
	}
	return out, rows.Err()
}

// baseLookup are the settings of Current: the blocks of recently written
// granules stay decompressed in ClickHouse's cache, and a few thousand
// matching rows need no 64k-row buffers. Speed only, never the answer; both
// exist in 18.16. optimize_move_to_prewhere stays 0 (Dial): the PREWHERE is
// written out, on the id alone.
var baseLookup = clickhouse.Settings{"use_uncompressed_cache": 1, "max_block_size": 1024, "optimize_move_to_prewhere": 0}

// WatermarkLSN returns the newest stored watermark of shard in a topic's
// partition (0: none yet). The loader reads it for an unchanged-TOAST
// update of a row it knows no version of: a watermark proves that the
// shard's initial copy had ended.
func (s *Store) WatermarkLSN(ctx context.Context, topic string, partition int32, shard uint16) (uint64, error) {
	var lsn uint64
	q := fmt.Sprintf("SELECT max(commit_lsn) FROM %s.%s WHERE shard = ? AND topic = ? AND partition = ?", quote(s.db), watermarksTable)
	if err := s.conn.QueryRow(ctx, q, shard, topic, uint32(partition)).Scan(&lsn); err != nil {
		return 0, fmt.Errorf("watermark of shard %d in %s/%d: %w", shard, topic, partition, err)
	}
	return lsn, nil
}

// Stored is a row as read back from ClickHouse.
type Stored struct {
	Values  map[string]any
	Version uint64
	Deleted bool
}

// EachLiveID calls fn with the ids of shard's live rows whose version is
// below before, n at a time (the last call may have fewer), while it reads
// them: memory holds one batch, whatever the table's size. fn's error ends
// the read and is returned.
func (s *Store) EachLiveID(ctx context.Context, t *Table, shard uint16, before uint64, n int, fn func(ids []string) error) error {
	return s.EachLiveRow(ctx, t, shard, before, nil, n, func(ids []string, _ [][]*string) error { return fn(ids) })
}

// EachLiveIDOf is EachLiveID on table name with key columns key (the
// table config's); a table ClickHouse does not have has no live ids.
func (s *Store) EachLiveIDOf(ctx context.Context, name string, key []string, shard uint16, before uint64, n int, fn func(ids []string) error) error {
	t, err := s.Lookup(ctx, name, key)
	if err != nil || t == nil {
		return err
	}
	return s.EachLiveID(ctx, t, shard, before, n, fn)
}

// IsUnknownTable reports an error of a query on a table ClickHouse does
// not have (both 18.16's and current ClickHouse's wording).
func IsUnknownTable(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "doesn't exist") || strings.Contains(err.Error(), "UNKNOWN_TABLE"))
}
