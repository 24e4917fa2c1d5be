package chstore

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Block holds converted rows column by column, in typed slices. The loader
// converts a batch into one Block and inserts the rows it keeps with one
// column-wise Append per column: no boxed value per cell, no reflection per
// row (row-wise Append cost the loader a tenth of its CPU, and []any rows a
// large part of its heap).
//
// Set may be called concurrently for distinct rows: every slice is sized up
// front.
type Block struct {
	t        *Table
	cols     []colBuf
	isNull   [][]bool // per source column; nil where the column is not Nullable
	shard    []uint16
	version  []uint64
	deleted  []uint8
	lsn      []uint64
	commitTS []time.Time
	loadedAt time.Time
	// of is, per column, the index of the timestamp column a microseconds
	// column is converted from (-1 for the others).
	of []int
}

// NewBlock returns a block of n rows of t, all loaded at loadedAt.
func (t *Table) NewBlock(n int, loadedAt time.Time) *Block {
	b := &Block{
		t: t, cols: make([]colBuf, len(t.Columns)), isNull: make([][]bool, len(t.Columns)),
		shard: make([]uint16, n), version: make([]uint64, n), deleted: make([]uint8, n),
		lsn: make([]uint64, n), commitTS: make([]time.Time, n), loadedAt: loadedAt.UTC(),
	}
	b.of = make([]int, len(t.Columns))
	for i, c := range t.Columns {
		b.of[i] = -1
		if c.of != "" {
			b.of[i] = t.Index(c.of)
		}
		b.cols[i] = c.typ.newBuf(n)
		if c.Nullable {
			b.isNull[i] = make([]bool, n)
		}
	}
	return b
}

// Len is the number of rows the block has room for.
func (b *Block) Len() int { return len(b.shard) }

// Set converts r into row i, with the rules of Convert. Errors are
// *ConvertError; row i is then unusable.
func (b *Block) Set(i int, r *Row) error {
	for ci, c := range b.t.Columns {
		if b.of[ci] >= 0 && b.setMicros(i, ci, b.of[ci]) {
			continue
		}
		if v, ok := r.Filled[c.Name]; ok {
			if err := b.setTyped(i, ci, v); err != nil {
				return &ConvertError{Table: b.t.Name, Column: c.Name, Value: fmt.Sprint(v), Err: err}
			}
			continue
		}
		p, present := r.Values[c.source()]
		if !present && c.missing != nil && !r.Deleted {
			// The change predates the column: its row has the value
			// PostgreSQL gives rows older than the column.
			if err := b.setTyped(i, ci, c.missing); err != nil {
				return &ConvertError{Table: b.t.Name, Column: c.Name, Value: fmt.Sprint(c.missing), Err: err}
			}
			continue
		}
		if p == nil {
			if c.Nullable {
				b.isNull[ci][i] = true
				continue
			}
			if r.Deleted {
				b.cols[ci].setZero(i)
				continue
			}
			return &ConvertError{Table: b.t.Name, Column: c.Name, Err: fmt.Errorf("NULL in key column")}
		}
		if err := b.cols[ci].parse(i, *p); err != nil {
			// The value is a slice of a fetched record (the envelope
			// decoder does not copy) and the error may outlive the batch:
			// it must not pin the record's buffer.
			return &ConvertError{Table: b.t.Name, Column: c.Name, Value: strings.Clone(*p), Err: err}
		}
		if c.Nullable {
			b.isNull[ci][i] = false
		}
	}
	b.shard[i], b.version[i], b.lsn[i], b.commitTS[i] = r.Shard, r.Version, r.CommitLSN, r.CommitTS.UTC()
	b.deleted[i] = 0
	if r.Deleted {
		b.deleted[i] = 1
	}
	return nil
}

// setMicros sets microseconds column ci of row i from its timestamp
// column si, when that column comes before it (so row i's value there is
// set): the text is parsed once. It reports whether it did.
func (b *Block) setMicros(i, ci, si int) bool {
	if si >= ci {
		return false
	}
	if b.isNull[si] != nil && b.isNull[si][i] {
		b.isNull[ci][i] = true
		return true
	}
	ts, isTime := b.cols[si].(*typedBuf[time.Time])
	us, isMicros := b.cols[ci].(*typedBuf[uint32])
	if !isTime || !isMicros {
		return false
	}
	us.vals[i] = uint32(ts.vals[i].Nanosecond() / 1000)
	b.isNull[ci][i] = false
	return true
}

// setTyped stores an already typed value (an unchanged TOAST column kept
// from an earlier version: a Value of a block, or a value read back from
// ClickHouse, possibly a pointer for a Nullable column).
func (b *Block) setTyped(i, ci int, v any) error {
	if rv := reflect.ValueOf(v); v == nil || (rv.Kind() == reflect.Pointer && rv.IsNil()) {
		if b.isNull[ci] == nil {
			b.cols[ci].setZero(i)
			return nil
		}
		b.isNull[ci][i] = true
		return nil
	} else if rv.Kind() == reflect.Pointer {
		v = rv.Elem().Interface()
	}
	if err := b.cols[ci].setAny(i, v); err != nil {
		return err
	}
	if b.isNull[ci] != nil {
		b.isNull[ci][i] = false
	}
	return nil
}

