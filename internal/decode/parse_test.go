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
	name     string
	inStream bool
	want     Message
}

func validCases() []validCase {
	itemsRel := &Relation{ID: 16401, Namespace: "public", Name: "items", ReplicaIdentity: IdentityDefault,
		Columns: []RelationColumn{
			{Flags: ColumnKey, Name: "id", TypeOID: 20, TypeMod: -1},
			{Name: "amount", TypeOID: 1700, TypeMod: 786438},
			{Name: "name", TypeOID: 1043, TypeMod: 44},
		}}
	streamRel := *itemsRel
	streamRel.XID = 777
	return []validCase{
		{"begin", false, &Begin{FinalLSN: 0x16_B374D848, CommitTime: commitTime, XID: 745}},
		{"begin before 2000", false, &Begin{FinalLSN: 1, CommitTime: time.Date(1999, 12, 31, 23, 59, 59, 999999000, time.UTC), XID: 1}},
		{"commit", false, &Commit{CommitLSN: 0x16_B374D848, EndLSN: 0x16_B374D878, CommitTime: commitTime}},
		{"origin", false, &Origin{CommitLSN: 0x1_00ABCDEF, Name: "upstream"}},
		{"origin in stream", true, &Origin{Name: ""}},
		{"relation", false, itemsRel},
		{"relation v2 stream", true, &streamRel},
		{"relation pg_catalog no columns", false, &Relation{ID: 1, Namespace: "", Name: "t", ReplicaIdentity: IdentityNothing, Columns: []RelationColumn{}}},
		{"relation full", false, &Relation{ID: 2, Namespace: "s", Name: "Ünï", ReplicaIdentity: IdentityFull,
			Columns: []RelationColumn{{Flags: ColumnKey, Name: "a", TypeOID: 25, TypeMod: -1}, {Flags: ColumnKey, Name: "b b", TypeOID: 16385, TypeMod: 7}}}},
		{"relation index identity", false, &Relation{ID: 3, Namespace: "s", Name: "t", ReplicaIdentity: IdentityIndex, Columns: []RelationColumn{{Name: "x", TypeOID: 23, TypeMod: -1}}}},
		{"type", false, &Type{OID: 16390, Namespace: "public", Name: "mood"}},
		{"type v2 stream", true, &Type{XID: 9, OID: 16390, Namespace: "", Name: "varchar"}},
		{"insert", false, &Insert{RelationID: 16401, New: tup(txt("1"), txt("1234.50"), txt("Zoë – naïve ☃"))}},
		{"insert nulls and empty", false, &Insert{RelationID: 16401, New: tup(txt("2"), null, txt(""))}},
		{"insert embedded NUL", false, &Insert{RelationID: 1, New: tup(txt("a\x00b\x00"), txt("\xff\xfe not utf-8"))}},
		{"insert binary", false, &Insert{RelationID: 1, New: tup(bin(0, 0, 0, 1), bin())}},
		{"insert zero columns", false, &Insert{RelationID: 1, New: tup()}},
		{"insert v2 stream", true, &Insert{XID: 778, RelationID: 16401, New: tup(txt("3"), null, null)}},
		{"update no old", false, &Update{RelationID: 16401, New: tup(txt("1"), txt("1.00"), unch)}},
		{"update key", false, &Update{RelationID: 16401, OldKind: OldKey, Old: tup(txt("2"), null, null), New: tup(txt("10"), null, null)}},
		{"update full", false, &Update{RelationID: 5, OldKind: OldFull, Old: tup(txt("1"), txt("one")), New: tup(txt("1"), txt("uno"))}},
		{"update v2 stream", true, &Update{XID: 779, RelationID: 5, OldKind: OldKey, Old: tup(txt("1"), null), New: tup(txt("2"), unch)}},
		{"delete key", false, &Delete{RelationID: 16401, OldKind: OldKey, Old: tup(txt("10"), null, null)}},
		{"delete full", false, &Delete{RelationID: 5, OldKind: OldFull, Old: tup(txt("2"), null)}},
		{"delete v2 stream", true, &Delete{XID: 780, RelationID: 5, OldKind: OldFull, Old: tup(txt("2"), txt("x"))}},
		{"truncate", false, &Truncate{Options: 0, RelationIDs: []uint32{16401}}},
		{"truncate cascade restart", false, &Truncate{Options: TruncateCascade | TruncateRestartIdentity, RelationIDs: []uint32{1, 2, 3}}},
		{"truncate v2 stream", true, &Truncate{XID: 781, Options: TruncateRestartIdentity, RelationIDs: []uint32{7}}},
		{"message", false, &LogicalMessage{LSN: 0x15435C0, Prefix: "tributary.heartbeat", Content: []byte("hb-1")}},
		{"message transactional binary", false, &LogicalMessage{Transactional: true, LSN: 1, Prefix: "tx", Content: []byte{0, 1, 2, 3}}},
		{"message empty", false, &LogicalMessage{Prefix: "", Content: []byte{}}},
		{"message v2 stream", true, &LogicalMessage{XID: 782, Transactional: true, LSN: 2, Prefix: "p", Content: []byte("c")}},
		{"stream start first", false, &StreamStart{XID: 783, FirstSegment: true}},
		{"stream start later", false, &StreamStart{XID: 783}},
		{"stream stop", true, &StreamStop{}},
		{"stream commit", false, &StreamCommit{XID: 783, CommitLSN: 10, EndLSN: 20, CommitTime: commitTime}},
		{"stream abort", false, &StreamAbort{XID: 783, SubXID: 783}},
		{"stream abort subxact", false, &StreamAbort{XID: 783, SubXID: 790}},
	}
}

