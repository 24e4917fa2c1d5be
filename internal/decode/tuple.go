package decode

import "strconv"

// ValueKind says how a tuple column is sent.
type ValueKind byte

// Tuple value kinds.
const (
	// ValueNull is SQL NULL.
	ValueNull ValueKind = 'n'
	// ValueUnchanged is a TOASTed value that the update did not change;
	// PostgreSQL does not send it. It is not NULL.
	ValueUnchanged ValueKind = 'u'
	// ValueText is a value in the type's text output format.
	ValueText ValueKind = 't'
	// ValueBinary is a value in the type's binary send format (only when
	// the subscriber asked for binary; Tributary does not).
	ValueBinary ValueKind = 'b'
)

// Value is one column of a Tuple.
type Value struct {
	Kind ValueKind
	// Data is the value's bytes for ValueText and ValueBinary (possibly
	// empty), nil otherwise. It aliases the parsed message.
	Data []byte
}

// Tuple is the row data of an Insert, Update or Delete, one Value per
// published column of the relation, in the Relation message's order.
type Tuple []Value

// tuple reads TupleData into dst (reusing its storage) and returns it.
// Layout: Int16 column count, then per column a kind byte and, for 't' and
// 'b', an Int32 length and that many bytes.
func (r *reader) tuple(dst Tuple) (Tuple, error) {
	start := r.off
	n, err := r.u16("column count")
	if err != nil {
		return dst[:0], err
	}
	// Every column takes at least its kind byte: a count larger than what
	// is left cannot be right, and must not size an allocation.
	if int(n) > len(r.buf)-r.off {
		return dst[:0], r.fail(start, "column count", -1, ErrTruncated,
			strconv.Itoa(int(n))+" columns, "+strconv.Itoa(len(r.buf)-r.off)+" bytes left")
	}
	if cap(dst) < int(n) {
		dst = make(Tuple, n)
	}
	dst = dst[:n]
	for i := range dst {
		kindOff := r.off
		kind, err := r.u8("value kind", i)
		if err != nil {
			return dst[:0], err
		}
		switch ValueKind(kind) {
		case ValueNull, ValueUnchanged:
			dst[i] = Value{Kind: ValueKind(kind)}
		case ValueText, ValueBinary:
			data, err := r.counted("value length", "value", i)
			if err != nil {
				return dst[:0], err
			}
			dst[i] = Value{Kind: ValueKind(kind), Data: data}
		default:
			return dst[:0], r.fail(kindOff, "value kind", i, ErrMalformed, "kind byte "+quoteByte(kind))
		}
	}
	return dst, nil
}
