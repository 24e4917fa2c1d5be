package loader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/dedupe"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/tables"
)

// fakeStore is ClickHouse as the apply steps see it: tables laid out by
// chstore.Layout, stored rows to read back, and a record of every insert
// and question. Methods no step should call are the embedded nil store's:
// calling one panics, which fails the test.
type fakeStore struct {
	store
	mu         sync.Mutex
	tables     map[string]*chstore.Table
	ensureErrs []error // returned by the next EnsureTable calls, in order
	ensures    int     // EnsureTable calls that succeeded
	stored     map[chstore.RowKey]chstore.Stored
	watermark  uint64   // WatermarkLSN's answer
	live       []string // the live rows EachLiveRow pages through
	current    []string // ids Current was asked for, in order
	inserts    [][]string
	multi      []string // ids MultiShardIDs was asked about
}

func newFakeStore() *fakeStore {
	return &fakeStore{tables: map[string]*chstore.Table{}}
}

func (f *fakeStore) EnsureTable(_ context.Context, name string, key []string, cols []envelope.Column) (*chstore.Table, error) {
	if len(f.ensureErrs) > 0 {
		err := f.ensureErrs[0]
		f.ensureErrs = f.ensureErrs[1:]
		if err != nil {
			return nil, err
		}
	}
	t, err := chstore.Layout(name, key, cols)
	if err != nil {
		return nil, err
	}
	f.ensures++
	f.tables[name] = t
	return t, nil
}

func (f *fakeStore) Lookup(_ context.Context, name string, _ []string) (*chstore.Table, error) {
	return f.tables[name], nil
}

func (f *fakeStore) Current(_ context.Context, _ *chstore.Table, keys []chstore.RowKey, _ []string) (map[chstore.RowKey]chstore.Stored, error) {
	out := map[chstore.RowKey]chstore.Stored{}
	for _, k := range keys {
		f.current = append(f.current, k.ID)
		if st, ok := f.stored[k]; ok {
			out[k] = st
		}
	}
	return out, nil
}

// InsertBlock records each row as "id=body" ("id deleted" for a tombstone).
func (f *fakeStore) InsertBlock(_ context.Context, b *chstore.Block, rows []int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var got []string
	for _, i := range rows {
		if b.Deleted(i) {
			got = append(got, fmt.Sprint(b.Value(i, "id"), " deleted"))
			continue
		}
		got = append(got, fmt.Sprint(b.Value(i, "id"), "=", b.Value(i, "body")))
	}
	f.inserts = append(f.inserts, got)
	return nil
}

func (f *fakeStore) WatermarkLSN(context.Context, string, int32, uint16) (uint64, error) {
	return f.watermark, nil
}

