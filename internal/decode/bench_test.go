package decode

import (
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/tributary/tributary/internal/envelope"
)

// A small insert: 5 columns, like a typical narrow OLTP row.
var smallInsert = &Insert{RelationID: 16401, New: tup(
	txt("734197815705617408"), txt("42"), txt("1234.50"), txt("2026-11-30 12:34:56.789012+00"), null)}

var smallRelation = &Relation{ID: 16401, Namespace: "public", Name: "orders", ReplicaIdentity: IdentityDefault,
	Columns: []RelationColumn{
		{Flags: ColumnKey, Name: "id", TypeOID: 20, TypeMod: -1},
		{Name: "workspace_id", TypeOID: 20, TypeMod: -1},
		{Name: "amount", TypeOID: 1700, TypeMod: 786438},
		{Name: "created_at", TypeOID: 1184, TypeMod: -1},
		{Name: "note", TypeOID: 25, TypeMod: -1},
	}}

func benchParse(b *testing.B, data []byte) {
	var p Parser
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseInsert(b *testing.B) { benchParse(b, encode(smallInsert)) }

func BenchmarkParseUpdateKey(b *testing.B) {
	benchParse(b, encode(&Update{RelationID: 16401, OldKind: OldKey,
		Old: tup(txt("734197815705617408"), null, null, null, null), New: smallInsert.New}))
}

func BenchmarkParseBegin(b *testing.B) {
	benchParse(b, encode(&Begin{FinalLSN: 1, CommitTime: commitTime, XID: 7}))
}

func BenchmarkParseCommit(b *testing.B) {
	benchParse(b, encode(&Commit{CommitLSN: 1, EndLSN: 2, CommitTime: commitTime}))
}

// Relation messages allocate their strings; they are rare.
func BenchmarkParseRelation(b *testing.B) { benchParse(b, encode(smallRelation)) }

// BenchmarkParseCaptured parses the whole capture (265 messages, mostly
// 1 kB inserts) per op.
func BenchmarkParseCaptured(b *testing.B) {
	msgs := readCapture(b, captureFile)
	var n int64
	for _, c := range msgs {
		n += int64(len(c.data))
	}
	var p Parser
	b.SetBytes(n)
	b.ReportAllocs()
	for b.Loop() {
		for _, c := range msgs {
			if _, err := p.Parse(c.data); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(msgs)), "ns/msg")
}

// BenchmarkChangeInsert is parse plus conversion to an envelope.Event.
func BenchmarkChangeInsert(b *testing.B) {
	tbl := NewRelations(nil).Put(smallRelation)
	data := encode(smallInsert)
	var p Parser
	b.ReportAllocs()
	for b.Loop() {
		m, err := p.Parse(data)
		if err != nil {
			b.Fatal(err)
		}
		var ev envelope.Event
		if err := tbl.Change(m, []string{"id"}, &ev); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPglogreplInsert is the same insert through pglogrepl.Parse, for
// comparison.
func BenchmarkPglogreplInsert(b *testing.B) {
	data := encode(smallInsert)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := pglogrepl.Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}
