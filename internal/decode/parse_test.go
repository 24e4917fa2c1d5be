package decode

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

var commitTime = time.Date(2026, 11, 30, 12, 34, 56, 789012000, time.UTC)

// validCase is a well-formed message and what Parse must return for it.
type validCase struct {
	name string
	want Message
}

func validCases() []validCase {
	itemsRel := &Relation{ID: 16401, Namespace: "public", Name: "items", ReplicaIdentity: IdentityDefault,
		Columns: []RelationColumn{
			{Flags: ColumnKey, Name: "id", TypeOID: 20, TypeMod: -1},
			{Name: "amount", TypeOID: 1700, TypeMod: 786438},
			{Name: "name", TypeOID: 1043, TypeMod: 44},
		}}
	return []validCase{
		{"begin", &Begin{FinalLSN: 0x16_B374D848, CommitTime: commitTime, XID: 745}},
		{"begin before 2000", &Begin{FinalLSN: 1, CommitTime: time.Date(1999, 12, 31, 23, 59, 59, 999999000, time.UTC), XID: 1}},
		{"commit", &Commit{CommitLSN: 0x16_B374D848, EndLSN: 0x16_B374D878, CommitTime: commitTime}},
		{"origin", &Origin{CommitLSN: 0x1_00ABCDEF, Name: "upstream"}},
		{"relation", itemsRel},
		{"relation pg_catalog no columns", &Relation{ID: 1, Namespace: "", Name: "t", ReplicaIdentity: IdentityNothing, Columns: []RelationColumn{}}},
		{"relation full", &Relation{ID: 2, Namespace: "s", Name: "Ünï", ReplicaIdentity: IdentityFull,
			Columns: []RelationColumn{{Flags: ColumnKey, Name: "a", TypeOID: 25, TypeMod: -1}, {Flags: ColumnKey, Name: "b b", TypeOID: 16385, TypeMod: 7}}}},
		{"relation index identity", &Relation{ID: 3, Namespace: "s", Name: "t", ReplicaIdentity: IdentityIndex, Columns: []RelationColumn{{Name: "x", TypeOID: 23, TypeMod: -1}}}},
		{"type", &Type{OID: 16390, Namespace: "public", Name: "mood"}},
		{"insert", &Insert{RelationID: 16401, New: tup(txt("1"), txt("1234.50"), txt("Zoë – naïve ☃"))}},
		{"insert nulls and empty", &Insert{RelationID: 16401, New: tup(txt("2"), null, txt(""))}},
		{"insert embedded NUL", &Insert{RelationID: 1, New: tup(txt("a\x00b\x00"), txt("\xff\xfe not utf-8"))}},
		{"insert binary", &Insert{RelationID: 1, New: tup(bin(0, 0, 0, 1), bin())}},
		{"insert zero columns", &Insert{RelationID: 1, New: tup()}},
		{"update no old", &Update{RelationID: 16401, New: tup(txt("1"), txt("1.00"), unch)}},
		{"update key", &Update{RelationID: 16401, OldKind: OldKey, Old: tup(txt("2"), null, null), New: tup(txt("10"), null, null)}},
		{"update full", &Update{RelationID: 5, OldKind: OldFull, Old: tup(txt("1"), txt("one")), New: tup(txt("1"), txt("uno"))}},
		{"delete key", &Delete{RelationID: 16401, OldKind: OldKey, Old: tup(txt("10"), null, null)}},
		{"delete full", &Delete{RelationID: 5, OldKind: OldFull, Old: tup(txt("2"), null)}},
		{"truncate", &Truncate{Options: 0, RelationIDs: []uint32{16401}}},
		{"truncate cascade restart", &Truncate{Options: TruncateCascade | TruncateRestartIdentity, RelationIDs: []uint32{1, 2, 3}}},
		{"message", &LogicalMessage{LSN: 0x15435C0, Prefix: "tributary.heartbeat", Content: []byte("hb-1")}},
		{"message transactional binary", &LogicalMessage{Transactional: true, LSN: 1, Prefix: "tx", Content: []byte{0, 1, 2, 3}}},
		{"message empty", &LogicalMessage{Prefix: "", Content: []byte{}}},
	}
}