func (f *fakeStore) EachLiveRow(_ context.Context, _ *chstore.Table, _ uint16, _ uint64, cols []string, n int, fn func([]string, [][]*string) error) error {
	for i := 0; i < len(f.live); i += n {
		page := f.live[i:min(i+n, len(f.live))]
		if err := fn(page, make([][]*string, len(page))); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeStore) Anomalies(context.Context, string, []string, bool) (map[string]chstore.Anomaly, error) {
	return nil, nil
}

func (f *fakeStore) MultiShardIDs(_ context.Context, _ *chstore.Table, ids []string) ([]string, error) {
	f.multi = append(f.multi, ids...)
	return nil, nil // none ever on two shards: detection ends here
}

// notesConfig is a one-table config; notes are keyed by a bigint id.
func notesConfig(t testing.TB) *tables.Config {
	t.Helper()
	c, err := tables.Parse([]byte(`{"topic_prefix":"unit.","tables":[{"name":"notes","id_column":"id","id_layout":"serial"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// stepLoader is a loader over st with the image cache of cacheBytes.
func stepLoader(t testing.TB, st store, cacheBytes int64) *Loader {
	t.Helper()
	l := New(Config{Tables: notesConfig(t), ImageCacheBytes: cacheBytes},
		nil, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	l.store = st
	return l
}

var noteColumns = []envelope.Column{{Name: "id", Type: "bigint", Key: true}, {Name: "title", Type: "text"}, {Name: "body", Type: "text"}}

// note is a change of note id on shard 0 at LSN lsn (committed there too,
// offset lsn of partition 0): its body, or for an update leaving it
// unchanged-TOAST, "" and unchanged "body".
func note(op envelope.Op, id string, lsn uint64, body string, unchanged ...string) change {
	ev := &envelope.Event{Kind: envelope.KindChange, Table: "notes", Op: op, ID: id, LSN: envelope.LSN(lsn),
		CommitLSN: envelope.LSN(lsn), CommitTime: time.Unix(int64(lsn), 0), Columns: noteColumns, Unchanged: unchanged}
	title := "t" + id
	switch {
	case op == envelope.OpDelete:
		ev.Before = map[string]*string{"id": &id}
	case len(unchanged) > 0:
		ev.After = map[string]*string{"id": &id, "title": &title}
	default:
		ev.After = map[string]*string{"id": &id, "title": &title, "body": &body}
	}
	return change{rec: &kgo.Record{Topic: "unit.notes", Offset: int64(lsn)}, ev: ev}
}

// cut is a TRUNCATE of shard 0 at lsn, in a topic of one partition.
func cut(lsn uint64) change {
	ev := &envelope.Event{Kind: envelope.KindChange, Table: "notes", Op: envelope.OpTruncate, LSN: envelope.LSN(lsn),
		CommitLSN: envelope.LSN(lsn), CommitTime: time.Unix(int64(lsn), 0), Partitions: 1}
	return change{rec: &kgo.Record{Topic: "unit.notes", Offset: int64(lsn)}, ev: ev}
}

// withColumns is c with the column list cols.
func withColumns(c change, cols []envelope.Column) change {
	ev := *c.ev
	ev.Columns = cols
	c.ev = &ev
	return c
}

// withWatermark is c after a watermark of its shard at lsn in its batch.
func withWatermark(c change, lsn uint64) change {
	c.watermark = lsn
	return c
}

// TestApplyTable: what the apply steps write for a table's batches, which
// records they send to the dead-letter topic, which stored bases they
// read, and which ids the detection asks about.
func TestApplyTable(t *testing.T) {
	key := func(id string) chstore.RowKey { return chstore.RowKey{ID: id} }
	tests := []struct {
		name      string
		cacheOff  bool
		written   map[string]uint64 // id -> version the version map holds before
		stored    map[chstore.RowKey]chstore.Stored
		watermark uint64   // the stored watermark of the partition
		live      []string // the live rows a truncate finds
		cutPage   int      // rows a truncate tombstones at a time (0: the default)
		batches   [][]change
		inserts   [][]string // per InsertBlock call
		dead      []string   // "reason offset", in order
		current   []string   // ids whose base was read from ClickHouse
		detected  []string   // ids the detection asked about
	}{
		{name: "inserts, an update and a delete",
			batches: [][]change{{note(envelope.OpInsert, "1", 10, "a"), note(envelope.OpInsert, "2", 11, "b"),
				note(envelope.OpUpdate, "1", 12, "a2"), note(envelope.OpDelete, "2", 13, "")}},
			inserts:  [][]string{{"1=a", "2=b", "1=a2", "2 deleted"}},
			detected: []string{"1", "2"}},
		{name: "a redelivery of a written version is dropped",
			written: map[string]uint64{"1": 12},
			batches: [][]change{{note(envelope.OpInsert, "1", 10, "a"), note(envelope.OpUpdate, "1", 12, "a2"),
				note(envelope.OpUpdate, "1", 14, "a3")}},
			inserts: [][]string{{"1=a3"}}},
		{name: "unchanged TOAST filled from the batch's earlier image",
			batches: [][]change{{note(envelope.OpInsert, "1", 10, "big"), note(envelope.OpUpdate, "1", 12, "", "body")}},
			inserts: [][]string{{"1=big", "1=big"}}, detected: []string{"1"}},
		{name: "unchanged TOAST filled from the stored row",
			stored:  map[chstore.RowKey]chstore.Stored{key("1"): {Version: 5, Values: map[string]any{"body": "stored"}}},
			batches: [][]change{{note(envelope.OpUpdate, "1", 12, "", "body")}},
			inserts: [][]string{{"1=stored"}}, current: []string{"1"}},
		{name: "unchanged TOAST of a later batch filled from the image cache",
			batches: [][]change{{note(envelope.OpInsert, "1", 10, "big"), note(envelope.OpUpdate, "1", 12, "", "body")},
				{note(envelope.OpUpdate, "1", 14, "", "body")}},
			inserts: [][]string{{"1=big", "1=big"}, {"1=big"}}, detected: []string{"1"}},
		{name: "without the cache, the later batch reads the stored row",
			cacheOff: true,
			stored:   map[chstore.RowKey]chstore.Stored{key("1"): {Version: 5, Values: map[string]any{"body": "stored"}}},
			batches: [][]change{{note(envelope.OpInsert, "1", 10, "big"), note(envelope.OpUpdate, "1", 12, "", "body")},
				{note(envelope.OpUpdate, "1", 14, "", "body")}},
			inserts: [][]string{{"1=big", "1=big"}, {"1=stored"}}, current: []string{"1", "1"}, detected: []string{"1"}},
		{name: "the stored base is a tombstone",
			stored:  map[chstore.RowKey]chstore.Stored{key("1"): {Version: 5, Deleted: true}},
			batches: [][]change{{note(envelope.OpUpdate, "1", 12, "", "body")}},
			dead:    []string{"toast_without_base 12"}, current: []string{"1"}},
		{name: "a stored version as new as the update supersedes it (even after a watermark)",
			watermark: 11,
			stored:    map[chstore.RowKey]chstore.Stored{key("1"): {Version: 12, Deleted: true}},
			batches:   [][]change{{note(envelope.OpUpdate, "1", 12, "", "body")}},
			current:   []string{"1"}},
		{name: "no base, and no watermark proves the copy had ended: superseded",
			batches: [][]change{{note(envelope.OpUpdate, "1", 12, "", "body")}},
			current: []string{"1"}},
		{name: "no base after a stored watermark: a dead letter",
			watermark: 11,
			batches:   [][]change{{note(envelope.OpUpdate, "1", 12, "", "body")}},
			dead:      []string{"toast_without_base 12"}, current: []string{"1"}},
		{name: "no base after a watermark in the batch: a dead letter",
			batches: [][]change{{withWatermark(note(envelope.OpUpdate, "1", 12, "", "body"), 11)}},
			dead:    []string{"toast_without_base 12"}, current: []string{"1"}},
		{name: "a value that does not convert",
			batches: [][]change{{note(envelope.OpInsert, "x", 10, "a"), note(envelope.OpInsert, "2", 11, "b")}},
			inserts: [][]string{{"2=b"}}, dead: []string{"convert 10"}, detected: []string{"2"}},
		{name: "a truncate writes the rows before it, then tombstones the live ones",
			live: []string{"1", "3"},
			batches: [][]change{{note(envelope.OpInsert, "1", 10, "a"), cut(11), note(envelope.OpInsert, "2", 12, "b"),
				note(envelope.OpUpdate, "2", 13, "", "body")}},
			inserts: [][]string{{"1=a"}, {"1 deleted", "3 deleted"}, {"2=b", "2=b"}},
			current: []string{"2"}, detected: []string{"1", "2"}},
		{name: "a truncate tombstones a page at a time",
			live: []string{"1", "3", "5"}, cutPage: 2,
			batches:  [][]change{{note(envelope.OpInsert, "1", 10, "a"), cut(11)}},
			inserts:  [][]string{{"1=a"}, {"1 deleted", "3 deleted"}, {"5 deleted"}},
			detected: []string{"1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newFakeStore()
			st.stored, st.watermark, st.live = tt.stored, tt.watermark, tt.live
			cache := int64(0)
			if tt.cacheOff {
				cache = -1
			}
			l := stepLoader(t, st, cache)
			if tt.cutPage > 0 {
				l.cutPage = tt.cutPage
			}
			for id, v := range tt.written {
				l.versions.Written(dedupe.Key{Table: "notes", ID: id}, v)
			}
			var dead []string
			for _, batch := range tt.batches {
				res, err := l.applyTable(context.Background(), "notes", []string{"id"}, batch)
				if err != nil {
					t.Fatal(err)
				}
				if err := res.write(); err != nil {
					t.Fatal(err)
				}
				if err := res.detect(); err != nil {
					t.Fatal(err)
				}
				for _, d := range res.dead {
					dead = append(dead, fmt.Sprint(d.reason, " ", d.rec.Offset))
				}
			}
			if !slices.EqualFunc(st.inserts, tt.inserts, slices.Equal) {
				t.Errorf("inserts %q, want %q", st.inserts, tt.inserts)
			}
			if !slices.Equal(dead, tt.dead) {
				t.Errorf("dead letters %q, want %q", dead, tt.dead)
			}
			if !slices.Equal(st.current, tt.current) {
				t.Errorf("bases read for %q, want %q", st.current, tt.current)
			}
			if !slices.Equal(st.multi, tt.detected) {
				t.Errorf("detection asked about %q, want %q", st.multi, tt.detected)
			}
		})
	}
}

// TestEnsureSchema: the ensure step follows each new column list once,
// counts a schema change only when the table grows, retries what
// ClickHouse failed, and stops the table on a schema it cannot follow.
func TestEnsureSchema(t *testing.T) {
	wider := append(slices.Clip(noteColumns), envelope.Column{Name: "tags", Type: "text"})
	tests := []struct {
		name    string
		errs    []error
		batch   []change
		columns int // of the table returned (0: none)
		ensures int
		changes float64 // schema_changes_total
		stop    bool
	}{
		{name: "no column list: nothing ensured", batch: []change{cut(10)}},
		{name: "one column list, ensured once",
			batch:   []change{note(envelope.OpInsert, "1", 10, "a"), note(envelope.OpInsert, "2", 11, "b")},
			columns: 3, ensures: 1, changes: 1},
		{name: "a wider list later in the batch",
			batch:   []change{note(envelope.OpInsert, "1", 10, "a"), withColumns(note(envelope.OpInsert, "2", 11, "b"), wider)},
			columns: 4, ensures: 2, changes: 2},
		{name: "a failed ensure is retried",
			errs:    []error{errors.New("connection refused")},
			batch:   []change{note(envelope.OpInsert, "1", 10, "a")},
			columns: 3, ensures: 1, changes: 1},
		{name: "an incompatible schema stops the table",
			errs:  []error{fmt.Errorf("column body: %w", chstore.ErrIncompatibleSchema)},
			batch: []change{note(envelope.OpInsert, "1", 10, "a")}, stop: true},
		{name: "an unmapped type stops the table",
			errs:  []error{fmt.Errorf("column shape: %w", chstore.ErrUnmappedType)},
			batch: []change{note(envelope.OpInsert, "1", 10, "a")}, stop: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newFakeStore()
			st.ensureErrs = tt.errs
			l := stepLoader(t, st, 0)
			tab, err := l.ensureSchema(context.Background(), "notes", []string{"id"}, tt.batch)
			var stop *stopError
			if got := errors.As(err, &stop); got != tt.stop {
				t.Fatalf("error %v; want a stop: %v", err, tt.stop)
			}
			if tt.stop {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n := columnsOf(tab); n != tt.columns {
				t.Errorf("table of %d columns, want %d", n, tt.columns)
			}
			if st.ensures != tt.ensures {
				t.Errorf("%d ensures, want %d", st.ensures, tt.ensures)
			}
			if got := counterValue(t, l.m.schemaChanges.WithLabelValues("notes")); got != tt.changes {
				t.Errorf("schema_changes_total %v, want %v", got, tt.changes)
			}
		})
	}
}

// counterValue is c's value.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// columnsOf counts t's source columns (0 for nil).
func columnsOf(t *chstore.Table) int {
	if t == nil {
		return 0
	}
	return len(t.Columns)
}

// TestCutsOnly: a batch without any column list applies its truncates to
// the table ClickHouse has (none: nothing to remove) and sends every other
// change to the dead-letter topic.
func TestCutsOnly(t *testing.T) {
	tests := []struct {
		name   string
		exists bool
		batch  []change
		rest   int
		dead   []string
	}{
		{name: "no table yet", batch: []change{cut(10)}},
		{name: "a table", exists: true, batch: []change{cut(10), cut(11)}, rest: 2},
		{name: "a change without columns", exists: true,
			batch: []change{withColumns(note(envelope.OpInsert, "1", 10, "a"), nil), cut(11)}, rest: 1, dead: []string{"no_columns"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newFakeStore()
			if tt.exists {
				if _, err := st.EnsureTable(context.Background(), "notes", []string{"id"}, noteColumns); err != nil {
					t.Fatal(err)
				}
			}
			l := stepLoader(t, st, 0)
			tab, rest, dead, err := l.cutsOnly(context.Background(), "notes", []string{"id"}, tt.batch)
			if err != nil {
				t.Fatal(err)
			}
			if (tab != nil) != tt.exists || len(rest) != tt.rest {
				t.Errorf("table %v and %d changes left, want a table: %v and %d", tab != nil, len(rest), tt.exists, tt.rest)
			}
			var reasons []string
			for _, d := range dead {
				reasons = append(reasons, d.reason)
				if !strings.Contains(d.err.Error(), "notes") {
					t.Errorf("dead letter %q does not name the table", d.err)
				}
			}
			if !slices.Equal(reasons, tt.dead) {
				t.Errorf("dead letters %q, want %q", reasons, tt.dead)
			}
		})
	}
}

// TestSortBatch: a batch's records become changes by table (each with the
// newest watermark of its shard before it in its partition), watermarks
// to write, and dead letters; all but the changes are committed at once;
// records of a stopped table are left out.
func TestSortBatch(t *testing.T) {
	rec := func(topic string, partition int32, offset int64) *kgo.Record {
		return &kgo.Record{Topic: topic, Partition: partition, Offset: offset}
	}
	wm := func(shard int, lsn uint64) decodeResult {
		return decodeResult{ev: &envelope.Event{Kind: envelope.KindWatermark, Shard: shard, CommitLSN: envelope.LSN(lsn), Partitions: 2}}
	}
	chg := func(table string, shard int) decodeResult {
		return decodeResult{ev: &envelope.Event{Kind: envelope.KindChange, Table: table, Shard: shard, Op: envelope.OpInsert, ID: "1"}}
	}
	tests := []struct {
		name    string
		stopped bool
		recs    []*kgo.Record
		decoded []decodeResult
		changes []string // "offset:watermark"
		wms     int
		dead    []string // "reason offset"
		commit  []int64  // offsets committed without a table write
	}{
		{name: "changes and the watermarks before them, by partition and shard",
			recs: []*kgo.Record{rec("unit.notes", 0, 1), rec("unit.notes", 0, 2), rec("unit.notes", 1, 3), rec("unit.notes", 0, 4),
				rec("unit.notes", 0, 5), rec("unit.notes", 0, 6)},
			decoded: []decodeResult{chg("notes", 0), wm(0, 100), chg("notes", 0), chg("notes", 0), wm(0, 150), chg("notes", 1)},
			changes: []string{"1:0", "3:0", "4:100", "6:0"}, wms: 2, commit: []int64{2, 5}},
		{name: "records that cannot be applied",
			recs:    []*kgo.Record{rec("elsewhere", 0, 1), rec("unit.notes", 0, 2), rec("unit.notes", 0, 3), rec("unit.notes", 0, 4)},
			decoded: []decodeResult{chg("notes", 0), {err: errors.New("bad json")}, chg("other", 0), chg("notes", 0)},
			changes: []string{"4:0"}, dead: []string{"unknown_topic 1", "decode 2", "wrong_table 3"}, commit: []int64{1, 2, 3}},
		{name: "a stopped table's records are left out", stopped: true,
			recs:    []*kgo.Record{rec("unit.notes", 0, 1), rec("unit.notes", 0, 2), rec("unit.notes", 0, 3)},
			decoded: []decodeResult{chg("notes", 0), wm(0, 100), {err: errors.New("bad json")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := stepLoader(t, newFakeStore(), 0)
			if tt.stopped {
				l.stopped["notes"] = errors.New("stopped")
			}
			sb := l.sortBatch(tt.recs, tt.decoded)
			var changes, dead []string
			for _, c := range sb.byTable["notes"] {
				changes = append(changes, fmt.Sprint(c.rec.Offset, ":", c.watermark))
			}
			for _, d := range sb.dead {
				dead = append(dead, fmt.Sprint(d.reason, " ", d.rec.Offset))
			}
			var commit []int64
			for _, r := range sb.commit {
				commit = append(commit, r.Offset)
			}
			if !slices.Equal(changes, tt.changes) || len(sb.wms) != tt.wms || !slices.Equal(dead, tt.dead) || !slices.Equal(commit, tt.commit) {
				t.Errorf("changes %q, %d watermarks, dead %q, commit %v; want %q, %d, %q, %v",
					changes, len(sb.wms), dead, commit, tt.changes, tt.wms, tt.dead, tt.commit)
			}
		})
	}
}
