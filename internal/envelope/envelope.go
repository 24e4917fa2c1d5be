// Package envelope defines Tributary's change envelope: the record the
// cdc-reader writes to Kafka and the loader reads back. It is the contract
// between the two and with any third-party consumer, so it is versioned and
// documented in schema/envelope.md; a change to a field's meaning needs a new
// Version.
//
// Encoding is JSON, one envelope per Kafka record, keyed by the global id
// (see Key). JSON was chosen so that kcat and jq can read a topic; numbers
// that must stay exact (LSNs, numeric columns, bigint ids) travel as strings.
package envelope

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Version is the newest envelope format version this build reads and
// writes. Readers refuse versions they do not know. Version 2 adds Epoch and
// the snapshot-end op; version 3 the truncate of one partition (Partition);
// version 4 a resnapshot's delete (a delete with LSN 0, see IsCopyDelete).
// A record without them is still written with the lowest version it needs,
// so older consumers keep reading everything they can read correctly (a
// version-2 consumer must not read a partition's truncate as the table's).
const Version = 4

// MaxLSN is the largest LSN a change can carry: a row's version is
// Epoch<<48 | LSN (see RowVersion). 2^48 bytes is 256 TiB of WAL.
const MaxLSN LSN = 1<<48 - 1

// version is the format version e needs.
func (e *Event) version() int {
	if e.IsCopyDelete() {
		return 4
	}
	if e.Partition != nil {
		return 3
	}
	if e.Epoch > 0 || e.Op == OpSnapshotEnd {
		return 2
	}
	return 1
}

// RowVersion is the version a change gives its row in the store: the
// snapshot epoch in the top 16 bits, the change's LSN below (Validate keeps
// the LSN within MaxLSN). A new epoch — the tables copied again after the
// slot lost changes — therefore beats every row written before it, while
// within an epoch the LSN orders changes, and a snapshot read (LSN 0) loses
// to every streamed change of its epoch. For a snapshot end it is the
// epoch's lowest version: the cut below which rows were not copied again.
func (e *Event) RowVersion() uint64 {
	return uint64(e.Epoch)<<48 | uint64(e.LSN)
}

// IsCopyDelete tells a resnapshot's delete: a row the store holds from
// before the resnapshot's epoch that the shard no longer has. It carries
// the epoch and LSN 0, so its version is the epoch's lowest, like the
// copied rows' (RowVersion): every change streamed in the epoch beats it.
func (e *Event) IsCopyDelete() bool {
	return e.Kind == KindChange && e.Op == OpDelete && e.LSN == 0 && e.Epoch > 0
}

// Kind tells a change from a control record.
type Kind string

const (
	// KindChange is a row change (or a truncate) of one table.
	KindChange Kind = "change"
	// KindWatermark says: every change of Shard committed at or before
	// CommitLSN has been acknowledged by Kafka in every partition it went to
	// before this record. The reader writes one into every partition of every
	// table topic; see DESIGN.md "Freshness watermarks".
	KindWatermark Kind = "watermark"
)

// Op is the operation of a change.
type Op string

const (
	OpRead     Op = "r" // a row copied by the initial snapshot
	OpInsert   Op = "c"
	OpUpdate   Op = "u"
	OpDelete   Op = "d"
	OpTruncate Op = "t" // the whole table on this shard; ID is empty
	// OpSnapshotEnd closes a snapshot taken again (Epoch > 0): every row of
	// this table and shard with a version of an earlier epoch was not copied
	// again, so it no longer exists at the source. Like a truncate, one is
	// sent to every partition (Partitions set); ID and LSN are empty.
	OpSnapshotEnd Op = "s"
)

