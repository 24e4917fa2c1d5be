package chstore

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tributary/tributary/internal/envelope"
)

// TestMapColumn: enums are text, unconstrained numeric is its exact text
// unless the config chooses a Decimal, and an unmapped type names the
// column, its type and the config line that stores it.
func TestMapColumn(t *testing.T) {
	for _, tc := range []struct {
		col    envelope.Column
		chosen string
		want   string
	}{
		{envelope.Column{Name: "mood", Type: "public.mood", Enum: true}, "", "String"},
		{envelope.Column{Name: "moods", Type: "public.mood[]", Enum: true}, "", "String"},
		{envelope.Column{Name: "rate", Type: "numeric"}, "", "String"},
		{envelope.Column{Name: "big", Type: "numeric(50,10)"}, "", "String"},
		{envelope.Column{Name: "neg", Type: "numeric(5,-2)"}, "", "String"},
		{envelope.Column{Name: "rate", Type: "numeric"}, "Decimal(38, 18)", "Decimal(38, 18)"},
		{envelope.Column{Name: "amount", Type: "numeric(14,2)"}, "", "Decimal(14, 2)"},
		{envelope.Column{Name: "geom", Type: "public.geometry"}, "String", "String"},
		{envelope.Column{Name: "t", Type: "time(3) with time zone"}, "", "String"},
		{envelope.Column{Name: "iv", Type: "interval day to second(3)"}, "", "String"},
		{envelope.Column{Name: "c", Type: "bpchar"}, "", "String"},
		{envelope.Column{Name: "ts", Type: "timestamp(3) without time zone"}, "", "DateTime('UTC')"},
	} {
		ct, err := mapColumn("events", tc.col, tc.chosen)
		if err != nil || ct.ch != tc.want {
			t.Errorf("%s %s (chosen %q): %q, %v; want %s", tc.col.Name, tc.col.Type, tc.chosen, ct.ch, err, tc.want)
		}
	}

	_, err := mapColumn("events", envelope.Column{Name: "geom", Type: "public.geometry"}, "")
	want := `table events column geom: unmapped PostgreSQL type: "public.geometry"; to store its PostgreSQL text as it is, set "column_types": {"geom": "String"} on table events in the table config`
	if !errors.Is(err, ErrUnmappedType) || err.Error() != want {
		t.Errorf("unmapped type:\n got %v\nwant %s", err, want)
	}
	for _, bad := range []struct{ pg, chosen string }{
		{"text", "Decimal(10, 2)"}, {"numeric", "Decimal(39, 2)"}, {"numeric", "Decimal(4, 5)"}, {"numeric", "Float64"},
	} {
		_, err := mapColumn("events", envelope.Column{Name: "x", Type: bad.pg}, bad.chosen)
		if !errors.Is(err, ErrUnmappedType) || !strings.Contains(err.Error(), "column x ("+bad.pg+"): column_types") {
			t.Errorf("%s chosen as %s: %v, want a column_types error naming the column", bad.pg, bad.chosen, err)
		}
	}
}

// TestDecimalFit: a value is stored exactly or refused, never truncated
// (the driver drops extra digits silently).
func TestDecimalFit(t *testing.T) {
	ct := decimalType(6, 2)
	for _, ok := range []string{"9999.99", "-9999.99", "0.10", "1.5000000", "0", "1e2"} {
		if _, err := ct.convert(ok); err != nil {
			t.Errorf("Decimal(6, 2) %q: %v", ok, err)
		}
	}
	for _, bad := range []string{"10000", "-10000.00", "0.001", "1.005", "NaN", "Infinity", "1e4"} {
		if _, err := ct.convert(bad); err == nil {
			t.Errorf("Decimal(6, 2) %q: stored, want refused", bad)
		}
	}
	b := (&Table{Columns: []Column{{Name: "d", typ: ct}}}).NewBlock(1, time.Time{})
	if err := b.cols[0].parse(0, "0.001"); !errors.Is(err, errDoesNotFit) {
		t.Errorf("block parse of 0.001 into Decimal(6, 2): %v, want errDoesNotFit", err)
	}
}

