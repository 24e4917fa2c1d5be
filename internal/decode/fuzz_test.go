package decode

import (
	"bytes"
	"errors"
	"strconv"
	"testing"

	"github.com/tributary/tributary/internal/envelope"
)

// FuzzParse: Parse never panics; an error is a well-formed *Error; a
// message re-encodes to exactly the input (nothing dropped or invented);
// and a row change converts to a valid envelope or fails cleanly.
// Seeds: the valid fixtures here plus testdata/fuzz/FuzzParse (real
// server messages; the protocol 2 streaming ones among them must be
// refused cleanly).
func FuzzParse(f *testing.F) {
	for _, tc := range validCases() {
		f.Add(encode(tc.want))
	}
	var p Parser
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := p.Parse(data)
		if err != nil {
			var de *Error
			if m != nil || !errors.As(err, &de) {
				t.Fatalf("Parse = %v, %T %v", m, err, err)
			}
			if !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnknownMessage) {
				t.Fatalf("error without sentinel: %v", err)
			}
			if de.Offset < 0 || de.Offset > len(data) {
				t.Fatalf("offset %d outside %d-byte message: %v", de.Offset, len(data), err)
			}
			_ = err.Error()
			return
		}
		if enc := encode(m); !bytes.Equal(enc, data) {
			t.Fatalf("Parse(%x) = %#v re-encodes to %x", data, m, enc)
		}
		checkChange(t, m)
	})
}

// checkChange converts a parsed row change against a table that fits it
// (text columns c0..cN, c0 the key and the id) and checks the event.
func checkChange(t *testing.T, m Message) {
	var relID uint32
	var newRow, old Tuple
	switch m := m.(type) {
	case *Insert:
		relID, newRow = m.RelationID, m.New
	case *Update:
		relID, newRow, old = m.RelationID, m.New, m.Old
	case *Delete:
		relID, old = m.RelationID, m.Old
	default:
		return
	}
	width := len(newRow)
	if width == 0 {
		width = len(old)
	}
	rel := &Relation{ID: relID, Namespace: "s", Name: "t", ReplicaIdentity: IdentityDefault}
	for i := range width {
		c := RelationColumn{Name: "c" + strconv.Itoa(i), TypeOID: 25, TypeMod: -1}
		if i == 0 {
			c.Flags = ColumnKey
		}
		rel.Columns = append(rel.Columns, c)
	}
	tbl := NewRelations(nil).Put(rel)
	var ev envelope.Event
	if err := tbl.Change(m, []string{"c0"}, &ev); err != nil {
		if width > 0 && errors.Is(err, ErrUnknownRelation) {
			t.Fatalf("Change: %v", err)
		}
		return
	}
	ev.LSN = 1
	if err := ev.Validate(); err != nil {
		t.Fatalf("Change made an invalid event: %v", err)
	}
	for i, v := range newRow {
		name := rel.Columns[i].Name
		got, inAfter := ev.After[name]
		switch v.Kind {
		case ValueNull:
			if !inAfter || got != nil {
				t.Fatalf("NULL %s: %v %v", name, inAfter, got)
			}
		case ValueUnchanged:
			if inAfter {
				t.Fatalf("unchanged %s in After", name)
			}
		case ValueText:
			if !inAfter || got == nil || *got != string(v.Data) {
				t.Fatalf("text %s: %v %v", name, inAfter, got)
			}
		}
	}
	if len(ev.After)+len(ev.Unchanged) != len(newRow) {
		t.Fatalf("After %d + Unchanged %d != %d columns", len(ev.After), len(ev.Unchanged), len(newRow))
	}
}

// FuzzTuple: the tuple decoder never panics or reads past its input, and
// what it accepts re-encodes to the bytes it consumed, also when it reuses
// storage from an earlier, wider tuple.
func FuzzTuple(f *testing.F) {
	f.Add((&wire{}).tuple(tup(txt("1"), null, unch, bin(0, 1), txt(""))).b)
	f.Add((&wire{}).tuple(tup()).b)
	f.Add([]byte{0, 2, 't', 0, 0, 0, 1})
	f.Add([]byte{0xff, 0xff, 'n'})
	wide := make(Tuple, 0, 64)
	for range 64 {
		wide = append(wide, txt("wide"))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		data = bytes.Clone(data) // no spare capacity to read into
		r := reader{buf: data, typ: MsgInsert}
		got, err := r.tuple(nil)
		r2 := reader{buf: data, typ: MsgInsert}
		got2, err2 := r2.tuple(wide[:64:64])
		if (err == nil) != (err2 == nil) || r.off != r2.off {
			t.Fatalf("fresh and reused storage disagree: %v / %v", err, err2)
		}
		if err != nil {
			var de *Error
			if !errors.As(err, &de) || de.Offset < 0 || de.Offset > len(data) {
				t.Fatalf("tuple error %v", err)
			}
			if len(got) != 0 {
				t.Fatalf("tuple returned %d values with an error", len(got))
			}
			return
		}
		if r.off > len(data) {
			t.Fatalf("consumed %d of %d bytes", r.off, len(data))
		}
		enc := (&wire{}).tuple(got).b
		if !bytes.Equal(enc, data[:r.off]) || !bytes.Equal((&wire{}).tuple(got2).b, enc) {
			t.Fatalf("tuple(%x) = %v re-encodes to %x", data[:r.off], got, enc)
		}
	})
}