// Column describes one column of the source relation, as PostgreSQL's
// Relation message and catalog report it.
type Column struct {
	Name string `json:"name"`
	// Type is the PostgreSQL type name with its modifier, as format_type()
	// prints it: "bigint", "numeric(12,2)", "timestamp with time zone", "text[]".
	Type string `json:"type"`
	// OID is the type's object id; stable for built-in types.
	OID uint32 `json:"oid"`
	// Key marks the columns of the replica identity (usually the primary key).
	Key bool `json:"key,omitempty"`
	// Enum marks a column of an enum type (after domains are resolved to
	// their base type): its values are the labels, as text. Optional: a
	// consumer that ignores it sees a user type named by Type.
	Enum bool `json:"enum,omitempty"`
	// Missing, when set, is the value (PostgreSQL text) this column has in
	// rows last written before it was added: ADD COLUMN ... DEFAULT with a
	// non-volatile default fills old rows without writing WAL (PostgreSQL's
	// attmissingval), so no change of such a row carries it. A store keeps
	// it as the column's default for rows whose change has no such column.
	// Absent when the column has no such value (added without a default,
	// or the table was rewritten since). Optional: a consumer that ignores
	// it reads every other field correctly.
	Missing *string `json:"missing,omitempty"`
}

// Event is one envelope. Field names are short but spelled out; see
// schema/envelope.md for the full description and examples.
type Event struct {
	V    int  `json:"v"`
	Kind Kind `json:"kind"`

	// Shard is the source shard number (0-based), set on every record.
	Shard int `json:"shard"`

	// Change fields.
	Schema string `json:"schema,omitempty"`
	Table  string `json:"table,omitempty"`
	Op     Op     `json:"op,omitempty"`
	// ID is the row's global id as text (decimal for integers, canonical
	// form for uuids). It is also the Kafka record key.
	ID string `json:"id,omitempty"`
	// LSN is the WAL position of this change's own record. For one row
	// (table, id, shard) it increases strictly in commit order, because a
	// later writer of a row waits for the earlier one's commit; it is the
	// row's version. Snapshot reads carry LSN 0: every streamed change wins.
	LSN LSN `json:"lsn"`
	// CommitLSN is the commit record's position of the transaction, and for
	// watermarks the position up to which the shard is complete.
	CommitLSN LSN `json:"commit_lsn"`
	// Seq is the position of the change within its transaction (0-based).
	Seq uint32 `json:"seq,omitempty"`
	// XID is the source transaction id (0 for snapshot reads).
	XID uint32 `json:"xid,omitempty"`
	// CommitTime is the source commit timestamp (for watermarks: of CommitLSN,
	// or the reader's clock for keepalive-driven advances).
	CommitTime time.Time `json:"commit_ts"`

	Columns []Column `json:"columns,omitempty"`
	// After is the new row image (insert, update, snapshot read). A value is
	// the PostgreSQL text representation; JSON null is SQL NULL.
	After map[string]*string `json:"after,omitempty"`
	// Before is the old row image where PostgreSQL sent one (replica
	// identity key or full); for deletes it holds at least the key.
	Before map[string]*string `json:"before,omitempty"`
	// Partitions is set on watermarks and truncates: the number of
	// partitions of the topic when the reader wrote one record into each.
	Partitions int32 `json:"partitions,omitempty"`

	// Epoch counts the snapshots of this shard's slot: 0 for the first, one
	// more each time the slot lost changes and the tables were copied
	// again. Omitted when 0 (version 1 records). See RowVersion.
	Epoch uint16 `json:"epoch,omitempty"`

	// Partition, on a truncate, narrows it to the rows of one partition of
	// a partitioned table (see PartitionScope). Version 3.
	Partition *PartitionScope `json:"partition,omitempty"`

	// Unchanged lists TOASTed columns whose value did not change and was not
	// sent (pgoutput 'u'). They are absent from After; the consumer keeps
	// the previous value. Never read them as NULL.
	Unchanged []string `json:"unchanged,omitempty"`
}

// ErrUnsupportedVersion is returned by Decode for envelopes newer than this
// build understands.
var ErrUnsupportedVersion = errors.New("unsupported envelope version")

// Encode marshals e as JSON, stamping the format version it needs.
func Encode(e *Event) ([]byte, error) {
	e.V = e.version()
	return json.Marshal(e)
}

