package decode

import (
	"time"

	"github.com/tributary/tributary/internal/envelope"
)

// MessageType is the first byte of a pgoutput message.
type MessageType byte

// Message types of protocol versions 1 and 2.
const (
	MsgBegin        MessageType = 'B'
	MsgCommit       MessageType = 'C'
	MsgOrigin       MessageType = 'O'
	MsgRelation     MessageType = 'R'
	MsgType         MessageType = 'Y'
	MsgInsert       MessageType = 'I'
	MsgUpdate       MessageType = 'U'
	MsgDelete       MessageType = 'D'
	MsgTruncate     MessageType = 'T'
	MsgLogical      MessageType = 'M'
	MsgStreamStart  MessageType = 'S'
	MsgStreamStop   MessageType = 'E'
	MsgStreamCommit MessageType = 'c'
	MsgStreamAbort  MessageType = 'A'
)

// String names the type ("Insert"), or quotes an unknown byte.
func (t MessageType) String() string {
	switch t {
	case MsgBegin:
		return "Begin"
	case MsgCommit:
		return "Commit"
	case MsgOrigin:
		return "Origin"
	case MsgRelation:
		return "Relation"
	case MsgType:
		return "Type"
	case MsgInsert:
		return "Insert"
	case MsgUpdate:
		return "Update"
	case MsgDelete:
		return "Delete"
	case MsgTruncate:
		return "Truncate"
	case MsgLogical:
		return "Message"
	case MsgStreamStart:
		return "Stream Start"
	case MsgStreamStop:
		return "Stream Stop"
	case MsgStreamCommit:
		return "Stream Commit"
	case MsgStreamAbort:
		return "Stream Abort"
	}
	return "message " + quoteByte(byte(t))
}

// Message is one decoded pgoutput message: one of *Begin, *Commit, *Origin,
// *Relation, *Type, *Insert, *Update, *Delete, *Truncate, *LogicalMessage,
// *StreamStart, *StreamStop, *StreamCommit, *StreamAbort.
type Message interface {
	Type() MessageType
}

// Begin starts a transaction that is not streamed.
type Begin struct {
	// FinalLSN is the LSN of the transaction's commit record.
	FinalLSN   envelope.LSN
	CommitTime time.Time
	XID        uint32
}

// Commit ends the transaction of the last Begin. Its flags byte must be 0.
type Commit struct {
	// CommitLSN is the LSN of the commit record (Begin.FinalLSN).
	CommitLSN envelope.LSN
	// EndLSN is the LSN just past the commit record: the position to
	// confirm once everything of the transaction is durable downstream.
	EndLSN     envelope.LSN
	CommitTime time.Time
}

// Origin names the replication origin of the current transaction (it
// follows Begin, or Stream Start of a first segment).
type Origin struct {
	// CommitLSN is the commit LSN on the origin server.
	CommitLSN envelope.LSN
	Name      string
}

// ReplicaIdentity is a relation's REPLICA IDENTITY setting.
type ReplicaIdentity byte

// Replica identity settings (pg_class.relreplident).
const (
	IdentityDefault ReplicaIdentity = 'd' // primary key
	IdentityNothing ReplicaIdentity = 'n'
	IdentityFull    ReplicaIdentity = 'f' // the whole old row
	IdentityIndex   ReplicaIdentity = 'i' // a chosen unique index
)

// ColumnFlags are the flags of a RelationColumn.
type ColumnFlags uint8

// ColumnKey marks a column of the replica identity. With REPLICA IDENTITY
// FULL every column carries it.
const ColumnKey ColumnFlags = 1

// Relation describes a table: sent before the first change of the table in a
// session, after a schema change, and before a Truncate.
type Relation struct {
	// XID is the id of the (sub)transaction that sent it, inside a stream
	// block only (0 outside).
	XID uint32
	ID  uint32
	// Namespace is the schema; pgoutput sends "" for pg_catalog.
	Namespace       string
	Name            string
	ReplicaIdentity ReplicaIdentity
	Columns         []RelationColumn
}

// RelationColumn is one published column of a Relation.
type RelationColumn struct {
	Flags   ColumnFlags
	Name    string
	TypeOID uint32
	// TypeMod is atttypmod: -1, or the type-specific modifier (for example
	// varchar(40) is 44, numeric(12,2) is 786438).
	TypeMod int32
}

// Key reports whether the column belongs to the replica identity.
func (c RelationColumn) Key() bool { return c.Flags&ColumnKey != 0 }