func TestParseValid(t *testing.T) {
	var p Parser
	for _, tc := range validCases() {
		t.Run(tc.name, func(t *testing.T) {
			data := encode(tc.want)
			got, err := p.Parse(data)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !equalMessage(got, tc.want) {
				t.Fatalf("Parse:\n got %#v\nwant %#v", got, tc.want)
			}
			// The package-level Parse agrees.
			got2, err := Parse(data)
			if err != nil || !equalMessage(got2, tc.want) {
				t.Fatalf("package Parse: %#v, %v", got2, err)
			}
		})
	}
}

// TestParseHandBytes pins the encoder (and so every other fixture) to bytes
// written out from the protocol documentation.
func TestParseHandBytes(t *testing.T) {
	tests := []struct {
		name string
		data []byte
		want Message
	}{
		{"begin", []byte{'B',
			0, 0, 0, 0x16, 0xb3, 0x74, 0xd8, 0x48, // final lsn 16/B374D848
			0, 0, 0, 0, 0, 0, 0, 1, // 1 µs after 2000-01-01
			0, 0, 0x02, 0xe9}, // xid 745
			&Begin{FinalLSN: 0x16_B374D848, CommitTime: time.Date(2000, 1, 1, 0, 0, 0, 1000, time.UTC), XID: 745}},
		{"insert", []byte{'I',
			0, 0, 0x40, 0x11, // relation 16401
			'N', 0, 3, // 3 columns
			't', 0, 0, 0, 2, 'h', 'i',
			'n',
			'u'},
			&Insert{RelationID: 16401, New: tup(txt("hi"), null, unch)}},
		{"truncate", []byte{'T',
			0, 0, 0, 2, // 2 relations
			3, // cascade | restart identity
			0, 0, 0, 7, 0, 0, 0, 8},
			&Truncate{Options: 3, RelationIDs: []uint32{7, 8}}},
		{"message", []byte{'M', 1,
			0, 0, 0, 0, 0, 0, 0, 9,
			'h', 'b', 0,
			0, 0, 0, 1, 'x'},
			&LogicalMessage{Transactional: true, LSN: 9, Prefix: "hb", Content: []byte("x")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.data)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !equalMessage(got, tc.want) {
				t.Fatalf("Parse:\n got %#v\nwant %#v", got, tc.want)
			}
			if enc := encode(tc.want); !bytes.Equal(enc, tc.data) {
				t.Fatalf("encode = %x, want %x", enc, tc.data)
			}
		})
	}
}

// TestParseEveryPrefix: every proper prefix of every valid message is an
// ErrTruncated error, never a panic and never a message.
func TestParseEveryPrefix(t *testing.T) {
	var p Parser
	for _, tc := range validCases() {
		data := encode(tc.want)
		for n := range len(data) {
			// A fresh copy with no spare capacity, so that a read past the
			// end cannot silently land in the rest of the message.
			prefix := bytes.Clone(data[:n])
			m, err := p.Parse(prefix)
			checkError(t, tc.name, prefix, m, err, ErrTruncated)
		}
	}
}

// TestParseTrailing: a byte after a complete message is refused.
func TestParseTrailing(t *testing.T) {
	var p Parser
	for _, tc := range validCases() {
		data := append(encode(tc.want), 0)
		m, err := p.Parse(data)
		checkError(t, tc.name, data, m, err, ErrMalformed)
		var de *Error
		if errors.As(err, &de) && de.Offset != len(data)-1 {
			t.Errorf("%s: trailing byte error at offset %d, want %d", tc.name, de.Offset, len(data)-1)
		}
	}
}

// checkError asserts that err is an *Error wrapping want, pointing inside
// data, and that no message came with it.
func checkError(t *testing.T, name string, data []byte, m Message, err error, want error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: Parse(%x) = %#v, want error", name, data, m)
		return
	}
	if m != nil {
		t.Errorf("%s: Parse(%x) returned message %#v with error", name, data, m)
	}
	var de *Error
	if !errors.As(err, &de) {
		t.Errorf("%s: Parse(%x) error %T %v, want *Error", name, data, err, err)
		return
	}
	if !errors.Is(err, want) {
		t.Errorf("%s: Parse(%x) = %v, want %v", name, data, err, want)
	}
	if de.Offset < 0 || de.Offset > len(data) {
		t.Errorf("%s: Parse(%x) error offset %d outside message", name, data, de.Offset)
	}
}

