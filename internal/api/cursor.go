package api

// Opaque pagination cursors.
//
// A cursor is the position of the last row of a page, plus what is needed
// to tell it belongs to this listing: the kind of listing, a fingerprint of
// the request's filters (a cursor reused with other filters is refused, not
// silently applied to them), and for search the window's lower bound fixed
// by the first page. It is binary, checksummed and base64url-encoded:
//
//	version 1 | kind 1 | filters 8 | time 8 | from 8 | shard 2 |
//	len 1 | table | len 1 | id | checksum 8 (first bytes of SHA-256 of the rest)
//
// The checksum catches corruption and truncation. It is not a signature:
// a client can build a valid cursor by hand, which gains it nothing — a
// cursor only says where to resume, under the filters of the request.

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"net/http"
	"strings"
	"time"
)

// Cursor kinds.
const (
	cursorSearch    byte = 'd'
	cursorAnomalies byte = 'a'
)

const (
	cursorVersion   = 1
	cursorFixedLen  = 1 + 1 + 8 + 8 + 8 + 2
	cursorSumLen    = 8
	maxCursorString = 128
	// maxCursorText bounds the encoded form (longer input is refused
	// before decoding).
	maxCursorText = 512
)

// cursor is a decoded pagination cursor.
type cursor struct {
	kind    byte
	filters [8]byte
	// time is the last row's time (search: the time column; anomalies:
	// first_seen), Unix seconds.
	time int64
	// from is the search window's lower bound, Unix seconds (0 otherwise).
	from  int64
	shard uint16
	table string // anomalies: the source table
	id    string
}

// errBadCursor is any cursor that does not decode.
var errBadCursor = errors.New("bad cursor")

// encode returns the cursor's text form.
func (c cursor) encode() string {
	b := make([]byte, 0, cursorFixedLen+2+len(c.table)+len(c.id)+cursorSumLen)
	b = append(b, cursorVersion, c.kind)
	b = append(b, c.filters[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(c.time))
	b = binary.BigEndian.AppendUint64(b, uint64(c.from))
	b = binary.BigEndian.AppendUint16(b, c.shard)
	b = append(b, byte(len(c.table)))
	b = append(b, c.table...)
	b = append(b, byte(len(c.id)))
	b = append(b, c.id...)
	sum := sha256.Sum256(b)
	b = append(b, sum[:cursorSumLen]...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeCursor parses a cursor's text form, refusing anything that is not
// exactly what encode produces (the strings are at most maxCursorString).
func decodeCursor(s string) (cursor, error) {
	var c cursor
	if s == "" || len(s) > maxCursorText {
		return c, errBadCursor
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil || len(b) < cursorFixedLen+2+cursorSumLen {
		return c, errBadCursor
	}
	body, sum := b[:len(b)-cursorSumLen], b[len(b)-cursorSumLen:]
	want := sha256.Sum256(body)
	if string(sum) != string(want[:cursorSumLen]) || body[0] != cursorVersion {
		return c, errBadCursor
	}
	c.kind = body[1]
	copy(c.filters[:], body[2:10])
	c.time = int64(binary.BigEndian.Uint64(body[10:18]))
	c.from = int64(binary.BigEndian.Uint64(body[18:26]))
	c.shard = binary.BigEndian.Uint16(body[26:28])
	rest := body[cursorFixedLen:]
	var ok bool
	if c.table, rest, ok = cutString(rest); !ok {
		return c, errBadCursor
	}
	if c.id, rest, ok = cutString(rest); !ok || len(rest) != 0 {
		return c, errBadCursor
	}
	return c, nil
}

// cutString reads a length-prefixed string.
func cutString(b []byte) (string, []byte, bool) {
	if len(b) < 1 {
		return "", nil, false
	}
	n := int(b[0])
	if n > maxCursorString || len(b) < 1+n {
		return "", nil, false
	}
	return string(b[1 : 1+n]), b[1+n:], true
}

// filterPrint fingerprints a listing's filters.
func filterPrint(parts ...string) [8]byte {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	var f [8]byte
	copy(f[:], sum[:8])
	return f
}

// cursorParam decodes the cursor= parameter of a listing of kind with
// the given filter fingerprint; nil when absent. Every failure is a 400
// bad_cursor.
func cursorParam(raw string, kind byte, filters [8]byte) (*cursor, error) {
	if raw == "" {
		return nil, nil
	}
	c, err := decodeCursor(raw)
	switch {
	case err != nil:
		return nil, &Error{Status: http.StatusBadRequest, Code: "bad_cursor",
			Message: "cursor is not one this API returned (corrupt or truncated); start again without it"}
	case c.kind != kind:
		return nil, &Error{Status: http.StatusBadRequest, Code: "bad_cursor",
			Message: "cursor belongs to another listing"}
	case c.filters != filters:
		return nil, &Error{Status: http.StatusBadRequest, Code: "bad_cursor",
			Message: "cursor was issued for other filters; repeat the filters of the first page, or start again without a cursor"}
	case c.time < minCursorTime || c.time > maxCursorTime || c.from < 0 || c.from > maxCursorTime:
		return nil, &Error{Status: http.StatusBadRequest, Code: "bad_cursor", Message: "cursor time out of range"}
	}
	return &c, nil
}

// Cursor times are ClickHouse DateTime values.
var (
	minCursorTime = int64(0)
	maxCursorTime = time.Date(2106, 2, 7, 0, 0, 0, 0, time.UTC).Unix()
)
