package query

import (
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/shopspring/decimal"
)

// fakeColumn is a result column of a given ClickHouse type.
type fakeColumn string

func (c fakeColumn) Name() string             { return "" }
func (c fakeColumn) Nullable() bool           { return false }
func (c fakeColumn) ScanType() reflect.Type   { return nil }
func (c fakeColumn) DatabaseTypeName() string { return string(c) }

// TestRenderRow: a row read from ClickHouse renders as PostgreSQL prints
// it: a timestamp with its microseconds column (which is not shown), a
// Date as a date, a real with float4's digits, a numeric with its scale.
func TestRenderRow(t *testing.T) {
	cols := []string{"at", "_us_at", "day", "r", "amount", "ok", "n", "big", "bare_at"}
	types := []driver.ColumnType{fakeColumn("Nullable(DateTime('UTC'))"), fakeColumn("Nullable(UInt32)"), fakeColumn("Nullable(Date)"),
		fakeColumn("Nullable(Float32)"), fakeColumn("Decimal(14, 2)"), fakeColumn("Nullable(UInt8)"), fakeColumn("Int32"),
		fakeColumn("Int64"), fakeColumn("DateTime('UTC')")}
	at := time.Date(2026, 11, 30, 12, 0, 5, 0, time.UTC)
	us := uint32(250000)
	day := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	r := float32(1234567)
	ok := uint8(1)
	vals := []any{&at, &us, &day, &r, decimal.New(15660, -2), &ok, int32(-7), int64(734197815705617408), at}
	dest := make([]any, len(vals))
	for i, v := range vals {
		p := reflect.New(reflect.TypeOf(v))
		p.Elem().Set(reflect.ValueOf(v))
		dest[i] = p.Interface()
	}
	plan := planRender(cols, types)
	got := map[string]any{}
	for i, c := range cols {
		if !plan.hidden[i] {
			got[c] = plan.value(i, dest)
		}
	}
	want := map[string]any{"at": "2026-11-30T12:00:05.25Z", "day": "2026-11-30", "r": json.Number("1.234567e+06"),
		"amount": "156.60", "ok": true, "n": int32(-7), "big": "734197815705617408", "bare_at": "2026-11-30T12:00:05Z"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("rendered %#v\nwant %#v", got, want)
	}
	var nullUS *uint32
	dest[1] = &nullUS // a row stored before the microseconds column: whole seconds
	if v := plan.value(0, dest); v != "2026-11-30T12:00:05Z" {
		t.Errorf("no microseconds: %v", v)
	}
}

// TestPGFloatText: PostgreSQL's own output for these values (psql, PostgreSQL 15,
// extra_float_digits 1); TestFloatTextMatchesPostgreSQL compares many more
// against a shard.
func TestPGFloatText(t *testing.T) {
	for _, c := range []struct {
		f    float64
		bits int
		want string
	}{
		{1234567, 32, "1.234567e+06"}, {123456.7, 32, "123456.7"}, {1234567, 64, "1234567"}, {1e15, 64, "1e+15"},
		{123456789012345.6, 64, "123456789012345.6"}, {0.0001, 64, "0.0001"}, {0.00001, 64, "1e-05"},
		{float64(float32(-1.06636704e+08)), 32, "-1.06636704e+08"}, // halfway for Go's shortest: one digit more
		{-3.2804725277386688e+16, 64, "-3.2804725277386688e+16"},
		{math.Copysign(0, -1), 64, "-0"}, {5e-324, 64, "5e-324"}, {math.MaxFloat64, 64, "1.7976931348623157e+308"},
		{float64(float32(0.1)), 32, "0.1"}, {math.SmallestNonzeroFloat32, 32, "1e-45"},
	} {
		if got := PGFloatText(c.f, c.bits); got != c.want {
			t.Errorf("PGFloatText(%v, %d) = %s, want %s", c.f, c.bits, got, c.want)
		}
	}
	for _, s := range []string{"NaN", "Infinity", "-Infinity"} {
		f, _ := strconv.ParseFloat(s, 64)
		if got := pgFloat(f, 64); got != s {
			t.Errorf("pgFloat(%s) = %#v, want the string %q", s, got, s)
		}
	}
}

// FuzzPGFloatText: the text always reads back as the same value and is a
// valid JSON number.
func FuzzPGFloatText(f *testing.F) {
	for _, v := range []uint64{0, 1, math.Float64bits(0.1), math.Float64bits(1e15), math.Float64bits(-1.06636704e+08)} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, bits uint64) {
		for _, size := range []int{32, 64} {
			v := math.Float64frombits(bits)
			if size == 32 {
				v = float64(math.Float32frombits(uint32(bits)))
			}
			if math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			s := PGFloatText(v, size)
			back, err := strconv.ParseFloat(s, size)
			if err != nil || back != v || math.Signbit(back) != math.Signbit(v) {
				t.Fatalf("PGFloatText(%v, %d) = %q reads back as %v, %v", v, size, s, back, err)
			}
			if !json.Valid([]byte(s)) {
				t.Fatalf("PGFloatText(%v, %d) = %q is not a JSON number", v, size, s)
			}
		}
	})
}