func TestParseValid(t *testing.T) {
	var p Parser
	for _, tc := range validCases() {
		t.Run(tc.name, func(t *testing.T) {
			data := encode(tc.want, tc.inStream)
			got, err := p.Parse(data, tc.inStream)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !equalMessage(got, tc.want) {
				t.Fatalf("Parse:\n got %#v\nwant %#v", got, tc.want)
			}
			// The package-level Parse agrees.
			got2, err := Parse(data, tc.inStream)
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
		name     string
		data     []byte
		inStream bool
		want     Message
	}{
		{"begin", []byte{'B',
			0, 0, 0, 0x16, 0xb3, 0x74, 0xd8, 0x48, // final lsn 16/B374D848
			0, 0, 0, 0, 0, 0, 0, 1, // 1 µs after 2000-01-01
			0, 0, 0x02, 0xe9}, // xid 745
			false, &Begin{FinalLSN: 0x16_B374D848, CommitTime: time.Date(2000, 1, 1, 0, 0, 0, 1000, time.UTC), XID: 745}},
		{"insert stream", []byte{'I',
			0, 0, 0x03, 0x09, // xid 777
			0, 0, 0x40, 0x11, // relation 16401
			'N', 0, 3, // 3 columns
			't', 0, 0, 0, 2, 'h', 'i',
			'n',
			'u'},
			true, &Insert{XID: 777, RelationID: 16401, New: tup(txt("hi"), null, unch)}},
		{"truncate", []byte{'T',
			0, 0, 0, 2, // 2 relations
			3, // cascade | restart identity
			0, 0, 0, 7, 0, 0, 0, 8},
			false, &Truncate{Options: 3, RelationIDs: []uint32{7, 8}}},
		{"message", []byte{'M', 1,
			0, 0, 0, 0, 0, 0, 0, 9,
			'h', 'b', 0,
			0, 0, 0, 1, 'x'},
			false, &LogicalMessage{Transactional: true, LSN: 9, Prefix: "hb", Content: []byte("x")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.data, tc.inStream)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !equalMessage(got, tc.want) {
				t.Fatalf("Parse:\n got %#v\nwant %#v", got, tc.want)
			}
			if enc := encode(tc.want, tc.inStream); !bytes.Equal(enc, tc.data) {
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
		data := encode(tc.want, tc.inStream)
		for n := range len(data) {
			// A fresh copy with no spare capacity, so that a read past the
			// end cannot silently land in the rest of the message.
			prefix := bytes.Clone(data[:n])
			m, err := p.Parse(prefix, tc.inStream)
			checkError(t, tc.name, prefix, m, err, ErrTruncated)
		}
	}
}

// TestParseTrailing: a byte after a complete message is refused.
func TestParseTrailing(t *testing.T) {
	var p Parser
	for _, tc := range validCases() {
		data := append(encode(tc.want, tc.inStream), 0)
		m, err := p.Parse(data, tc.inStream)
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
		name     string
		data     []byte
		inStream bool
		want     error
		msg      string // substring of the error text
	}{
		{"empty", nil, false, ErrTruncated, "empty message"},
		{"unknown type", []byte{'Z', 1, 2}, false, ErrUnknownMessage, "'Z'"},
		{"unknown type unprintable", []byte{0xff}, false, ErrUnknownMessage, "0xff"},
		{"two-phase begin prepare", []byte{'b', 0}, false, ErrUnknownMessage, "two-phase"},
		{"two-phase prepare", []byte{'P'}, false, ErrUnknownMessage, "protocol version 3"},
		{"begin in stream", encode(&Begin{}, false), true, ErrMalformed, "Begin inside a stream block"},
		{"commit in stream", encode(&Commit{}, false), true, ErrMalformed, "inside a stream block"},
		{"stream start in stream", encode(&StreamStart{}, false), true, ErrMalformed, "inside a stream block"},
		{"stream commit in stream", encode(&StreamCommit{}, false), true, ErrMalformed, "inside"},
		{"stream abort in stream", encode(&StreamAbort{}, false), true, ErrMalformed, "inside"},
		{"stream stop outside stream", encode(&StreamStop{}, true), false, ErrMalformed, "Stream Stop outside a stream block"},
		{"commit flags", msg(MsgCommit).u8(1).u64(0).u64(0).u64(0).b, false, ErrMalformed, "flags"},
		{"stream commit flags", msg(MsgStreamCommit).u32(1).u8(2).u64(0).u64(0).u64(0).b, false, ErrMalformed, "flags"},
		{"stream start first 2", msg(MsgStreamStart).u32(1).u8(2).b, false, ErrMalformed, "first segment"},
		{"origin no NUL", msg(MsgOrigin).u64(1).raw('a', 'b').b, false, ErrTruncated, "NUL"},
		{"relation bad identity", msg(MsgRelation).u32(1).str("s").str("t").u8('x').u16(0).b, false, ErrMalformed, "identity"},
		{"relation column flags", msg(MsgRelation).u32(1).str("s").str("t").u8('d').u16(1).u8(2).str("c").u32(23).i32(-1).b, false, ErrMalformed, "column 0 column flags"},
		{"relation column count too big", msg(MsgRelation).u32(1).str("s").str("t").u8('d').u16(2).u8(0).str("c").u32(23).i32(-1).b, false, ErrTruncated, "2 columns"},
		{"relation huge column count", msg(MsgRelation).u32(1).str("s").str("t").u8('d').u16(65535).b, false, ErrTruncated, "65535 columns"},
		{"insert marker", msg(MsgInsert).u32(1).u8('K').tuple(tup()).b, false, ErrMalformed, "want one of N"},
		{"insert value kind", msg(MsgInsert).u32(1).u8('N').u16(2).u8('n').u8('x').b, false, ErrMalformed, "column 1 value kind"},
		{"insert negative length", msg(MsgInsert).u32(1).u8('N').u16(1).u8('t').i32(-1).b, false, ErrMalformed, "negative length"},
		{"insert length past end", msg(MsgInsert).u32(1).u8('N').u16(1).u8('t').i32(11).raw([]byte(long)...).b, false, ErrTruncated, "need 11 bytes, have 10"},
		{"insert huge column count", msg(MsgInsert).u32(1).u8('N').u16(65535).u8('n').b, false, ErrTruncated, "65535 columns"},
		{"insert more columns than sent", msg(MsgInsert).u32(1).u8('N').u16(3).u8('n').u8('n').b, false, ErrTruncated, "3 columns, 2 bytes left"},
		{"insert fewer columns than sent", msg(MsgInsert).u32(1).u8('N').u16(1).u8('n').u8('n').b, false, ErrMalformed, "1 trailing bytes"},
		{"update marker", msg(MsgUpdate).u32(1).u8('X').b, false, ErrMalformed, "want one of KON"},
		{"update old then no N", msg(MsgUpdate).u32(1).u8('K').tuple(tup(null)).u8('K').tuple(tup(null)).b, false, ErrMalformed, "new tuple marker"},
		{"update old only", msg(MsgUpdate).u32(1).u8('O').tuple(tup(null)).b, false, ErrTruncated, "new tuple marker"},
		{"delete marker N", msg(MsgDelete).u32(1).u8('N').tuple(tup(null)).b, false, ErrMalformed, "want one of KO"},
		{"truncate negative count", msg(MsgTruncate).i32(-1).u8(0).b, false, ErrMalformed, "negative count"},
		{"truncate options", msg(MsgTruncate).u32(1).u8(4).u32(1).b, false, ErrMalformed, "option bits"},
		{"truncate count too big", msg(MsgTruncate).u32(3).u8(0).u32(1).u32(2).b, false, ErrTruncated, "3 ids"},
		{"truncate huge count", msg(MsgTruncate).u32(1 << 30).u8(0).b, false, ErrTruncated, "1073741824 ids"},
		{"message flags", msg(MsgLogical).u8(2).u64(0).str("p").u32(0).b, false, ErrMalformed, "flags"},
		{"message content past end", msg(MsgLogical).u8(0).u64(0).str("p").u32(5).raw('a').b, false, ErrTruncated, "content"},
		{"message negative content", msg(MsgLogical).u8(0).u64(0).str("p").i32(-5).b, false, ErrMalformed, "negative length"},
		// Parsed as if not streamed, a streamed insert's XID is read as the
		// relation id and its relation id as the marker: refused, not misread.
		{"stream insert read outside stream", msg(MsgInsert).u32(777).u32(16401).u8('N').tuple(tup()).b, false, ErrMalformed, "marker"},
		{"v4 stream abort", msg(MsgStreamAbort).u32(1).u32(1).u64(5).u64(6).b, false, ErrMalformed, "16 trailing bytes"},
	}
	var p Parser
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := p.Parse(tc.data, tc.inStream)
			checkError(t, tc.name, tc.data, m, err, tc.want)
			if err != nil && !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not mention %q", err, tc.msg)
			}
		})
	}
}