// Decode parses and validates one envelope.
func Decode(b []byte) (*Event, error) {
	var e Event
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("decode envelope: %w", err)
	}
	if e.V < 1 || e.V > Version {
		return nil, fmt.Errorf("%w: %d (this build reads 1 to %d)", ErrUnsupportedVersion, e.V, Version)
	}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return &e, nil
}

// Validate checks the fields a consumer relies on.
func (e *Event) Validate() error {
	if e.Shard < 0 {
		return fmt.Errorf("envelope: negative shard %d", e.Shard)
	}
	switch e.Kind {
	case KindWatermark:
		if e.CommitLSN == 0 {
			return errors.New("envelope: watermark without commit_lsn")
		}
		return nil
	case KindChange:
	default:
		return fmt.Errorf("envelope: unknown kind %q", e.Kind)
	}
	if e.Table == "" {
		return errors.New("envelope: change without table")
	}
	if e.Partition != nil && e.Op != OpTruncate {
		return fmt.Errorf("envelope: %s with a partition scope (only a truncate has one)", e.Op)
	}
	switch e.Op {
	case OpRead, OpInsert, OpUpdate:
		if e.ID == "" {
			return fmt.Errorf("envelope: %s without id", e.Op)
		}
		if len(e.After) == 0 { // an image has at least the id column; an empty one would not survive a round trip
			return fmt.Errorf("envelope: %s without after image", e.Op)
		}
	case OpDelete:
		if e.ID == "" {
			return errors.New("envelope: delete without id")
		}
	case OpTruncate:
	case OpSnapshotEnd:
		if e.Partition != nil {
			return errors.New("envelope: snapshot end with a partition scope")
		}
		if e.Epoch == 0 || e.Partitions <= 0 {
			return errors.New("envelope: snapshot end without epoch or partitions")
		}
	default:
		return fmt.Errorf("envelope: unknown op %q", e.Op)
	}
	switch {
	case e.Op == OpSnapshotEnd:
		if e.LSN != 0 {
			return errors.New("envelope: snapshot end with an lsn")
		}
	case e.Op != OpRead && e.LSN == 0 && !e.IsCopyDelete():
		return fmt.Errorf("envelope: %s without lsn (only a delete of a resnapshot, epoch > 0, has none)", e.Op)
	case e.LSN > MaxLSN:
		return fmt.Errorf("envelope: lsn %s beyond %s, the largest a row version holds", e.LSN, MaxLSN)
	}
	return nil
}

// LSN is a PostgreSQL WAL position. In JSON it is the familiar "16/B374D848"
// text form, so that it stays exact for every consumer (JavaScript numbers
// are not 64-bit).
type LSN uint64

// String formats the LSN as PostgreSQL does ("16/B374D848").
func (l LSN) String() string {
	return strings.ToUpper(strconv.FormatUint(uint64(l)>>32, 16) + "/" + strconv.FormatUint(uint64(l)&0xFFFFFFFF, 16))
}

// MarshalJSON implements json.Marshaler.
func (l LSN) MarshalJSON() ([]byte, error) {
	return []byte(`"` + l.String() + `"`), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (l *LSN) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("lsn: %w", err)
	}
	v, err := ParseLSN(s)
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// ErrBadLSN is returned for text that is not an LSN.
var ErrBadLSN = errors.New("not an LSN (want hex X/Y, e.g. 0/3000148)")

// ParseLSN parses "X/Y" hexadecimal LSN text (either case). It is kept
// free of PostgreSQL libraries so that the api binary stays free of them.
func ParseLSN(s string) (LSN, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok || hi == "" || lo == "" || len(hi) > 8 || len(lo) > 8 {
		return 0, fmt.Errorf("lsn %q: %w", s, ErrBadLSN)
	}
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("lsn %q: %w", s, ErrBadLSN)
	}
	return LSN(h<<32 | l), nil
}