// TestTypeDocsMatchMapping holds schema/clickhouse.md's type table to
// mapType: every PostgreSQL type a row lists maps to the row's ClickHouse
// type.
func TestTypeDocsMatchMapping(t *testing.T) {
	b, err := os.ReadFile("../../schema/clickhouse.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "## PostgreSQL → ClickHouse types")
	if !ok {
		t.Fatal("schema/clickhouse.md has no type table")
	}
	// The spelling format_type uses for the docs' short names.
	spelled := map[string]string{
		"varchar(n)": "character varying(10)", "char(n)": "character(3)", "bit(n)": "bit(3)",
		"bit varying(n)": "bit varying(5)", "time": "time without time zone", "timetz": "time with time zone",
		"timestamp": "timestamp without time zone", "timestamptz": "timestamp with time zone",
		"numeric(p,s), 1 ≤ p ≤ 38, 0 ≤ s ≤ p":                                "numeric(12,2)",
		"numeric (no declared precision), numeric(p,s) with p > 38 or s < 0": "numeric",
		"enum": "", "domain": "", "any array": "integer[]", "anything else": "",
	}
	rows := 0
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") || strings.TrimSpace(cells[1]) == "PostgreSQL" {
			continue
		}
		pgCell, chCell := strings.TrimSpace(cells[1]), strings.TrimSpace(cells[2])
		names := strings.Split(pgCell, ", ")
		if _, whole := spelled[pgCell]; whole {
			names = []string{pgCell}
		}
		for _, n := range names {
			pg := n
			if s, ok := spelled[n]; ok {
				pg = s
			}
			if pg == "" {
				continue // checked by TestMapColumn
			}
			ct, err := mapType(pg)
			if chCell == "Decimal(p,s)" {
				chCell = "Decimal(12, 2)"
			}
			if err != nil || ct.ch != chCell {
				t.Errorf("docs map %s (%s) to %s; mapType: %q, %v", n, pg, chCell, ct.ch, err)
			}
			rows++
		}
	}
	if rows < 40 {
		t.Errorf("checked %d types of the docs' table, want the whole table", rows)
	}
}

