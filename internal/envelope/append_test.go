package envelope

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

func sample() *Event {
	s := func(v string) *string { return &v }
	cols := []Column{{Name: "id", Type: "bigint", OID: 20, Key: true}, {Name: "workspace_id", Type: "bigint", OID: 20},
		{Name: "title", Type: "text", OID: 25}, {Name: "amount", Type: "numeric(12,2)", OID: 1700},
		{Name: "created_at", Type: "timestamp with time zone", OID: 1184}, {Name: "priority", Type: "integer", OID: 23, Missing: s("5")},
		{Name: "mood", Type: "public.mood", OID: 16390, Enum: true}}
	return &Event{Kind: KindChange, Shard: 0, Schema: "public", Table: "bench_reader_x_a", Op: OpInsert, ID: "734197",
		LSN: 0x1A2B3C4D5E, CommitLSN: 0x1A2B3C4F00, Seq: 12345, XID: 771, CommitTime: time.Date(2026, 11, 30, 13, 8, 59, 123400000, time.UTC),
		Columns: cols, After: map[string]*string{"id": s("734197"), "workspace_id": s("197"), "title": s("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca4<>&\"\\\n\u2028\xff"),
			"amount": s("97.34"), "created_at": s("2026-11-30 12:12:14.197+00"), "extra": nil}}
}

func TestAppendSame(t *testing.T) {
	var enc Encoder
	e := sample()
	a, _ := Encode(e)
	b := enc.Append(nil, e)
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if !reflect.DeepEqual(x, y) {
		t.Fatalf("\n%s\n%s", a, b)
	}
}

func BenchmarkMarshal(b *testing.B) {
	e := sample()
	b.ReportAllocs()
	for b.Loop() {
		Encode(e)
	}
}

func BenchmarkAppend(b *testing.B) {
	e := sample()
	var enc Encoder
	b.ReportAllocs()
	for b.Loop() {
		enc.Append(make([]byte, 0, 1024), e)
	}
}

func TestSizes(t *testing.T) {
	e := sample()
	e.After["title"] = func() *string { s := "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca4"; return &s }()
	delete(e.After, "extra")
	b, _ := Encode(e)
	c, _ := json.Marshal(e.Columns)
	t.Logf("record %d B, columns %d B (%.0f%%)", len(b), len(c)+len(`,"columns":`), 100*float64(len(c)+11)/float64(len(b)))
}

// The column cache must not serve a stale list when the same backing array
// holds other columns (a freed slice reused by another relation).
func TestAppendColumnCacheGuard(t *testing.T) {
	var enc Encoder
	e := sample()
	enc.Append(nil, e)
	e.Columns[2].Name = "renamed"
	e.After["renamed"] = e.After["title"]
	delete(e.After, "title")
	var got Event
	if err := json.Unmarshal(enc.Append(nil, e), &got); err != nil {
		t.Fatal(err)
	}
	if got.Columns[2].Name != "renamed" {
		t.Fatalf("stale cached column list: %+v", got.Columns)
	}
}

func FuzzAppendMatchesMarshal(f *testing.F) {
	f.Add("734197", "title", "body\n\"x\"", "u", uint64(5), uint32(1))
	f.Add("", "\xff\xfe", "\u2028<>&", "", uint64(0), uint32(0))
	f.Fuzz(func(t *testing.T, id, title, body, unchanged string, lsn uint64, seq uint32) {
		var enc Encoder
		e := sample()
		e.ID, e.LSN, e.Seq = id, LSN(lsn), seq
		e.After["title"], e.After["body"] = &title, &body
		e.Columns = append(e.Columns, Column{Name: "body", Type: "text", OID: 25})
		if unchanged != "" {
			e.Unchanged = []string{unchanged}
		}
		a, err := Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		b := enc.Append(nil, e)
		var x, y any
		if err := json.Unmarshal(a, &x); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &y); err != nil {
			t.Fatalf("Append wrote invalid JSON: %v\n%s", err, b)
		}
		if !reflect.DeepEqual(x, y) {
			t.Fatalf("Append differs from json.Marshal:\n%s\n%s", a, b)
		}
	})
}