func TestParseErrors(t *testing.T) {
	long := strings.Repeat("x", 10)
	tests := []struct {
		name string
		data []byte
		want error
		msg  string // substring of the error text
	}{
		{"empty", nil, ErrTruncated, "empty message"},
		{"unknown type", []byte{'Z', 1, 2}, ErrUnknownMessage, "'Z'"},
		{"unknown type unprintable", []byte{0xff}, ErrUnknownMessage, "0xff"},
		{"two-phase begin prepare", []byte{'b', 0}, ErrUnknownMessage, "two-phase"},
		{"two-phase prepare", []byte{'P'}, ErrUnknownMessage, "protocol version 3"},
		// Protocol 2's streaming messages: the reader asks for protocol 1.
		{"stream start", []byte{'S', 0, 0, 0, 1, 1}, ErrUnknownMessage, "protocol version 2 streaming"},
		{"stream stop", []byte{'E'}, ErrUnknownMessage, "proto_version '1' without streaming"},
		{"stream commit", []byte{'c', 0, 0, 0, 1, 0}, ErrUnknownMessage, "protocol version 2"},
		{"stream abort", msg('A').u32(1).u32(1).b, ErrUnknownMessage, "protocol version 2"},
		{"commit flags", msg(MsgCommit).u8(1).u64(0).u64(0).u64(0).b, ErrMalformed, "flags"},
		{"origin no NUL", msg(MsgOrigin).u64(1).raw('a', 'b').b, ErrTruncated, "NUL"},
		{"relation bad identity", msg(MsgRelation).u32(1).str("s").str("t").u8('x').u16(0).b, ErrMalformed, "identity"},
		{"relation column flags", msg(MsgRelation).u32(1).str("s").str("t").u8('d').u16(1).u8(2).str("c").u32(23).i32(-1).b, ErrMalformed, "column 0 column flags"},
		{"relation column count too big", msg(MsgRelation).u32(1).str("s").str("t").u8('d').u16(2).u8(0).str("c").u32(23).i32(-1).b, ErrTruncated, "2 columns"},
		{"relation huge column count", msg(MsgRelation).u32(1).str("s").str("t").u8('d').u16(65535).b, ErrTruncated, "65535 columns"},
		{"insert marker", msg(MsgInsert).u32(1).u8('K').tuple(tup()).b, ErrMalformed, "want one of N"},
		{"insert value kind", msg(MsgInsert).u32(1).u8('N').u16(2).u8('n').u8('x').b, ErrMalformed, "column 1 value kind"},
		{"insert negative length", msg(MsgInsert).u32(1).u8('N').u16(1).u8('t').i32(-1).b, ErrMalformed, "negative length"},
		{"insert length past end", msg(MsgInsert).u32(1).u8('N').u16(1).u8('t').i32(11).raw([]byte(long)...).b, ErrTruncated, "need 11 bytes, have 10"},
		{"insert huge column count", msg(MsgInsert).u32(1).u8('N').u16(65535).u8('n').b, ErrTruncated, "65535 columns"},
		{"insert more columns than sent", msg(MsgInsert).u32(1).u8('N').u16(3).u8('n').u8('n').b, ErrTruncated, "3 columns, 2 bytes left"},
		{"insert fewer columns than sent", msg(MsgInsert).u32(1).u8('N').u16(1).u8('n').u8('n').b, ErrMalformed, "1 trailing bytes"},
		{"update marker", msg(MsgUpdate).u32(1).u8('X').b, ErrMalformed, "want one of KON"},
		{"update old then no N", msg(MsgUpdate).u32(1).u8('K').tuple(tup(null)).u8('K').tuple(tup(null)).b, ErrMalformed, "new tuple marker"},
		{"update old only", msg(MsgUpdate).u32(1).u8('O').tuple(tup(null)).b, ErrTruncated, "new tuple marker"},
		{"delete marker N", msg(MsgDelete).u32(1).u8('N').tuple(tup(null)).b, ErrMalformed, "want one of KO"},
		{"truncate negative count", msg(MsgTruncate).i32(-1).u8(0).b, ErrMalformed, "negative count"},
		{"truncate options", msg(MsgTruncate).u32(1).u8(4).u32(1).b, ErrMalformed, "option bits"},
		{"truncate count too big", msg(MsgTruncate).u32(3).u8(0).u32(1).u32(2).b, ErrTruncated, "3 ids"},
		{"truncate huge count", msg(MsgTruncate).u32(1 << 30).u8(0).b, ErrTruncated, "1073741824 ids"},
		{"message flags", msg(MsgLogical).u8(2).u64(0).str("p").u32(0).b, ErrMalformed, "flags"},
		{"message content past end", msg(MsgLogical).u8(0).u64(0).str("p").u32(5).raw('a').b, ErrTruncated, "content"},
		{"message negative content", msg(MsgLogical).u8(0).u64(0).str("p").i32(-5).b, ErrMalformed, "negative length"},
		// A protocol 2 streamed insert carries its XID first: read as
		// protocol 1, the XID is the relation id and the relation id the
		// marker: refused, not misread.
		{"streamed insert", msg(MsgInsert).u32(777).u32(16401).u8('N').tuple(tup()).b, ErrMalformed, "marker"},
	}
	var p Parser
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := p.Parse(tc.data)
			checkError(t, tc.name, tc.data, m, err, tc.want)
			if err != nil && !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not mention %q", err, tc.msg)
			}
		})
	}
}

