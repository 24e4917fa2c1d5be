package decode

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/rowkey"
)

// ColumnError is a conversion error about a table, and about one of its
// columns when Column is not empty. Err wraps one of the package sentinels.
type ColumnError struct {
	Schema, Table, Column string
	Err                   error
}

// Error formats e as `decode "public"."items" column "id": ...`.
func (e *ColumnError) Error() string {
	s := "decode " + strconv.Quote(e.Schema) + "." + strconv.Quote(e.Table)
	if e.Column != "" {
		s += " column " + strconv.Quote(e.Column)
	}
	return s + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *ColumnError) Unwrap() error { return e.Err }

func (t *Table) fail(column string, err error) error {
	return &ColumnError{Schema: t.Schema, Table: t.Name, Column: column, Err: err}
}

// Change fills the row-change fields of ev from an *Insert, *Update or
// *Delete of this table: Kind, Schema, Table, Op, ID, Columns, After,
// Before and Unchanged. The caller sets the others (Shard, LSN, CommitLSN,
// Seq, XID, CommitTime). On error ev is left unchanged.
//
//   - ID is the key text (internal/rowkey) of the idColumns, in that
//     order: from the new row, or for a Delete from the old key; for one
//     column its text value. It is an error (ErrID) if the relation lacks
//     one of them, or a value is NULL or not sent, or the key text is
//     empty. An Update that changes the key carries the new key in ID and
//     the old values in Before.
//   - After maps every column of the new row to its text, nil for NULL,
//     except unchanged TOASTed columns: those are listed in Unchanged and
//     absent from After. After is nil for a Delete.
//   - Before is the old row when PostgreSQL sent one: all columns for
//     REPLICA IDENTITY FULL ('O'), only the replica identity columns for a
//     key ('K'). It is nil for an Update that kept its key under the
//     default identity.
//   - Columns is Table.EventColumns, shared by every event of the table.
//
// Refused: a tuple whose column count differs from the relation's
// (ErrColumnCount), binary values (ErrBinaryValue), text that is not UTF-8
// (ErrNotUTF8), unchanged TOAST values
// anywhere but an Update's new row (ErrUnchangedValue), a value for a
// non-key column in a key tuple (ErrMalformed), and columns whose type
// could not be named (Table.Err).
//
// Values are copied out of the message into one string per event, so ev
// stays valid after the Parser moves on.
func (t *Table) Change(m Message, idColumns []string, ev *envelope.Event) error {
	var (
		op      envelope.Op
		relID   uint32
		oldKind OldKind
		old     Tuple
		newRow  Tuple
	)
	switch m := m.(type) {
	case *Insert:
		op, relID, newRow = envelope.OpInsert, m.RelationID, m.New
	case *Update:
		op, relID, oldKind, old, newRow = envelope.OpUpdate, m.RelationID, m.OldKind, m.Old, m.New
	case *Delete:
		op, relID, oldKind, old = envelope.OpDelete, m.RelationID, m.OldKind, m.Old
	default:
		return fmt.Errorf("decode: %T is not a row change", m)
	}
	if relID != t.ID {
		return t.fail("", fmt.Errorf("%w: change of relation %d given to relation %d", ErrUnknownRelation, relID, t.ID))
	}
	if t.err != nil {
		return t.err
	}
	if len(idColumns) == 0 {
		return t.fail("", fmt.Errorf("%w: no id column configured", ErrID))
	}
	for _, c := range idColumns {
		if _, ok := t.index[c]; !ok {
			return t.fail(c, fmt.Errorf("%w: no such column", ErrID))
		}
	}

	// Check both tuples before building anything, and size the buffers.
	var size sizes
	if op != envelope.OpDelete {
		if err := t.check(newRow, OldNone, op == envelope.OpUpdate, &size); err != nil {
			return err
		}
	}
	if old != nil {
		if err := t.check(old, oldKind, false, &size); err != nil {
			return err
		}
	}
	idRow, idKind := newRow, OldNone
	if op == envelope.OpDelete {
		idRow, idKind = old, oldKind
		if old == nil {
			return t.fail(idColumns[0], fmt.Errorf("%w: delete without old tuple", ErrMalformed))
		}
	}
	for _, c := range idColumns {
		idx := t.index[c]
		if idKind == OldKey && !t.Columns[idx].Key() {
			return t.fail(c, fmt.Errorf("%w: not a replica identity column, so deletes do not carry it", ErrID))
		}
		switch idRow[idx].Kind {
		case ValueNull:
			return t.fail(c, fmt.Errorf("%w: id is NULL", ErrID))
		case ValueUnchanged:
			return t.fail(c, fmt.Errorf("%w: id not sent (unchanged TOAST)", ErrID))
		}
	}
	if len(idColumns) == 1 && len(idRow[t.index[idColumns[0]]].Data) == 0 {
		// The envelope uses ID as the Kafka key and refuses an empty one.
		return t.fail(idColumns[0], fmt.Errorf("%w: id is the empty string", ErrID))
	}

	// One string holds every value of the event; values are substrings of
	// it, and their pointers point into one []string.
	var sb strings.Builder
	sb.Grow(size.bytes)
	if op != envelope.OpDelete {
		writeValues(&sb, newRow)
	}
	if old != nil {
		writeValues(&sb, old)
	}
	all := sb.String()
	vals := make([]string, size.values)
	var after, before map[string]*string
	var unchanged []string
	off, k := 0, 0
	if op != envelope.OpDelete {
		after = make(map[string]*string, len(newRow)-size.unchanged)
		if size.unchanged > 0 {
			unchanged = make([]string, 0, size.unchanged)
		}
		for i, v := range newRow {
			name := t.Columns[i].Name
			switch v.Kind {
			case ValueNull:
				after[name] = nil
			case ValueUnchanged:
				unchanged = append(unchanged, name)
			default:
				vals[k] = all[off : off+len(v.Data)]
				off += len(v.Data)
				after[name] = &vals[k]
				k++
			}
		}
	}
	if old != nil {
		before = make(map[string]*string, len(old))
		for i, v := range old {
			if oldKind == OldKey && !t.Columns[i].Key() {
				continue
			}
			name := t.Columns[i].Name
			if v.Kind == ValueNull {
				before[name] = nil
				continue
			}
			vals[k] = all[off : off+len(v.Data)]
			off += len(v.Data)
			before[name] = &vals[k]
			k++
		}
	}
	id := after
	if op == envelope.OpDelete {
		id = before
	}

	ev.Kind = envelope.KindChange
	ev.Schema = t.Schema
	ev.Table = t.Name
	ev.Op = op
	if len(idColumns) == 1 {
		ev.ID = *id[idColumns[0]]
	} else {
		// Several columns: never empty (at least one comma).
		ev.ID, _ = rowkey.Of(idColumns, id)
	}
	ev.Columns = t.EventColumns
	ev.After = after
	ev.Before = before
	ev.Unchanged = unchanged
	return nil
}

