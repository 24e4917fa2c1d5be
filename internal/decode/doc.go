// Package decode parses PostgreSQL's pgoutput logical replication messages
// and turns row changes into change envelopes (package envelope).
//
// # Parsing
//
// Parser.Parse decodes the payload of one XLogData message. Every read is
// bounds-checked; a message that is short, carries a value the protocol
// does not allow, or has bytes after its end is refused with an *Error
// (message type, byte offset, field, column, and a sentinel: ErrTruncated,
// ErrUnknownMessage or ErrMalformed). Parse never panics and never guesses.
// The Parser reuses its storage, so parsing a Begin, Commit, Insert, Update
// or Delete allocates nothing; results are valid until the next Parse.
//
// Supported, protocol version 1 (proto_version '1', the one Tributary asks
// for):
//
//	'B' Begin          'C' Commit          'O' Origin
//	'R' Relation       'Y' Type            'M' Message (messages 'true')
//	'I' Insert         'U' Update ('K' or 'O' old tuple, then 'N')
//	'D' Delete ('K' or 'O')                'T' Truncate (CASCADE, RESTART IDENTITY)
//
// Tuple values may be NULL ('n'), unchanged TOAST ('u', not sent and not
// NULL), text ('t') or binary ('b'); all four are decoded.
//
// Refused, with the reason:
//
//   - Protocol version 2's streaming messages ('S', 'E', 'c', 'A'): the
//     reader asks for protocol 1 without streaming, and a large transaction
//     arrives whole after its commit (docs/design/reader.md, "Large
//     transactions", says why); ErrUnknownMessage says so.
//   - Protocol version 3's two-phase messages ('b', 'P', 'K', 'r', 'p'):
//     Tributary does not decode prepared transactions (two_phase off);
//     ErrUnknownMessage says so. Any other unknown type byte:
//     ErrUnknownMessage.
//   - Flag bits the protocol leaves at zero (Commit), column flags other
//     than the key bit, truncate options other than CASCADE and RESTART
//     IDENTITY, message flags other than transactional, unknown replica
//     identities and tuple markers: ErrMalformed. A future server that sets
//     them means something this package does not know.
//
// # Relations and types
//
// Relations caches Relation messages by relation id (a new one replaces the
// old) and Type messages by OID, and names column types as format_type
// does: TypeName knows the built-in types and their arrays, with modifiers
// ("numeric(12,2)", "character varying(40)", "timestamp(3) with time
// zone"). Other types are resolved by a TypeLookup the caller provides —
// the catalogue, which replaces a domain by its base type with the domain's
// modifier and marks enums — or, without one, named from their Type message
// ("public.mood"); otherwise the column fails with an *UnknownTypeError
// carrying the OID, so nothing is silently mislabelled.
//
// # Conversion
//
// Table.Change fills an envelope.Event from an Insert, Update or Delete:
// After (nil pointer for NULL), Before (the 'K' or 'O' old tuple), Unchanged
// (the 'u' columns, absent from After) and ID (the text of the configured id
// column). Binary values are refused (ErrBinaryValue): Tributary asks for
// text, so a binary value means a misconfigured subscription, and guessing
// each type's binary format would be a second, untested decoder. Text that
// is not UTF-8 is refused (ErrNotUTF8): the envelope is JSON, and
// encoding/json would replace the bytes without a word. A column count that
// differs from the Relation's is ErrColumnCount; an id that is NULL, empty,
// unsent or absent from a key tuple is ErrID.
//
// # Fixtures
//
// Besides hand-built messages, the tests replay testdata/pgoutput_v1.txt.gz:
// what a real PostgreSQL 15 sent with protocol 1 for
// testdata/capture/workload.sql (testdata/capture/main.go records it).
package decode
