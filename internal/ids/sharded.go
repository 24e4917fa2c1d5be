package ids

import (
	"fmt"
	"strconv"
)

// HashBigint is the layout of PgDog-style hash-sharded bigints: the value is
// generated on the shard whose PostgreSQL hash partition (of Modulus) it
// falls in, so the shard is computed from the value. It carries no time.
type HashBigint struct {
	Modulus int // number of shards; must be >= 1
}

// Name implements Layout.
func (l HashBigint) Name() string { return "pgdog-hash-bigint:" + strconv.Itoa(l.Modulus) }

// Decode implements Layout. Any bigint, negative included, has a partition.
func (l HashBigint) Decode(id string) (Decoded, error) {
	v, err := parseDecimal(id, true)
	if err != nil {
		return Decoded{}, decodeErr(l.Name(), id, err)
	}
	shard, err := PartitionInt8(v, l.Modulus)
	if err != nil {
		return Decoded{}, decodeErr(l.Name(), id, err)
	}
	return Decoded{Kind: KindHashBigint, Layout: l.Name(), Shard: shard, HasShard: true, Global: true}, nil
}

// HashUUID is the layout of PgDog-style hash-sharded uuids (any version):
// the shard is the value's PostgreSQL hash partition among Modulus.
type HashUUID struct {
	Modulus int // number of shards; must be >= 1
}

// Name implements Layout.
func (l HashUUID) Name() string { return "pgdog-hash-uuid:" + strconv.Itoa(l.Modulus) }

// Decode implements Layout.
func (l HashUUID) Decode(id string) (Decoded, error) {
	u, err := ParseUUID(id)
	if err != nil {
		return Decoded{}, decodeErr(l.Name(), id, err)
	}
	shard, err := PartitionUUID(u, l.Modulus)
	if err != nil {
		return Decoded{}, decodeErr(l.Name(), id, err)
	}
	return Decoded{Kind: KindHashUUID, Layout: l.Name(), Shard: shard, HasShard: true, Global: true}, nil
}

// Serial is the layout of legacy per-shard sequences (serial, bigserial,
// identity columns). The value says nothing about its shard and repeats
// across shards: a row's identity is (shard it was read from, id), and
// Decoded.Global is false.
type Serial struct{}

// Name implements Layout.
func (Serial) Name() string { return "serial" }

// Decode implements Layout. Sequences issue non-negative values here; a
// negative one is refused as not understood.
func (l Serial) Decode(id string) (Decoded, error) {
	if _, err := parseDecimal(id, false); err != nil {
		return Decoded{}, decodeErr(l.Name(), id, err)
	}
	return Decoded{Kind: KindSerial, Layout: l.Name()}, nil
}

// checkModulus validates a shard count from configuration.
func checkModulus(n int) error {
	if n < 1 || n > maxModulus {
		return fmt.Errorf("shard count %d: %w", n, ErrInvalidLayout)
	}
	return nil
}
