package api

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/loadgen"
)

// TestWriterFillsEveryColumn: the row writer gives a value for every
// column the loader's DDL inserts (chstore.Layout of the bench's
// columns), the microseconds column of each timestamp included, one per
// row written, in the insert's order.
func TestWriterFillsEveryColumn(t *testing.T) {
	d, err := newAPIData(config{docs: 50, invoices: 50, shards: 2, bodyBytes: 40, seed: 1, batch: 1000})
	if err != nil {
		t.Fatal(err)
	}
	d.truth()
	for _, tc := range []struct {
		name  string
		table byte
	}{{"documents", tDocs}, {"invoices", tInvoices}} {
		cols := docColumns
		if tc.table == tInvoices {
			cols = invoiceColumns
		}
		tab, err := chstore.Layout(tc.name, []string{"id"}, cols)
		if err != nil {
			t.Fatal(err)
		}
		w := &rowWriter{d: d, tab: tab, table: tc.table, n: 50, batch: 1000}
		rows := 0
		for i := range 50 {
			u, del := d.updates(tc.table, i)
			last := u
			if del {
				last = u + 1
			}
			for k := 0; k <= last; k++ {
				if err := w.add(context.Background(), i, k); err != nil {
					t.Fatal(err)
				}
				rows++
			}
		}
		got, err := w.columns()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		names := tab.InsertColumns()
		if len(got) != len(names) {
			t.Fatalf("%s: %d columns, want the insert's %d", tc.name, len(got), len(names))
		}
		micros := 0
		for j, v := range got {
			if n := reflect.ValueOf(v).Len(); n != rows {
				t.Errorf("%s.%s: %d values, want one per row written (%d)", tc.name, names[j], n, rows)
			}
			if strings.HasPrefix(names[j], "_us_") {
				micros++
			}
		}
		if micros == 0 {
			t.Errorf("%s: no microseconds column among %v: the test no longer covers them", tc.name, names)
		}
	}
}

// TestMicrosValue: a timestamp's microseconds column holds the
// microseconds within its second, NULL for a NULL timestamp, for a
// column of values and for one row's value; other names are not one.
func TestMicrosValue(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)
	byName := map[string]any{"created_at": []*time.Time{&at, nil}, "finished_at": &at, "done_at": (*time.Time)(nil)}
	v, ok := microsValue(byName, chstore.MicrosColumn("created_at"))
	col, isCol := v.([]*uint32)
	if !ok || !isCol || len(col) != 2 || col[0] == nil || *col[0] != 123456 || col[1] != nil {
		t.Errorf("column: %v %v, want [123456 nil]", v, ok)
	}
	if v, ok := microsValue(byName, chstore.MicrosColumn("finished_at")); !ok || v.(*uint32) == nil || *v.(*uint32) != 123456 {
		t.Errorf("row: %v %v, want 123456", v, ok)
	}
	if v, ok := microsValue(byName, chstore.MicrosColumn("done_at")); !ok || v.(*uint32) != nil {
		t.Errorf("NULL timestamp: %v %v, want NULL", v, ok)
	}
	for _, name := range []string{"created_at", chstore.MicrosColumn("missing"), "title"} {
		if _, ok := microsValue(byName, name); ok {
			t.Errorf("%s: taken for a microseconds column of a generated timestamp", name)
		}
	}
}

// TestMoveRowFillsEveryColumn: one row of the move log has a value for
// every column of its insert, the timestamps' microseconds included.
func TestMoveRowFillsEveryColumn(t *testing.T) {
	tab, err := chstore.Layout("document_moves", []string{"move_id"}, loadgen.MoveLogColumns)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	vals := map[string]any{"move_id": "m", "document_id": ptr(int64(1)), "from_workspace": ptr(int64(2)), "to_workspace": ptr(int64(2)),
		"from_shard": ptr(int32(0)), "to_shard": ptr(int32(1)), "state": ptr("done"), "started_at": &at, "finished_at": (*time.Time)(nil),
		"_shard": uint16(0), "_version": uint64(1), "_deleted": uint8(0), "_commit_lsn": uint64(1), "_commit_ts": at, "_loaded_at": at}
	row, err := valuesOf(tab, vals)
	if err != nil {
		t.Fatal(err)
	}
	if len(row) != len(tab.InsertColumns()) {
		t.Errorf("%d values for the %d columns %v", len(row), len(tab.InsertColumns()), tab.InsertColumns())
	}
	delete(vals, "state")
	if _, err := valuesOf(tab, vals); err == nil || !strings.Contains(err.Error(), "column state") {
		t.Errorf("a column without values: %v, want an error naming it", err)
	}
}
