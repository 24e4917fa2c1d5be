package decode

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"time"

	"github.com/tributary/tributary/internal/envelope"
)

// reader reads the fields of one message. Every read checks the bounds
// first and fails with an *Error; no read indexes past len(buf). Field names
// are constants so that the success path does not allocate.
type reader struct {
	buf []byte
	off int
	typ MessageType
}

// fail builds the error for the field starting at off.
func (r *reader) fail(off int, field string, column int, err error, detail string) *Error {
	return &Error{Type: r.typ, Offset: off, Field: field, Column: column, Err: err, Detail: detail}
}

func (r *reader) truncated(field string, column int, need int) *Error {
	return r.fail(r.off, field, column, ErrTruncated,
		"need "+strconv.Itoa(need)+" bytes, have "+strconv.Itoa(len(r.buf)-r.off))
}

func (r *reader) u8(field string, column int) (byte, error) {
	if r.off >= len(r.buf) {
		return 0, r.truncated(field, column, 1)
	}
	v := r.buf[r.off]
	r.off++
	return v, nil
}

func (r *reader) u16(field string) (uint16, error) {
	if len(r.buf)-r.off < 2 {
		return 0, r.truncated(field, -1, 2)
	}
	v := binary.BigEndian.Uint16(r.buf[r.off:])
	r.off += 2
	return v, nil
}

func (r *reader) u32(field string, column int) (uint32, error) {
	if len(r.buf)-r.off < 4 {
		return 0, r.truncated(field, column, 4)
	}
	v := binary.BigEndian.Uint32(r.buf[r.off:])
	r.off += 4
	return v, nil
}

func (r *reader) u64(field string) (uint64, error) {
	if len(r.buf)-r.off < 8 {
		return 0, r.truncated(field, -1, 8)
	}
	v := binary.BigEndian.Uint64(r.buf[r.off:])
	r.off += 8
	return v, nil
}

func (r *reader) lsn(field string) (envelope.LSN, error) {
	v, err := r.u64(field)
	return envelope.LSN(v), err
}

// pgEpochUnix is 2000-01-01 00:00:00 UTC in Unix seconds.
const pgEpochUnix = 946684800

// timestamp reads a PostgreSQL timestamp: int64 microseconds since
// 2000-01-01 UTC. Every int64 maps to a valid time.Time (no Duration
// overflow); the infinity values are not expected in commit times and come
// out as dates about 292,000 years away.
func (r *reader) timestamp(field string) (time.Time, error) {
	v, err := r.u64(field)
	if err != nil {
		return time.Time{}, err
	}
	us := int64(v)
	sec, rem := us/1e6, us%1e6
	if rem < 0 {
		sec--
		rem += 1e6
	}
	return time.Unix(pgEpochUnix+sec, rem*1e3).UTC(), nil
}

// counted reads an Int32 byte count that must be >= 0 and fit in what is
// left of the message, and returns those bytes (aliasing buf).
func (r *reader) counted(lenField, dataField string, column int) ([]byte, error) {
	start := r.off
	n, err := r.u32(lenField, column)
	if err != nil {
		return nil, err
	}
	if int32(n) < 0 {
		return nil, r.fail(start, lenField, column, ErrMalformed, "negative length "+strconv.Itoa(int(int32(n))))
	}
	if int(n) > len(r.buf)-r.off {
		return nil, r.truncated(dataField, column, int(n))
	}
	b := r.buf[r.off : r.off+int(n) : r.off+int(n)]
	r.off += int(n)
	return b, nil
}

// str reads a NUL-terminated string. pgoutput strings are in the server
// encoding (UTF-8 for Tributary's sources); they are not validated here.
func (r *reader) str(field string, column int) (string, error) {
	i := bytes.IndexByte(r.buf[r.off:], 0)
	if i < 0 {
		return "", r.fail(r.off, field, column, ErrTruncated, "no NUL terminator")
	}
	s := string(r.buf[r.off : r.off+i])
	r.off += i + 1
	return s, nil
}

// end fails if bytes remain: they would mean the message is not what this
// parser thinks it is (for example a message of a later protocol version
// that adds a field).
func (r *reader) end() error {
	if r.off != len(r.buf) {
		return r.fail(r.off, "end of message", -1, ErrMalformed,
			strconv.Itoa(len(r.buf)-r.off)+" trailing bytes")
	}
	return nil
}

// quoteByte shows a byte as 'x' (0x78), or as 0x01 when not printable ASCII.
func quoteByte(b byte) string {
	const hex = "0123456789abcdef"
	h := "0x" + string(hex[b>>4]) + string(hex[b&15])
	if b < 0x20 || b > 0x7e {
		return h
	}
	return "'" + string(rune(b)) + "' (" + h + ")"
}
