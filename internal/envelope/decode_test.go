package envelope

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// decodeReflect is the reference: encoding/json plus the same checks.
func decodeReflect(b []byte) (*Event, error) {
	var e Event
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, err
	}
	if e.V < 1 || e.V > Version {
		return nil, ErrUnsupportedVersion
	}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return &e, nil
}

// same fails unless the fast decoder and encoding/json agree on b.
func same(t *testing.T, d *Decoder, b []byte) {
	t.Helper()
	want, werr := decodeReflect(b)
	got, gerr := d.Decode(b)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("input %q:\nencoding/json err: %v\nDecoder err:       %v", b, werr, gerr)
	}
	if werr != nil {
		return
	}
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("input %q:\nencoding/json: %+v\nDecoder:       %+v", b, want, got)
	}
}

func decoderCorpus() [][]byte {
	var enc Encoder
	e := sample()
	del := sample()
	del.Op, del.After = OpDelete, nil
	del.Before = map[string]*string{"id": e.After["id"]}
	upd := sample()
	upd.Op, upd.Unchanged = OpUpdate, []string{"title"}
	delete(upd.After, "title")
	epoch := sample()
	epoch.Epoch = 3
	end := &Event{Kind: KindChange, Shard: 1, Table: "t", Op: OpSnapshotEnd, CommitLSN: 0x10, Partitions: 4, Epoch: 3,
		CommitTime: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	copyDel := &Event{Kind: KindChange, Shard: 1, Table: "t", Op: OpDelete, ID: "9", Epoch: 3, CommitLSN: 0x10,
		CommitTime: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Before: map[string]*string{"id": ptr("9")}}
	wm := &Event{Kind: KindWatermark, Shard: 3, CommitLSN: 0x16B374D848, CommitTime: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600)), Partitions: 4}
	out := [][]byte{enc.Append(nil, e), enc.Append(nil, del), enc.Append(nil, upd), enc.Append(nil, wm), enc.Append(nil, epoch), enc.Append(nil, end), enc.Append(nil, copyDel)}
	for _, ev := range []*Event{e, del, upd, wm, epoch, end, copyDel} {
		b, _ := Encode(ev)
		out = append(out, b)
	}
	out = append(out,
		[]byte(` { "V" : 1 , "KIND":"change","shard":2,"table":"t","op":"c","id":"1","lsn":"0/10","commit_lsn":"0/20","commit_ts":"2026-11-30T12:00:00Z","after":{"id":"1","x":null}, "extra":[1,{"a":[true,false,null,-1.5e3]}]} `),
		[]byte(`{"v":1,"kind":"change","shard":0,"table":"t","op":"c","id":"1","lsn":"0/10","commit_lsn":"0/20","commit_ts":"2026-11-30T12:00:00Z","after":{"id":"1"},"after":{"y":"\u00e9\ud83d\ude00\n"}}`),
		[]byte(`{"v":1,"kind":"change","shard":0,"table":"t","op":"c","id":"1","lsn":null,"commit_lsn":"0/20","commit_ts":"2026-11-30T12:00:00Z","after":{}}`),
		[]byte(`{"v":1,"kind":"change","shard":1.0,"table":"t","op":"c","id":"1","lsn":"0/1","commit_lsn":"0/20","commit_ts":"2026-11-30T12:00:00Z","after":{}}`),
		[]byte(`{"v":1,"kind":"change","shard":01,"table":"t","op":"c","id":"1","lsn":"0/1","commit_lsn":"0/20","commit_ts":null,"after":{"a":"\xff\xfe"},"columns":[null,{"name":"a","oid":4294967295,"key":null}],"unchanged":[null,"a"]}`),
		[]byte(`{"v":1,"kind":"change","shard":0,"table":"t","op":"c","id":"1","lsn":"0/1","commit_lsn":"0/20","commit_ts":"2026-11-30T12:00:00Z","after":{"a":1}}`),
		[]byte(`{"v":1,"kind":"change","shard":0,"table":"t","op":"c","id":"1","lsn":"0/1","commit_lsn":"0/20","commit_ts":"2026-11-30T12:00:00Z","after":{"a":"b"}} x`),
		[]byte(`{"v":1,"kind":"change","shard":0,"table":"t","op":"c","id":"1","lsn":"0/1","commit_lsn":"0/20","commit_ts":"2026-11-30T12:00:00Z","columns":[{"name":"a","type":"text","oid":25}],"after":{"a":"b"}`),
		[]byte(`{"v":1,"kind":"change","shard":0,"table":"t","op":"c","id":"1","lsn":"0/1","commit_lsn":"0/20","commit_ts":"2026-11-30T12:00:00Z","columns":[{"name":"a","type":"text","oid":-1}],"after":{"a":"b"}}`),
		[]byte(`{"v":1,"kind":"change","shard":0,"table":"t","op":"c","id":"1","lsn":"0/1","commit_lsn":"0/20","commit_ts":"2026-11-30T12:00:00Z","columns":[{"name":"a","type":"text","oid":25}],"after":{"a":"b"},"ſhard":5}`),
		[]byte(`{"v":3,"kind":"watermark","commit_lsn":"0/1","shard":1}`),
		[]byte(`{"v":1,"kind":"change","shard":0,"table":"t","op":"c","id":"1","lsn":"0/1","commit_lsn":"0/20","commit_ts":"2026-11-30T12:00:00Z","columns":[{"name":"a","type":"text","oid":25,"missing":"it's \"new\""},{"name":"b","type":"int","oid":23,"missing":null},{"name":"c","type":"int","oid":23,"missing":5}],"after":{"a":"b"}}`),
		[]byte(`{"v":1,"kind":"change","shard":0,"table":"t","op":"c","id":"1","lsn":"0/1","commit_lsn":"0/20","commit_ts":"2026-11-30T12:00:00Z","columns":[{"name":"a","type":"text","oid":25,"missing":""}],"after":{"a":"b"}}`),
		[]byte(`{"v":2,"kind":"change","shard":0,"table":"t","op":"s","commit_lsn":"0/20","commit_ts":"2026-11-30T12:00:00Z","partitions":2}`),
		[]byte(`{"v":2,"kind":"change","shard":0,"table":"t","op":"c","id":"1","lsn":"10000/0","commit_lsn":"0/20","commit_ts":"2026-11-30T12:00:00Z","after":{},"epoch":70000}`),
		[]byte(`null`), []byte(``), []byte(`{}`), []byte(`[]`), []byte(`{"v":1,"kind":"watermark","commit_lsn":"0/1","shard":-1}`),
	)
	return out
}

