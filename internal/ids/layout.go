package ids

import (
	"fmt"
	"math"
	"time"
)

// Kind names the family of an id layout.
type Kind string

// Kinds of ids.
const (
	KindSnowflake  Kind = "snowflake"   // time + shard/worker + sequence bigint
	KindUUIDv7     Kind = "uuidv7"      // time-ordered uuid (RFC 9562)
	KindUUIDv4     Kind = "uuidv4"      // random uuid
	KindHashBigint Kind = "hash-bigint" // bigint placed by PostgreSQL hash partitioning
	KindHashUUID   Kind = "hash-uuid"   // uuid placed by PostgreSQL hash partitioning
	KindSerial     Kind = "serial"      // per-shard sequence value, not global
)

// Decoded is what an id says about its row. Fields a layout does not carry
// are zero; HasShard and Time.IsZero tell which are set.
type Decoded struct {
	Kind   Kind
	Layout string // name of the layout that decoded it
	// Time is the creation time (UTC, millisecond precision) for Snowflake
	// and UUIDv7 ids; zero otherwise.
	Time time.Time
	// Shard is the creating shard or worker (the whole node field of a
	// Snowflake id; the hash partition of a hash-sharded value). Valid only
	// when HasShard is set.
	Shard    int
	HasShard bool
	// Datacenter and Worker split Shard for layouts that define a split
	// (Twitter: 5 + 5 bits); both are zero otherwise.
	Datacenter int
	Worker     int
	// Sequence is the Snowflake per-millisecond sequence; zero otherwise.
	Sequence int64
	// Global reports whether the id alone identifies the row across all
	// shards. It is false for legacy serials, whose identity is (shard, id).
	Global bool
}

// Layout decodes the text form of one table's id column (PostgreSQL's text
// output: decimal for bigint, canonical 8-4-4-4-12 hex for uuid).
type Layout interface {
	// Name is the configuration name Lookup resolves to this layout.
	Name() string
	// Decode interprets id or returns a *DecodeError; it never guesses.
	Decode(id string) (Decoded, error)
}

// maxDecimalLen is the length of the longest int64 in decimal, with sign.
const maxDecimalLen = 20

// parseDecimal parses the canonical decimal text of an int64, as PostgreSQL
// prints a bigint: optional '-', digits, no leading zeros, no "-0", no '+',
// no spaces. Negative values are ErrRange unless allowNegative is set.
func parseDecimal(s string, allowNegative bool) (int64, error) {
	if len(s) == 0 {
		return 0, fmt.Errorf("empty: %w", ErrSyntax)
	}
	if len(s) > maxDecimalLen {
		return 0, fmt.Errorf("%d characters, longer than any bigint: %w", len(s), ErrSyntax)
	}
	neg := s[0] == '-'
	digits := s
	if neg {
		digits = s[1:]
	}
	if len(digits) == 0 {
		return 0, fmt.Errorf("sign without digits: %w", ErrSyntax)
	}
	if len(digits) > 1 && digits[0] == '0' {
		return 0, fmt.Errorf("leading zero: %w", ErrSyntax)
	}
	// Accumulate as a negative number so that math.MinInt64 parses.
	var v int64
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("non-digit at offset %d: %w", i, ErrSyntax)
		}
		d := int64(c - '0')
		if v < (math.MinInt64+d)/10 {
			return 0, fmt.Errorf("beyond bigint: %w", ErrRange)
		}
		v = v*10 - d
	}
	if neg {
		if v == 0 {
			return 0, fmt.Errorf("negative zero: %w", ErrSyntax)
		}
		if !allowNegative {
			return 0, fmt.Errorf("negative: %w", ErrRange)
		}
		return v, nil
	}
	if v == math.MinInt64 {
		return 0, fmt.Errorf("beyond bigint: %w", ErrRange)
	}
	return -v, nil
}
