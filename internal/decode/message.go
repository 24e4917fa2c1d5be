package decode

import (
	"time"

	"github.com/tributary/tributary/internal/envelope"
)

// MessageType is the first byte of a pgoutput message.
type MessageType byte

// Message types of protocol version 1.
const (
	MsgBegin    MessageType = 'B'
	MsgCommit   MessageType = 'C'
	MsgOrigin   MessageType = 'O'
	MsgRelation MessageType = 'R'
	MsgType     MessageType = 'Y'
	MsgInsert   MessageType = 'I'
	MsgUpdate   MessageType = 'U'
	MsgDelete   MessageType = 'D'
	MsgTruncate MessageType = 'T'
	MsgLogical  MessageType = 'M'
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
	}
	return "message " + quoteByte(byte(t))
}

// Message is one decoded pgoutput message: one of *Begin, *Commit, *Origin,
// *Relation, *Type, *Insert, *Update, *Delete, *Truncate, *LogicalMessage.
type Message interface {
	Type() MessageType
}

// Begin starts a transaction.
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
// follows Begin).
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
	ID uint32
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
	RelationID uint32
	New        Tuple
}

// Update is a changed row. Old is nil when OldKind is OldNone.
type Update struct {
	RelationID uint32
	OldKind    OldKind
	Old        Tuple
	New        Tuple
}

// Delete is a removed row. OldKind is OldKey or OldFull.
type Delete struct {
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
	Options     TruncateOptions
	RelationIDs []uint32
}

// LogicalMessage is a message written by pg_logical_emit_message (sent when
// the "messages" option is on). Tributary uses them as heartbeats.
type LogicalMessage struct {
	// Transactional messages belong to the surrounding transaction; the
	// others are sent as soon as they are decoded, outside any transaction.
	Transactional bool
	LSN           envelope.LSN
	Prefix        string
	Content       []byte
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