func TestDecoderMatchesEncodingJSON(t *testing.T) {
	var d Decoder
	for _, b := range decoderCorpus() {
		same(t, &d, b)
	}
	// Every prefix of a real envelope is handled the same (mostly errors).
	b := decoderCorpus()[0]
	for i := range b {
		same(t, &d, b[:i])
	}
}

// The column list is cached by bytes: a different list must not reuse it.
func TestDecoderColumnCache(t *testing.T) {
	var enc Encoder
	var d Decoder
	a := sample()
	b := sample()
	b.Columns = append([]Column(nil), a.Columns...)
	b.Columns[2].Type = "varchar(10)"
	for _, e := range []*Event{a, a, b, a} {
		got, err := d.Decode(enc.Append(nil, e))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Columns, e.Columns) {
			t.Fatalf("columns %+v, want %+v", got.Columns, e.Columns)
		}
	}
}

func FuzzDecoder(f *testing.F) {
	for _, b := range decoderCorpus() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var d Decoder
		same(t, &d, b)
		// Twice through one decoder: the column cache must not change the
		// answer.
		same(t, &d, b)
	})
}

func BenchmarkDecodeJSON(b *testing.B) {
	var enc Encoder
	in := enc.Append(nil, sample())
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		if _, err := Decode(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecoder(b *testing.B) {
	var enc Encoder
	in := enc.Append(nil, sample())
	var d Decoder
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		if _, err := d.Decode(in); err != nil {
			b.Fatal(err)
		}
	}
}

// lsnBytes, the decoder's allocation-free LSN parser, accepts only what
// ParseLSN accepts, with the same value.
func FuzzLSNBytes(f *testing.F) {
	for _, s := range []string{"0/3000148", "16/B374D848", "16/b374d848", "FFFFFFFF/FFFFFFFF", "0/0", "", "3000148", "0/",
		"/1", "1/2/3", "g/1", "100000000/0", "-1/0", "+1/0", "0x1/0", "1_0/0", " 1/0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := lsnBytes([]byte(s))
		want, err := ParseLSN(s)
		if ok && (err != nil || got != want) {
			t.Fatalf("lsnBytes(%q) = %v, ParseLSN = %v, %v", s, got, want, err)
		}
		if !ok && err == nil {
			t.Fatalf("lsnBytes(%q) refused what ParseLSN reads as %v", s, want)
		}
	})
}

// Events come from chunks and their strings from the record: an event
// stays as decoded while later records (valid or not) are decoded, and
// the column list, which the Decoder keeps, does not change with the
// record's bytes.
func TestDecoderEventsIndependent(t *testing.T) {
	var d Decoder
	corpus := decoderCorpus()
	type kept struct {
		got  *Event
		want *Event
	}
	var all []kept
	for round := 0; round < 3*eventChunk/len(corpus)+1; round++ {
		for _, b := range corpus {
			want, err := decodeReflect(b)
			got, gerr := d.Decode(b)
			if (err == nil) != (gerr == nil) {
				t.Fatalf("%q: %v / %v", b, err, gerr)
			}
			if err == nil {
				all = append(all, kept{got, want})
			}
		}
	}
	for i, k := range all {
		if !reflect.DeepEqual(k.got, k.want) {
			t.Fatalf("event %d changed after later decodes:\n%+v\nwant %+v", i, k.got, k.want)
		}
	}
	var enc Encoder
	b := enc.Append(nil, sample())
	ev, err := d.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]Column(nil), ev.Columns...)
	for i := range b {
		b[i] = 'x'
	}
	if !reflect.DeepEqual(ev.Columns, want) || !reflect.DeepEqual(d.cols, sample().Columns) {
		t.Fatalf("column list changed with the record's bytes: %+v", ev.Columns)
	}
}
