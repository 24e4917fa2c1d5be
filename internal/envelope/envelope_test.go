package envelope

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestLSN(t *testing.T) {
	for _, c := range []struct {
		in   string
		want LSN
		err  bool
	}{
		{"0/3000148", 0x3000148, false},
		{"16/B374D848", 0x16B374D848, false},
		{"16/b374d848", 0x16B374D848, false},
		{"FFFFFFFF/FFFFFFFF", 0xFFFFFFFFFFFFFFFF, false},
		{"0/0", 0, false},
		{"", 0, true},
		{"3000148", 0, true},
		{"0/", 0, true},
		{"/1", 0, true},
		{"1/2/3", 0, true},
		{"g/1", 0, true},
		{"100000000/0", 0, true},
		{"-1/0", 0, true},
	} {
		got, err := ParseLSN(c.in)
		if c.err {
			if !errors.Is(err, ErrBadLSN) {
				t.Errorf("ParseLSN(%q) err = %v, want ErrBadLSN", c.in, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseLSN(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
		if back, _ := ParseLSN(got.String()); back != got {
			t.Errorf("round trip %q -> %s -> %v", c.in, got, back)
		}
	}
}

func TestEncodeDecode(t *testing.T) {
	title := "hello"
	ev := &Event{Kind: KindChange, Shard: 3, Table: "documents", Op: OpUpdate, ID: "734197815705617408",
		LSN: 0x16B374D848, CommitLSN: 0x16B374D900, Seq: 2, XID: 77, CommitTime: time.Unix(1791590400, 0).UTC(),
		Columns:   []Column{{Name: "id", Type: "bigint", OID: 20, Key: true}},
		After:     map[string]*string{"id": ptr("734197815705617408"), "title": &title, "body": nil},
		Unchanged: []string{"big"}}
	b, err := Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"lsn":"16/B374D848"`) {
		t.Errorf("LSN not in text form: %s", b)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.LSN != ev.LSN || got.ID != ev.ID || *got.After["title"] != "hello" || got.After["body"] != nil || got.Unchanged[0] != "big" {
		t.Errorf("round trip mismatch: %+v", got)
	}
}

func TestDecodeRejects(t *testing.T) {
	for name, in := range map[string]string{
		"not json":        `{`,
		"future version":  `{"v":2,"kind":"change"}`,
		"unknown kind":    `{"v":1,"kind":"gossip","lsn":"0/1","commit_lsn":"0/1","commit_ts":"2026-01-01T00:00:00Z"}`,
		"insert no id":    `{"v":1,"kind":"change","table":"t","op":"c","after":{},"lsn":"0/1","commit_lsn":"0/1","commit_ts":"2026-01-01T00:00:00Z"}`,
		"insert no after": `{"v":1,"kind":"change","table":"t","op":"c","id":"1","lsn":"0/1","commit_lsn":"0/1","commit_ts":"2026-01-01T00:00:00Z"}`,
		"no lsn":          `{"v":1,"kind":"change","table":"t","op":"d","id":"1","lsn":"0/0","commit_lsn":"0/1","commit_ts":"2026-01-01T00:00:00Z"}`,
		"bad lsn":         `{"v":1,"kind":"change","table":"t","op":"d","id":"1","lsn":"zz","commit_lsn":"0/1","commit_ts":"2026-01-01T00:00:00Z"}`,
		"watermark 0":     `{"v":1,"kind":"watermark","shard":1,"lsn":"0/0","commit_lsn":"0/0","commit_ts":"2026-01-01T00:00:00Z"}`,
		"unknown op":      `{"v":1,"kind":"change","table":"t","op":"x","id":"1","lsn":"0/1","commit_lsn":"0/1","commit_ts":"2026-01-01T00:00:00Z"}`,
	} {
		if _, err := Decode([]byte(in)); err == nil {
			t.Errorf("%s: Decode accepted %s", name, in)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"v":1,"kind":"change","table":"t","op":"c","id":"1","after":{"id":"1"},"lsn":"0/1","commit_lsn":"0/1","commit_ts":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"v":1,"kind":"watermark","shard":1,"lsn":"0/0","commit_lsn":"0/5","commit_ts":"2026-01-01T00:00:00Z","partitions":4}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := Decode(b)
		if err != nil {
			return
		}
		// Whatever decodes must validate and survive a round trip.
		out, err := Encode(ev)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if _, err := Decode(out); err != nil {
			t.Fatalf("round trip of accepted envelope fails: %v\n%s", err, out)
		}
	})
}

func ptr(s string) *string { return &s }

func TestRowVersionAndEpochFormat(t *testing.T) {
	e := &Event{Kind: KindChange, Table: "t", Op: OpUpdate, ID: "1", LSN: 0x16B374D848, CommitLSN: 0x16B374D900, After: map[string]*string{}}
	if got, want := e.RowVersion(), uint64(0x16B374D848); got != want {
		t.Fatalf("epoch 0: %x, want %x", got, want)
	}
	b, _ := Encode(e)
	if e.V != 1 {
		t.Fatalf("a record without epoch is written as version %d, want 1: %s", e.V, b)
	}
	e.Epoch = 2
	if e.RowVersion() <= (&Event{LSN: MaxLSN}).RowVersion() {
		t.Fatal("epoch 2 does not beat every epoch-0 version")
	}
	if _, err := Encode(e); err != nil || e.V != 2 {
		t.Fatalf("epoch record: version %d, err %v", e.V, err)
	}
	e.LSN = MaxLSN + 1
	if err := e.Validate(); err == nil {
		t.Fatal("an LSN beyond MaxLSN validated")
	}
	end := &Event{Kind: KindChange, Table: "t", Op: OpSnapshotEnd, Epoch: 1, Partitions: 2}
	if err := end.Validate(); err != nil {
		t.Fatalf("snapshot end: %v", err)
	}
	if end.Epoch = 0; end.Validate() == nil {
		t.Fatal("snapshot end without epoch validated")
	}
	// A resnapshot's delete: LSN 0 in an epoch, the epoch's lowest version.
	del := &Event{Kind: KindChange, Table: "t", Op: OpDelete, ID: "1", Epoch: 3, CommitLSN: 0x10}
	if _, err := Encode(del); err != nil || del.V != 4 || !del.IsCopyDelete() || del.RowVersion() != 3<<48 {
		t.Fatalf("resnapshot delete: version %d, copy delete %v, row version %x, err %v", del.V, del.IsCopyDelete(), del.RowVersion(), err)
	}
	if del.Epoch = 0; del.Validate() == nil {
		t.Fatal("a delete without lsn and without epoch validated")
	}
	for _, op := range []Op{OpInsert, OpUpdate} {
		e := &Event{Kind: KindChange, Table: "t", Op: op, ID: "1", Epoch: 3, After: map[string]*string{"id": ptr("1")}}
		if e.Validate() == nil {
			t.Fatalf("%s without lsn validated in an epoch", op)
		}
	}
}