// Type names a column type that is not built in (OID >= 10000). pgoutput
// sends it before the Relation that uses the type. For a domain it sends the
// domain's OID with the name of its base type ("" namespace and "varchar"
// for a domain over varchar); for an array of a user type, the array type's
// own name ("_mood").
type Type struct {
	// XID is the id of the (sub)transaction that sent it, inside a stream
	// block only (0 outside).
	XID uint32
	OID uint32
	// Namespace is the schema; "" for pg_catalog.
	Namespace string
	Name      string
}

// OldKind says what an Update's or Delete's old tuple holds.
type OldKind byte

// Old tuple kinds.
const (
	// OldNone: no old tuple (an Update that kept its replica identity key).
	OldNone OldKind = 0
	// OldKey: the replica identity columns; the other columns are NULL.
	OldKey OldKind = 'K'
	// OldFull: the whole old row (REPLICA IDENTITY FULL).
	OldFull OldKind = 'O'
)

// Insert is a new row.
type Insert struct {
	// XID, inside a stream block only (0 outside), is the id of the
	// (sub)transaction that made the change: a StreamAbort whose SubXID
	// equals it discards the change.
	XID        uint32
	RelationID uint32
	New        Tuple
}

// Update is a changed row. Old is nil when OldKind is OldNone.
type Update struct {
	// XID, inside a stream block only (0 outside), is the id of the
	// (sub)transaction that made the change: a StreamAbort whose SubXID
	// equals it discards the change.
	XID        uint32
	RelationID uint32
	OldKind    OldKind
	Old        Tuple
	New        Tuple
}

// Delete is a removed row. OldKind is OldKey or OldFull.
type Delete struct {
	// XID, inside a stream block only (0 outside), is the id of the
	// (sub)transaction that made the change: a StreamAbort whose SubXID
	// equals it discards the change.
	XID        uint32
	RelationID uint32
	OldKind    OldKind
	Old        Tuple
}

// TruncateOptions are the option bits of a Truncate.
type TruncateOptions uint8

// Truncate options.
const (
	TruncateCascade         TruncateOptions = 1
	TruncateRestartIdentity TruncateOptions = 2
)

// Truncate empties one or more relations (each described by a Relation
// message before it).
type Truncate struct {
	// XID is the id of the (sub)transaction that truncated, inside a
	// stream block only (0 outside).
	XID         uint32
	Options     TruncateOptions
	RelationIDs []uint32
}

// LogicalMessage is a message written by pg_logical_emit_message (sent when
// the "messages" option is on). Tributary uses them as heartbeats.
type LogicalMessage struct {
	// XID is the streamed transaction's id, inside a stream block only
	// (0 outside).
	XID uint32
	// Transactional messages belong to the surrounding transaction; the
	// others are sent as soon as they are decoded, outside any transaction.
	Transactional bool
	LSN           envelope.LSN
	Prefix        string
	Content       []byte
}

// StreamStart opens a block of changes of a large in-progress transaction
// (protocol version 2). Until the matching StreamStop, data messages carry
// the transaction's XID: pass inStream=true to Parse.
type StreamStart struct {
	XID uint32
	// FirstSegment is true for the transaction's first block.
	FirstSegment bool
}

// StreamStop closes the current stream block.
type StreamStop struct{}

// StreamCommit commits a streamed transaction. Its flags byte must be 0.
type StreamCommit struct {
	XID        uint32
	CommitLSN  envelope.LSN
	EndLSN     envelope.LSN
	CommitTime time.Time
}

// StreamAbort discards a streamed transaction (SubXID == XID) or one of its
// subtransactions (the changes streamed under SubXID).
type StreamAbort struct {
	XID    uint32
	SubXID uint32
}

// Type implements Message.
func (*Begin) Type() MessageType { return MsgBegin }

// Type implements Message.
func (*Commit) Type() MessageType { return MsgCommit }

// Type implements Message.
func (*Origin) Type() MessageType { return MsgOrigin }

// Type implements Message.
func (*Relation) Type() MessageType { return MsgRelation }

// Type implements Message.
func (*Type) Type() MessageType { return MsgType }

// Type implements Message.
func (*Insert) Type() MessageType { return MsgInsert }

// Type implements Message.
func (*Update) Type() MessageType { return MsgUpdate }

// Type implements Message.
func (*Delete) Type() MessageType { return MsgDelete }

// Type implements Message.
func (*Truncate) Type() MessageType { return MsgTruncate }

// Type implements Message.
func (*LogicalMessage) Type() MessageType { return MsgLogical }

// Type implements Message.
func (*StreamStart) Type() MessageType { return MsgStreamStart }

// Type implements Message.
func (*StreamStop) Type() MessageType { return MsgStreamStop }

// Type implements Message.
func (*StreamCommit) Type() MessageType { return MsgStreamCommit }

// Type implements Message.
func (*StreamAbort) Type() MessageType { return MsgStreamAbort }
