package api

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestCursorRoundTrip(t *testing.T) {
	for _, c := range []cursor{
		{kind: cursorSearch, filters: filterPrint("a"), time: 1790000000, from: 1760000000, shard: 3, id: "734197815705617408"},
		{kind: cursorSearch, time: 0, id: "0190a4e2-1c3b-7000-8000-000000000001"},
		{kind: cursorAnomalies, filters: filterPrint("b", "open"), time: maxCursorTime, table: "documents", id: "-5"},
		{kind: cursorAnomalies, shard: 65535, table: strings.Repeat("t", maxCursorString), id: strings.Repeat("9", maxCursorString)},
	} {
		text := c.encode()
		if strings.ContainsAny(text, "+/=") {
			t.Errorf("%+v: %q is not URL-safe", c, text)
		}
		got, err := decodeCursor(text)
		if err != nil || got != c {
			t.Errorf("round trip of %+v: %+v, %v", c, got, err)
		}
	}
}

// TestCursorTampering: any changed, truncated or extended cursor is
// refused.
func TestCursorTampering(t *testing.T) {
	c := cursor{kind: cursorSearch, filters: filterPrint("x"), time: 1790000000, from: 1760000000, shard: 2, id: "734197815705617408"}
	raw, err := base64.RawURLEncoding.DecodeString(c.encode())
	if err != nil {
		t.Fatal(err)
	}
	for i := range raw {
		for _, bit := range []byte{0x01, 0x80} {
			b := append([]byte(nil), raw...)
			b[i] ^= bit
			if _, err := decodeCursor(base64.RawURLEncoding.EncodeToString(b)); !errors.Is(err, errBadCursor) {
				t.Errorf("byte %d ^ %#x accepted", i, bit)
			}
		}
	}
	for n := range len(raw) {
		if _, err := decodeCursor(base64.RawURLEncoding.EncodeToString(raw[:n])); !errors.Is(err, errBadCursor) {
			t.Errorf("truncated to %d bytes accepted", n)
		}
	}
	text := c.encode()
	for _, bad := range []string{"", "!", text + "A", text + "=", strings.ToUpper(text), text[1:],
		base64.StdEncoding.EncodeToString(raw), strings.Repeat("A", maxCursorText+1)} {
		if _, err := decodeCursor(bad); !errors.Is(err, errBadCursor) {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestCursorParam(t *testing.T) {
	f := filterPrint("search", "documents", "", "", "", "")
	good := cursor{kind: cursorSearch, filters: f, time: 1790000000, from: 1760000000, id: "1"}.encode()
	for _, c := range []struct {
		name, raw string
		ok        bool
	}{
		{"absent", "", true},
		{"good", good, true},
		{"garbage", "not a cursor", false},
		{"other listing", cursor{kind: cursorAnomalies, filters: f, table: "documents", id: "1"}.encode(), false},
		{"other filters", cursor{kind: cursorSearch, filters: filterPrint("search", "documents", "7", "", "", ""), id: "1"}.encode(), false},
		{"negative time", cursor{kind: cursorSearch, filters: f, time: -1, id: "1"}.encode(), false},
		{"time past 2106", cursor{kind: cursorSearch, filters: f, time: maxCursorTime + 1, id: "1"}.encode(), false},
		{"negative from", cursor{kind: cursorSearch, filters: f, from: -1, id: "1"}.encode(), false},
	} {
		got, err := cursorParam(c.raw, cursorSearch, f)
		if c.ok {
			if err != nil || (c.raw == "") != (got == nil) {
				t.Errorf("%s: %v, %v", c.name, got, err)
			}
			continue
		}
		var e *Error
		if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Code != "bad_cursor" {
			t.Errorf("%s: error %v, want 400 bad_cursor", c.name, err)
		}
	}
}

// FuzzDecodeCursor: decoding never panics, and whatever decodes encodes
// back to the same text (there is one spelling of each cursor).
func FuzzDecodeCursor(f *testing.F) {
	f.Add(cursor{kind: cursorSearch, filters: filterPrint("x"), time: 1790000000, from: 1, shard: 2, id: "734197815705617408"}.encode())
	f.Add(cursor{kind: cursorAnomalies, table: "documents", id: "1"}.encode())
	f.Add("")
	f.Add("AQ")
	f.Add(strings.Repeat("_", 100))
	f.Fuzz(func(t *testing.T, s string) {
		c, err := decodeCursor(s)
		if err != nil {
			if !errors.Is(err, errBadCursor) {
				t.Fatalf("%q: error %v", s, err)
			}
			return
		}
		if back := c.encode(); back != s {
			t.Fatalf("%q decodes to %+v, which encodes to %q", s, c, back)
		}
		if len(c.table) > maxCursorString || len(c.id) > maxCursorString {
			t.Fatalf("%q: strings too long", s)
		}
	})
}
