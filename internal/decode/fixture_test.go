package decode

import (
	"encoding/binary"
	"reflect"
	"time"
)

// wire builds pgoutput messages byte by byte, the way the server writes
// them (src/backend/replication/logical/proto.c).
type wire struct{ b []byte }

func msg(t MessageType) *wire { return &wire{b: []byte{byte(t)}} }

func (w *wire) u8(v byte) *wire     { w.b = append(w.b, v); return w }
func (w *wire) u16(v uint16) *wire  { w.b = binary.BigEndian.AppendUint16(w.b, v); return w }
func (w *wire) u32(v uint32) *wire  { w.b = binary.BigEndian.AppendUint32(w.b, v); return w }
func (w *wire) i32(v int32) *wire   { return w.u32(uint32(v)) }
func (w *wire) u64(v uint64) *wire  { w.b = binary.BigEndian.AppendUint64(w.b, v); return w }
func (w *wire) raw(b ...byte) *wire { w.b = append(w.b, b...); return w }
func (w *wire) str(s string) *wire  { w.b = append(append(w.b, s...), 0); return w }

// ts writes a timestamp: microseconds since 2000-01-01 UTC.
func (w *wire) ts(t time.Time) *wire {
	us := (t.Unix()-pgEpochUnix)*1e6 + int64(t.Nanosecond()/1e3)
	return w.u64(uint64(us))
}

// tuple writes TupleData.
func (w *wire) tuple(t Tuple) *wire {
	w.u16(uint16(len(t)))
	for _, v := range t {
		w.u8(byte(v.Kind))
		if v.Kind == ValueText || v.Kind == ValueBinary {
			w.u32(uint32(len(v.Data)))
			w.raw(v.Data...)
		}
	}
	return w
}

// Tuple value shorthands.
func txt(s string) Value  { return Value{Kind: ValueText, Data: []byte(s)} }
func bin(b ...byte) Value { return Value{Kind: ValueBinary, Data: b} }

var (
	null = Value{Kind: ValueNull}
	unch = Value{Kind: ValueUnchanged}
)

func tup(v ...Value) Tuple { return Tuple(v) }

// encode writes m as the server would. For every m that Parse returns,
// encode(m) gives back the parsed bytes: the fuzz targets and the captured
// stream test check that.
func encode(m Message) []byte {
	w := msg(m.Type())
	switch m := m.(type) {
	case *Begin:
		w.u64(uint64(m.FinalLSN)).ts(m.CommitTime).u32(m.XID)
	case *Commit:
		w.u8(0).u64(uint64(m.CommitLSN)).u64(uint64(m.EndLSN)).ts(m.CommitTime)
	case *Origin:
		w.u64(uint64(m.CommitLSN)).str(m.Name)
	case *Relation:
		w.u32(m.ID).str(m.Namespace).str(m.Name).u8(byte(m.ReplicaIdentity))
		w.u16(uint16(len(m.Columns)))
		for _, c := range m.Columns {
			w.u8(byte(c.Flags)).str(c.Name).u32(c.TypeOID).i32(c.TypeMod)
		}
	case *Type:
		w.u32(m.OID).str(m.Namespace).str(m.Name)
	case *Insert:
		w.u32(m.RelationID).u8('N').tuple(m.New)
	case *Update:
		w.u32(m.RelationID)
		if m.OldKind != OldNone {
			w.u8(byte(m.OldKind)).tuple(m.Old)
		}
		w.u8('N').tuple(m.New)
	case *Delete:
		w.u32(m.RelationID).u8(byte(m.OldKind)).tuple(m.Old)
	case *Truncate:
		w.u32(uint32(len(m.RelationIDs))).u8(byte(m.Options))
		for _, id := range m.RelationIDs {
			w.u32(id)
		}
	case *LogicalMessage:
		var f byte
		if m.Transactional {
			f = 1
		}
		w.u8(f).u64(uint64(m.LSN)).str(m.Prefix).u32(uint32(len(m.Content))).raw(m.Content...)
	default:
		panic("encode: unknown message")
	}
	return w.b
}

// equalMessage compares messages, treating nil and empty slices alike: a
// reused Parser returns empty slices where a fresh one returns nil.
func equalMessage(a, b Message) bool {
	return reflect.DeepEqual(normalize(a), normalize(b))
}

func normalize(m Message) Message {
	tuple := func(t Tuple) Tuple {
		if len(t) == 0 {
			return nil
		}
		out := make(Tuple, len(t))
		for i, v := range t {
			if len(v.Data) == 0 {
				v.Data = nil
			}
			out[i] = v
		}
		return out
	}
	switch m := m.(type) {
	case *Relation:
		c := *m
		if len(c.Columns) == 0 {
			c.Columns = nil
		}
		return &c
	case *Insert:
		c := *m
		c.New = tuple(c.New)
		return &c
	case *Update:
		c := *m
		c.Old, c.New = tuple(c.Old), tuple(c.New)
		return &c
	case *Delete:
		c := *m
		c.Old = tuple(c.Old)
		return &c
	case *Truncate:
		c := *m
		if len(c.RelationIDs) == 0 {
			c.RelationIDs = nil
		}
		return &c
	case *LogicalMessage:
		c := *m
		if len(c.Content) == 0 {
			c.Content = nil
		}
		return &c
	}
	return m
}