func TestErrorText(t *testing.T) {
	_, err := Parse(msg(MsgInsert).u32(1).u8('N').u16(2).u8('n').u8('t').u32(5).raw('a').b)
	want := "pgoutput Insert: offset 14: column 1 value: message truncated (need 5 bytes, have 1)"
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v\nwant %s", err, want)
	}
}

// TestParseReuse: a Parser's results alias its storage until the next
// Parse; a wide tuple then a narrow one must not leak columns.
func TestParseReuse(t *testing.T) {
	var p Parser
	if _, err := p.Parse(encode(&Insert{RelationID: 1, New: tup(txt("a"), txt("b"), txt("c"))})); err != nil {
		t.Fatal(err)
	}
	m, err := p.Parse(encode(&Update{RelationID: 1, New: tup(txt("x"))}))
	if err != nil {
		t.Fatal(err)
	}
	u := m.(*Update)
	if len(u.New) != 1 || u.Old != nil || u.OldKind != OldNone {
		t.Fatalf("update after insert = %#v", u)
	}
	m, err = p.Parse(encode(&Update{RelationID: 1, OldKind: OldKey, Old: tup(txt("k")), New: tup(txt("y"))}))
	if err != nil {
		t.Fatal(err)
	}
	if m.(*Update).OldKind != OldKey {
		t.Fatal("old kind not set")
	}
	m, err = p.Parse(encode(&Update{RelationID: 1, New: tup(txt("z"))}))
	if err != nil {
		t.Fatal(err)
	}
	if u := m.(*Update); u.Old != nil || u.OldKind != OldNone {
		t.Fatalf("old tuple leaked into next update: %#v", u)
	}
}

func TestTimestamp(t *testing.T) {
	tests := []struct {
		us   int64
		want time.Time
	}{
		{0, time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{-1, time.Date(1999, 12, 31, 23, 59, 59, 999999000, time.UTC)},
		{-1_000_000, time.Date(1999, 12, 31, 23, 59, 59, 0, time.UTC)},
		{849_357_296_789_012, commitTime},
	}
	for _, tc := range tests {
		r := reader{buf: (&wire{}).u64(uint64(tc.us)).b}
		got, err := r.timestamp("t")
		if err != nil || !got.Equal(tc.want) || got.Location() != time.UTC {
			t.Errorf("timestamp(%d) = %v, %v; want %v", tc.us, got, err, tc.want)
		}
	}
	// The extremes (PostgreSQL's ±infinity) do not overflow or panic.
	for _, us := range []int64{1<<63 - 1, -1 << 63} {
		r := reader{buf: (&wire{}).u64(uint64(us)).b}
		got, err := r.timestamp("t")
		if err != nil {
			t.Fatal(err)
		}
		back := (&wire{}).ts(got).b
		if !bytes.Equal(back, r.buf) {
			t.Errorf("timestamp(%d) = %v does not round-trip", us, got)
		}
	}
}

func TestMessageTypeString(t *testing.T) {
	for _, tc := range validCases() {
		if s := tc.want.Type().String(); strings.HasPrefix(s, "message ") {
			t.Errorf("%s: Type().String() = %q", tc.name, s)
		}
	}
	if s := MessageType('Z').String(); s != "message 'Z' (0x5a)" {
		t.Errorf("String = %q", s)
	}
}