// Deleted reports whether row i is a tombstone.
func (b *Block) Deleted(i int) bool { return b.deleted[i] == 1 }

// Value is the typed value of column col in row i (nil for NULL or an
// unknown column): what an unchanged TOAST column of a later version keeps.
func (b *Block) Value(i int, col string) any {
	ci := b.t.Index(col)
	if ci < 0 || (b.isNull[ci] != nil && b.isNull[ci][i]) {
		return nil
	}
	return b.cols[ci].value(i)
}

// Insert writes the rows rows of block b (indices, in order) in one INSERT.
// Re-inserting the same rows is harmless: they carry the same _version.
func (s *Store) InsertBlock(ctx context.Context, b *Block, rows []int) error {
	if len(rows) == 0 {
		return nil
	}
	t := b.t
	cols := t.InsertColumns()
	q := make([]string, len(cols))
	for i, c := range cols {
		q[i] = quote(c)
	}
	batch, err := s.conn.PrepareBatch(ctx, fmt.Sprintf("INSERT INTO %s.%s (%s)", quote(s.db), quote(t.Name), strings.Join(q, ", ")))
	if err != nil {
		return fmt.Errorf("prepare insert %s: %w", t.Name, err)
	}
	defer batch.Abort() //nolint:errcheck // no-op after Send
	for ci := range t.Columns {
		if err := b.cols[ci].appendTo(batch.Column(ci), rows, b.isNull[ci]); err != nil {
			return fmt.Errorf("append %s.%s: %w", t.Name, t.Columns[ci].Name, err)
		}
	}
	loaded := make([]time.Time, len(rows))
	for i := range loaded {
		loaded[i] = b.loadedAt
	}
	meta := []any{pick(b.shard, rows), pick(b.version, rows), pick(b.deleted, rows),
		pick(b.lsn, rows), pick(b.commitTS, rows), loaded}
	for mi, m := range meta {
		if err := batch.Column(len(t.Columns) + mi).Append(m); err != nil {
			return fmt.Errorf("append %s.%s: %w", t.Name, metaColumns[mi].name, err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("insert %s (%d rows): %w", t.Name, len(rows), err)
	}
	return nil
}

// pick returns s's elements at rows, in order.
func pick[T any](s []T, rows []int) []T {
	out := make([]T, len(rows))
	for j, i := range rows {
		out[j] = s[i]
	}
	return out
}

// colBuf is one column of a Block.
type colBuf interface {
	parse(i int, s string) error
	setZero(i int)
	setAny(i int, v any) error
	value(i int) any
	// appendTo appends the rows to a batch column; isNull (nil when not
	// Nullable) marks NULLs, sent as nil pointers.
	appendTo(c driver.BatchColumn, rows []int, isNull []bool) error
}

// typedBuf is a colBuf of one Go type.
type typedBuf[T any] struct {
	vals    []T
	convert func(string) (T, error)
	zero    T
}

func (b *typedBuf[T]) parse(i int, s string) error {
	v, err := b.convert(s)
	b.vals[i] = v
	return err
}

func (b *typedBuf[T]) setZero(i int) { b.vals[i] = b.zero }

func (b *typedBuf[T]) setAny(i int, v any) error {
	switch x := v.(type) {
	case T:
		b.vals[i] = x
		return nil
	case fmt.Stringer: // a UUID read back from ClickHouse into a String buffer
		if _, isString := any(b.zero).(string); isString {
			return b.parse(i, x.String())
		}
	}
	return fmt.Errorf("kept value of type %T, column holds %T", v, b.zero)
}

func (b *typedBuf[T]) value(i int) any { return b.vals[i] }

func (b *typedBuf[T]) appendTo(c driver.BatchColumn, rows []int, isNull []bool) error {
	vals := pick(b.vals, rows)
	if isNull == nil {
		return c.Append(vals)
	}
	// Pointers into vals: one allocation for the column, not one per cell.
	ptrs := make([]*T, len(rows))
	for j, i := range rows {
		if !isNull[i] {
			ptrs[j] = &vals[j]
		}
	}
	return c.Append(ptrs)
}

// newBuf returns a typed buffer of n rows for the column type.
func (c colType) newBuf(n int) colBuf {
	switch c.kind {
	case kindInt16:
		return newTyped(n, c, parseInt16)
	case kindInt32:
		return newTyped(n, c, parseInt32)
	case kindInt64:
		return newTyped(n, c, parseInt64)
	case kindFloat64:
		return newTyped(n, c, parseFloat64)
	case kindFloat32:
		return newTyped(n, c, parseFloat32)
	case kindDecimal:
		return newTyped(n, c, c.parseDecimal)
	case kindBool:
		return newTyped(n, c, parseBool)
	case kindDate:
		return newTyped(n, c, parseDateCH)
	case kindDateTime:
		return newTyped(n, c, parseDateTimeCH)
	case kindMicros:
		return newTyped(n, c, parseMicros)
	}
	return newTyped(n, c, parseString) // kindString, kindUUID
}

// newTyped builds a buffer with the parser colType.convert uses too, so a
// Block and Convert never disagree on a value.
func newTyped[T any](n int, c colType, parse func(string) (T, error)) *typedBuf[T] {
	zero, _ := c.zero().(T)
	return &typedBuf[T]{vals: make([]T, n), zero: zero, convert: parse}
}