// sizes counts what Change allocates.
type sizes struct {
	bytes     int // total length of the text values
	values    int // number of text values
	unchanged int // unchanged TOAST values of the new row
}

// check validates one tuple against the relation and adds up its sizes.
// unchangedOK is true only for an Update's new row.
func (t *Table) check(tup Tuple, kind OldKind, unchangedOK bool, s *sizes) error {
	if len(tup) != len(t.Columns) {
		return t.fail("", fmt.Errorf("%w: tuple has %d columns, relation %d", ErrColumnCount, len(tup), len(t.Columns)))
	}
	for i, v := range tup {
		switch v.Kind {
		case ValueNull:
			continue
		case ValueUnchanged:
			if !unchangedOK {
				return t.fail(t.Columns[i].Name, ErrUnchangedValue)
			}
			s.unchanged++
			continue
		case ValueBinary:
			return t.fail(t.Columns[i].Name, ErrBinaryValue)
		case ValueText:
			if !utf8.Valid(v.Data) {
				return t.fail(t.Columns[i].Name, ErrNotUTF8)
			}
		default:
			return t.fail(t.Columns[i].Name, fmt.Errorf("%w: value kind %s", ErrMalformed, quoteByte(byte(v.Kind))))
		}
		if kind == OldKey && !t.Columns[i].Key() {
			return t.fail(t.Columns[i].Name, fmt.Errorf("%w: non-key column has a value in a key tuple", ErrMalformed))
		}
		s.bytes += len(v.Data)
		s.values++
	}
	return nil
}

// writeValues appends the text values of tup in column order. Change reads
// them back in the same order.
func writeValues(sb *strings.Builder, tup Tuple) {
	for _, v := range tup {
		if v.Kind == ValueText {
			sb.Write(v.Data)
		}
	}
}