// TestTimestampMicros: a timestamp column keeps its microseconds in a
// column of their own, and a value outside DateTime's or Date's range is
// refused (the driver would wrap it), never stored as another time.
func TestTimestampMicros(t *testing.T) {
	tab, err := layout("ev", []string{"id"}, []envelope.Column{{Name: "id", Type: "bigint", Key: true},
		{Name: "at", Type: "timestamp with time zone"}, {Name: "day", Type: "date"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	us := tab.Index(MicrosColumn("at"))
	if us < 0 || tab.Columns[us].CHType() != "Nullable(UInt32)" {
		t.Fatalf("no microseconds column for at: %+v", tab.Columns)
	}
	b := tab.NewBlock(2, time.Now())
	if err := b.Set(0, &Row{Values: map[string]*string{"id": str("1"), "at": str("2026-11-30 12:00:00.123456+01"), "day": str("2026-11-30")}}); err != nil {
		t.Fatal(err)
	}
	if got := b.Value(0, "at").(time.Time); !got.Equal(time.Date(2026, 11, 30, 11, 0, 0, 123456000, time.UTC)) {
		t.Errorf("at = %v", got)
	}
	if got := b.Value(0, MicrosColumn("at")); got != uint32(123456) {
		t.Errorf("microseconds = %#v, want 123456", got)
	}
	if err := b.Set(1, &Row{Values: map[string]*string{"id": str("2"), "at": nil}}); err != nil || b.Value(1, MicrosColumn("at")) != nil {
		t.Errorf("NULL timestamp: %v, microseconds %#v, want NULL", err, b.Value(1, MicrosColumn("at")))
	}
	for _, bad := range []struct{ col, text string }{
		{"at", "1969-12-31 23:59:59.999999+00"}, {"at", "2106-02-07 06:28:16+00"}, {"at", "infinity"},
		{"day", "1969-12-31"}, {"day", "2149-06-07"},
	} {
		err := b.Set(1, &Row{Values: map[string]*string{"id": str("2"), bad.col: &bad.text}})
		var ce *ConvertError
		if !errors.As(err, &ce) || ce.Column != bad.col {
			t.Errorf("%s %q: %v, want refused", bad.col, bad.text, err)
		}
	}
	if _, err := layout("ev", []string{"id"}, []envelope.Column{{Name: "id", Type: "bigint", Key: true},
		{Name: "at", Type: "timestamp with time zone"}, {Name: "_us_at", Type: "text"}}, nil); !errors.Is(err, ErrIncompatibleSchema) {
		t.Errorf("a source column named like the microseconds column: %v, want refused", err)
	}
}

// TestMergeAddsMicros: a table created before timestamps kept their
// microseconds gets the microseconds column added (Nullable: older rows
// show whole seconds), and a real stored as Float64 keeps its column.
func TestMergeAddsMicros(t *testing.T) {
	have := &Table{Name: "ev", Key: []string{"id"}, IDColumn: "id", byName: map[string]int{"id": 0, "at": 1, "r": 2}, Columns: []Column{
		{Name: "id", Key: true, typ: colType{kind: kindInt64, ch: "Int64"}},
		{Name: "at", Nullable: true, typ: colType{kind: kindDateTime, ch: "DateTime('UTC')"}},
		{Name: "r", Nullable: true, typ: colType{kind: kindFloat64, ch: "Float64"}},
	}}
	want, err := layout("ev", []string{"id"}, []envelope.Column{{Name: "id", Type: "bigint", Key: true},
		{Name: "at", Type: "timestamp with time zone"}, {Name: "r", Type: "real"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	merged, added, err := merge(have, want)
	if err != nil {
		t.Fatal(err)
	}
	if len(added) != 1 || added[0].Name != "_us_at" || added[0].CHType() != "Nullable(UInt32)" {
		t.Fatalf("added %+v, want _us_at Nullable(UInt32)", added)
	}
	if c := merged.Columns[merged.Index("r")]; c.typ.ch != "Float64" {
		t.Errorf("real kept as %s, want its Float64 column", c.typ.ch)
	}
	if c := merged.Columns[merged.Index("_us_at")]; c.source() != "at" {
		t.Errorf("_us_at converts from %q, want at", c.source())
	}
}

// FuzzDecimalFit: a value a Decimal(P, S) column accepts is held exactly
// (its S-digit form is the same number, within P digits); one it refuses
// really does not fit.
func FuzzDecimalFit(f *testing.F) {
	for _, s := range []string{"9999.99", "0.001", "1.5000000", "-10000", "1e2", "1e-3", "NaN", "0"} {
		f.Add(s)
	}
	ct := decimalType(6, 2)
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ct.parseDecimal(s)
		if err != nil {
			return
		}
		fixed := d.StringFixed(2)
		back, perr := decimal.NewFromString(fixed)
		if perr != nil || !back.Equal(d) {
			t.Fatalf("%q accepted as %s, which is not the same number", s, fixed)
		}
		if digits := len(strings.TrimLeft(strings.Replace(strings.TrimPrefix(fixed, "-"), ".", "", 1), "0")); digits > 6 {
			t.Fatalf("%q accepted as %s: more than 6 digits", s, fixed)
		}
	})
}

// TestCompositeKeyLayout: a composite key's columns are the sort key,
// never Nullable; a key type whose text is not the same in PostgreSQL and
// ClickHouse is refused; a stored table sorted by another key stops the
// table with the fix.
func TestCompositeKeyLayout(t *testing.T) {
	cols := []envelope.Column{{Name: "tenant_id", Type: "text", Key: true}, {Name: "line_no", Type: "integer", Key: true}, {Name: "note", Type: "text"}}
	tab, err := layout("lines", []string{"tenant_id", "line_no"}, cols, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tab.IDColumn != "" || tab.keyList() != "`tenant_id`, `line_no`" || tab.keyTuple() != "(`tenant_id`, `line_no`)" ||
		tab.keyText() != "toString(`tenant_id`), toString(`line_no`)" {
		t.Errorf("id column %q, key list %s, tuple %s, text %s", tab.IDColumn, tab.keyList(), tab.keyTuple(), tab.keyText())
	}
	for _, c := range tab.Columns[:2] {
		if c.Nullable {
			t.Errorf("key column %s is Nullable", c.Name)
		}
	}
	vals, err := tab.KeyValues(`acme\, inc,7`)
	if err != nil || vals[0] != "acme, inc" || vals[1] != int32(7) {
		t.Errorf("KeyValues = %#v, %v", vals, err)
	}
	for _, bad := range []string{"acme", "acme,x", "a,1,2"} {
		var ce *ConvertError
		if _, err := tab.KeyValues(bad); !errors.As(err, &ce) {
			t.Errorf("KeyValues(%q) = %v, want a ConvertError", bad, err)
		}
	}
	one, err := layout("lines", []string{"line_no"}, cols, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := merge(one, tab); !errors.Is(err, ErrIncompatibleSchema) || !strings.Contains(err.Error(), "is sorted by (line_no) in ClickHouse, and the table config identifies its rows by (tenant_id, line_no)") {
		t.Errorf("merge of another key: %v", err)
	}
	ts := []envelope.Column{{Name: "at", Type: "timestamp with time zone", Key: true}, {Name: "n", Type: "bigint", Key: true}}
	if _, err := layout("ev", []string{"at", "n"}, ts, nil); !errors.Is(err, ErrIncompatibleSchema) {
		t.Errorf("timestamp key column: %v", err)
	}
}

// TestMergeKeepsSourceTypes: a table read back from ClickHouse (as a
// restarted loader first sees it) has no PostgreSQL types; merged with
// the source's columns, every column has the source's type (a partition's
// bound is matched by it), new columns included.
func TestMergeKeepsSourceTypes(t *testing.T) {
	dt, err := typeFromCH("DateTime('UTC')")
	if err != nil {
		t.Fatal(err)
	}
	i64, _ := typeFromCH("Int64")
	have := &Table{Name: "pay", IDColumn: "id", Key: []string{"id"}, byName: map[string]int{"id": 0, "paid_at": 1},
		Columns: []Column{{Name: "id", Key: true, typ: i64}, {Name: "paid_at", Nullable: true, typ: dt}}}
	want, err := layout("pay", []string{"id"}, []envelope.Column{{Name: "id", Type: "bigint", Key: true},
		{Name: "paid_at", Type: "timestamp with time zone"}, {Name: "region", Type: "text"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	merged, _, err := merge(have, want)
	if err != nil {
		t.Fatal(err)
	}
	for col, typ := range map[string]string{"id": "bigint", "paid_at": "timestamp with time zone", "region": "text"} {
		if got := merged.PGType(col); got != typ {
			t.Errorf("PGType(%s) = %q, want %q", col, got, typ)
		}
	}
}
