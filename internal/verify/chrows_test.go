package verify

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tributary/tributary/internal/query"
)

func TestIntIDType(t *testing.T) {
	for typ, want := range map[string]bool{"Int64": true, "UInt64": true, "Int32": true, "UInt8": true,
		"UUID": false, "String": false, "Nullable(Int64)": false, "Decimal(18, 0)": false} {
		if got := intIDType(typ); got != want {
			t.Errorf("intIDType(%q) = %v, want %v", typ, got, want)
		}
	}
}

// TestAsAPIJSON: a row read from ClickHouse ends up as the verifier reads
// the API's answers: 64-bit integers and decimals as strings, smaller
// integers as JSON numbers, decimals with their scale (PostgreSQL's text
// of numeric(p,2) 12.50), times in RFC 3339 UTC, NULL as nil.
func TestAsAPIJSON(t *testing.T) {
	var nilText *string
	in := map[string]any{}
	for k, v := range map[string]any{
		"id": int64(734197815705617408), "small": int16(-7), "amount": decimal.RequireFromString("12.50"),
		"at": time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600)), "body": nilText, "title": "t",
	} {
		in[k] = query.JSONValue(v)
	}
	got, err := asAPIJSON(in)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"id": "734197815705617408", "small": json.Number("-7"), "amount": "12.50",
		"at": "2026-01-02T02:04:05Z", "body": nil, "title": "t"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v\nwant %#v", got, want)
	}
}
