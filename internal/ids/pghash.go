package ids

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// This file reproduces, bit for bit, how PostgreSQL (11 and later; checked
// against 15) routes a row to a hash partition, which is how PgDog assigns
// bigint and uuid keys to shards:
//
//	rowHash  = hash_combine64(0, hashfn(value, HASH_PARTITION_SEED))
//	partition remainder = rowHash % modulus          (uint64 arithmetic)
//
// (compute_partition_hash_value in partbounds.c; satisfies_hash_partition
// returns rowHash % modulus == remainder). hashfn is hashint8extended for
// bigint and uuid_hash_extended for uuid; both end in hash_bytes_extended /
// hash_bytes_uint32_extended of src/common/hashfn.c, Bob Jenkins' lookup3
// with PostgreSQL's seed handling.
//
// PostgreSQL reads the hashed bytes as native-endian 32-bit words, so uuid
// hashes differ between little- and big-endian servers. We reproduce the
// little-endian result (x86-64, arm64: every platform PostgreSQL is commonly
// run on). Integer hashes do not depend on byte order.

// HashPartitionSeed is PostgreSQL's HASH_PARTITION_SEED (partition.h).
const HashPartitionSeed uint64 = 0x7A5B22367996DCFD

// hashCombineConst is the 64-bit constant of PostgreSQL's hash_combine64
// (src/include/common/hashfn.h).
const hashCombineConst uint64 = 0x49a0f4dd15e5a8e3

// jenkinsInit is lookup3's initial state constant before adding the length
// and PostgreSQL's 3923095.
const jenkinsInit uint32 = 0x9e3779b9 + 3923095

// jenkinsMix and jenkinsFinal are lookup3's mix() and final(), written out
// step by step as lookup3 writes them: each step is alike but for the words
// and the rotation, and a loop over them costs several times more on the
// loader's per-row routing (internal/loader/partition.go).
func jenkinsMix(a, b, c uint32) (uint32, uint32, uint32) {
	a -= c
	a ^= bits.RotateLeft32(c, 4)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 6)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 8)
	b += a
	a -= c
	a ^= bits.RotateLeft32(c, 16)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 19)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 4)
	b += a
	return a, b, c
}

func jenkinsFinal(a, b, c uint32) (uint32, uint32, uint32) {
	c ^= b
	c -= bits.RotateLeft32(b, 14)
	a ^= c
	a -= bits.RotateLeft32(c, 11)
	b ^= a
	b -= bits.RotateLeft32(a, 25)
	c ^= b
	c -= bits.RotateLeft32(b, 16)
	a ^= c
	a -= bits.RotateLeft32(c, 4)
	b ^= a
	b -= bits.RotateLeft32(a, 14)
	c ^= b
	c -= bits.RotateLeft32(b, 24)
	return a, b, c
}

// seedState is the initial state for hashing n bytes, perturbed by a
// non-zero 64-bit seed as PostgreSQL's *_extended hash functions do (seed
// zero leaves it alone, so that the 64-bit hash's low half equals the
// 32-bit hash).
func seedState(n uint32, seed uint64) (uint32, uint32, uint32) {
	a, b, c := jenkinsInit+n, jenkinsInit+n, jenkinsInit+n
	if seed == 0 {
		return a, b, c
	}
	a += uint32(seed >> 32)
	b += uint32(seed)
	return jenkinsMix(a, b, c)
}

// HashBytesExtended is PostgreSQL's hash_bytes_extended (hash_any_extended)
// on a little-endian server.
func HashBytesExtended(k []byte, seed uint64) uint64 {
	a, b, c := seedState(uint32(len(k)), seed)
	for len(k) >= 12 {
		a += binary.LittleEndian.Uint32(k[0:4])
		b += binary.LittleEndian.Uint32(k[4:8])
		c += binary.LittleEndian.Uint32(k[8:12])
		a, b, c = jenkinsMix(a, b, c)
		k = k[12:]
	}
	// The last 0..11 bytes, as the little-endian switch in hashfn.c adds
	// them: bytes 0-3 to a, 4-7 to b, 8-10 to c shifted up by one byte (the
	// lowest byte of c is "reserved for the length" in lookup3, though
	// PostgreSQL does not add the length there).
	for i, x := range k {
		shift := uint(i%4) * 8
		switch i / 4 {
		case 0:
			a += uint32(x) << shift
		case 1:
			b += uint32(x) << shift
		default:
			c += uint32(x) << (shift + 8)
		}
	}
	return jenkinsResult(a, b, c)
}

// HashUint32Extended is PostgreSQL's hash_bytes_uint32_extended, the hash
// of int4 (hashint4extended) and, after folding, of int8.
func HashUint32Extended(k uint32, seed uint64) uint64 {
	a, b, c := seedState(4, seed) // 4: sizeof(uint32)
	a += k
	return jenkinsResult(a, b, c)
}

// jenkinsResult is the 64-bit hash of the *_extended functions: final(),
// then b in the high half and c in the low.
func jenkinsResult(a, b, c uint32) uint64 {
	_, b, c = jenkinsFinal(a, b, c)
	return uint64(b)<<32 | uint64(c)
}

// HashInt8Extended is PostgreSQL's hashint8extended. It folds the high half
// into the low half so that an int8 holding an int4 value hashes exactly as
// that int4 does (cross-type hash joins depend on it): for negative values
// the complemented high half is zero, so the fold is a no-op too.
func HashInt8Extended(v int64, seed uint64) uint64 {
	lo := uint32(v)
	hi := uint32(v >> 32)
	if v >= 0 {
		lo ^= hi
	} else {
		lo ^= ^hi
	}
	return HashUint32Extended(lo, seed)
}

// HashUUIDExtended is PostgreSQL's uuid_hash_extended.
func HashUUIDExtended(u UUID, seed uint64) uint64 {
	return HashBytesExtended(u[:], seed)
}

// hashCombine64 is PostgreSQL's hash_combine64.
func hashCombine64(a, b uint64) uint64 {
	return a ^ (b + hashCombineConst + a<<54 + a>>7)
}

// RowHashInt8 is the 64-bit row hash PostgreSQL's partition routing computes
// for a table hash-partitioned on one bigint column holding v.
func RowHashInt8(v int64) uint64 {
	return hashCombine64(0, HashInt8Extended(v, HashPartitionSeed))
}

// RowHashUUID is the 64-bit row hash PostgreSQL's partition routing computes
// for a table hash-partitioned on one uuid column holding u.
func RowHashUUID(u UUID) uint64 {
	return hashCombine64(0, HashUUIDExtended(u, HashPartitionSeed))
}

// maxModulus bounds partition counts; PostgreSQL's own limit is INT_MAX.
const maxModulus = 1<<31 - 1

// PartitionInt8 returns the remainder of the partition (PgDog: the shard)
// that bigint v belongs to among modulus hash partitions, as
// satisfies_hash_partition(parent, modulus, remainder, v) would answer.
func PartitionInt8(v int64, modulus int) (int, error) {
	return remainder(RowHashInt8(v), modulus)
}

// PartitionUUID returns the remainder of the partition (PgDog: the shard)
// that uuid u belongs to among modulus hash partitions.
func PartitionUUID(u UUID, modulus int) (int, error) {
	return remainder(RowHashUUID(u), modulus)
}

// remainder is rowHash % modulus, for a modulus PostgreSQL accepts.
func remainder(rowHash uint64, modulus int) (int, error) {
	if modulus < 1 || modulus > maxModulus {
		return 0, fmt.Errorf("hash partition modulus %d: %w", modulus, ErrInvalidLayout)
	}
	return int(rowHash % uint64(modulus)), nil
}
