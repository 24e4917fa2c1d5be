package decode

import (
	"errors"
	"strconv"
	"strings"
)

// Sentinels for errors.Is. Wire errors are *Error values that unwrap to one
// of the first three; conversion errors wrap the others with the table and
// column they concern.
var (
	// ErrTruncated: the message ended before a field was complete.
	ErrTruncated = errors.New("message truncated")
	// ErrUnknownMessage: the first byte is not a message type of protocol
	// version 1 (this includes the streaming messages of version 2 and the
	// two-phase messages of version 3).
	ErrUnknownMessage = errors.New("unknown message type")
	// ErrMalformed: a field holds a value the protocol does not allow (an
	// unknown tuple value kind, flag bits, a negative length, bytes after the
	// end of the message, ...).
	ErrMalformed = errors.New("malformed message")

	// ErrUnknownRelation: a change names a relation id that no Relation
	// message has described in this session.
	ErrUnknownRelation = errors.New("unknown relation")
	// ErrColumnCount: a tuple's column count differs from its relation's.
	ErrColumnCount = errors.New("tuple column count differs from relation")
	// ErrBinaryValue: a tuple carries a binary ('b') value. Tributary asks
	// for text values; binary ones are refused rather than guessed at.
	ErrBinaryValue = errors.New("binary tuple value not supported")
	// ErrUnchangedValue: an unchanged-TOAST ('u') value where PostgreSQL
	// never sends one (an insert, an old tuple) or where a value is needed.
	ErrUnchangedValue = errors.New("unexpected unchanged TOAST value")
	// ErrNotUTF8: a value or name is not valid UTF-8. The envelope is JSON,
	// which would silently replace the bad bytes; sources must use the UTF8
	// server encoding.
	ErrNotUTF8 = errors.New("not valid UTF-8")
	// ErrID: the id column is missing from the relation, NULL, or not sent.
	ErrID = errors.New("no usable id value")
	// ErrUnknownType: a column's type could not be named; see
	// UnknownTypeError.
	ErrUnknownType = errors.New("unknown column type")
)

// Error is a wire decoding error. It says which message, where, and what was
// being read; Err is ErrTruncated, ErrUnknownMessage or ErrMalformed.
type Error struct {
	// Type is the message type byte (0 for an empty message).
	Type MessageType
	// Offset is the byte offset in the message at which the failing field
	// starts (the type byte is offset 0).
	Offset int
	// Field names what was being read, e.g. "relation id", "value length".
	Field string
	// Column is the 0-based tuple or relation column being read, or -1.
	Column int
	// Detail adds specifics (a bad byte, a count), or is empty.
	Detail string
	Err    error
}

// Error formats e as "pgoutput Insert: offset 9: column 2 value length:
// message truncated".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("pgoutput ")
	b.WriteString(e.Type.String())
	b.WriteString(": offset ")
	b.WriteString(strconv.Itoa(e.Offset))
	b.WriteString(": ")
	if e.Column >= 0 {
		b.WriteString("column ")
		b.WriteString(strconv.Itoa(e.Column))
		b.WriteByte(' ')
	}
	b.WriteString(e.Field)
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	if e.Detail != "" {
		b.WriteString(" (")
		b.WriteString(e.Detail)
		b.WriteByte(')')
	}
	return b.String()
}

// Unwrap returns the sentinel.
func (e *Error) Unwrap() error { return e.Err }

// UnknownTypeError says which column type could not be named: not a
// built-in type of TypeName, no usable Type message, and no TypeLookup (or
// the lookup failed, see Err). Namespace and Name are those of the Type
// message when one arrived.
type UnknownTypeError struct {
	OID       uint32
	TypeMod   int32
	Namespace string
	Name      string
	// Err is the TypeLookup's error, or nil.
	Err error
}

// Error formats the OID, modifier and what is known of the type.
func (e *UnknownTypeError) Error() string {
	s := "unknown column type oid " + strconv.FormatUint(uint64(e.OID), 10) +
		" typmod " + strconv.FormatInt(int64(e.TypeMod), 10)
	if e.Name != "" {
		s += " (Type message: " + strconv.Quote(e.Namespace) + "." + strconv.Quote(e.Name) + ")"
	}
	if e.Err != nil {
		s += ": lookup: " + e.Err.Error()
	}
	return s
}

// Is makes errors.Is(err, ErrUnknownType) true.
func (e *UnknownTypeError) Is(target error) bool { return target == ErrUnknownType }

// Unwrap returns the lookup's error, if any.
func (e *UnknownTypeError) Unwrap() error { return e.Err }