func TestErrorText(t *testing.T) {
	_, err := Parse(msg(MsgInsert).u32(1).u8('N').u16(2).u8('n').u8('t').u32(5).raw('a').b, false)
	want := "pgoutput Insert: offset 14: column 1 value: message truncated (need 5 bytes, have 1)"
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v\nwant %s", err, want)
	}
}

// TestParseReuse: a Parser's results alias its storage until the next
// Parse; a wide tuple then a narrow one must not leak columns.
func TestParseReuse(t *testing.T) {
	var p Parser
	if _, err := p.Parse(encode(&Insert{RelationID: 1, New: tup(txt("a"), txt("b"), txt("c"))}, false), false); err != nil {
		t.Fatal(err)
	}
	m, err := p.Parse(encode(&Update{RelationID: 1, New: tup(txt("x"))}, false), false)
	if err != nil {
		t.Fatal(err)
	}
	u := m.(*Update)
	if len(u.New) != 1 || u.Old != nil || u.OldKind != OldNone {
		t.Fatalf("update after insert = %#v", u)
	}
	m, err = p.Parse(encode(&Update{RelationID: 1, OldKind: OldKey, Old: tup(txt("k")), New: tup(txt("y"))}, false), false)
	if err != nil {
		t.Fatal(err)
	}
	if m.(*Update).OldKind != OldKey {
		t.Fatal("old kind not set")
	}
	m, err = p.Parse(encode(&Update{RelationID: 1, New: tup(txt("z"))}, false), false)
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
