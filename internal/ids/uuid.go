package ids

import (
	"encoding/hex"
	"fmt"
	"time"
)

// UUID is a uuid in network byte order, as PostgreSQL stores it.
type UUID [16]byte

// uuidTextLen is the length of the canonical 8-4-4-4-12 text form.
const uuidTextLen = 36

// ParseUUID parses the canonical text form PostgreSQL prints
// (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, hex digits in either case). Other
// spellings PostgreSQL's input accepts (braces, no hyphens) are refused:
// decoders see PostgreSQL's output, and anything else is not understood.
func ParseUUID(s string) (UUID, error) {
	var u UUID
	if len(s) != uuidTextLen {
		return u, fmt.Errorf("uuid text of %d characters, want %d: %w", len(s), uuidTextLen, ErrSyntax)
	}
	if s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, fmt.Errorf("uuid hyphens misplaced: %w", ErrSyntax)
	}
	// Offsets of the hex pairs in the text, one per byte.
	j := 0
	for _, g := range [...]struct{ start, bytes int }{{0, 4}, {9, 2}, {14, 2}, {19, 2}, {24, 6}} {
		for k := 0; k < g.bytes; k++ {
			i := g.start + 2*k
			hi, ok1 := fromHex(s[i])
			lo, ok2 := fromHex(s[i+1])
			if !ok1 || !ok2 {
				return u, fmt.Errorf("uuid non-hex character near offset %d: %w", i, ErrSyntax)
			}
			u[j] = hi<<4 | lo
			j++
		}
	}
	return u, nil
}

func fromHex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// String returns the canonical lowercase text form.
func (u UUID) String() string {
	var b [uuidTextLen]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}

// Version is the RFC 9562 version nibble.
func (u UUID) Version() int { return int(u[6] >> 4) }

// IsRFC9562 reports whether the variant bits are 10, the RFC 9562 variant
// (the only one for which Version is meaningful).
func (u UUID) IsRFC9562() bool { return u[8]&0xc0 == 0x80 }

// maxUUIDv7Milli is the largest 48-bit timestamp.
const maxUUIDv7Milli = 1<<48 - 1

// NewUUIDv7 builds a version-7 uuid from a Unix millisecond timestamp and
// 10 bytes of caller-chosen randomness (only 74 of their bits are used:
// version and variant overwrite the rest).
func NewUUIDv7(unixMilli int64, random [10]byte) (UUID, error) {
	var u UUID
	if unixMilli < 0 || unixMilli > maxUUIDv7Milli {
		return u, fmt.Errorf("uuidv7 time %d ms outside 48 bits: %w", unixMilli, ErrRange)
	}
	for i := 0; i < 6; i++ {
		u[i] = byte(unixMilli >> (8 * (5 - i)))
	}
	copy(u[6:], random[:])
	u[6] = 0x70 | u[6]&0x0f
	u[8] = 0x80 | u[8]&0x3f
	return u, nil
}

// UnixMilli returns the 48-bit timestamp of a version-7 uuid. It does not
// check the version; UUIDv7.Decode does.
func (u UUID) UnixMilli() int64 {
	var ms int64
	for i := 0; i < 6; i++ {
		ms = ms<<8 | int64(u[i])
	}
	return ms
}

// UUIDv7 is the layout of time-ordered uuids: it refuses any other version
// or variant, since a v4's leading bits would decode to a meaningless time.
type UUIDv7 struct{}

// Name implements Layout.
func (UUIDv7) Name() string { return "uuidv7" }

// Decode implements Layout.
func (l UUIDv7) Decode(id string) (Decoded, error) {
	u, err := parseVersion(id, 7)
	if err != nil {
		return Decoded{}, decodeErr(l.Name(), id, err)
	}
	return Decoded{
		Kind:   KindUUIDv7,
		Layout: l.Name(),
		Time:   time.UnixMilli(u.UnixMilli()).UTC(),
		Global: true,
	}, nil
}

// UUIDv4 is the layout of random uuids; they carry no time and no shard.
type UUIDv4 struct{}

// Name implements Layout.
func (UUIDv4) Name() string { return "uuidv4" }

// Decode implements Layout.
func (l UUIDv4) Decode(id string) (Decoded, error) {
	if _, err := parseVersion(id, 4); err != nil {
		return Decoded{}, decodeErr(l.Name(), id, err)
	}
	return Decoded{Kind: KindUUIDv4, Layout: l.Name(), Global: true}, nil
}

func parseVersion(id string, version int) (UUID, error) {
	u, err := ParseUUID(id)
	if err != nil {
		return u, err
	}
	if !u.IsRFC9562() {
		return u, fmt.Errorf("variant bits %02b, want 10: %w", u[8]>>6, ErrVersion)
	}
	if v := u.Version(); v != version {
		return u, fmt.Errorf("version %d, want %d: %w", v, version, ErrVersion)
	}
	return u, nil
}
