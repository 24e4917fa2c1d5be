// Package ids decodes (and, where the layout allows, encodes) the primary-key
// values of Tributary's source tables into what they say about a row: when it
// was created, which shard or worker created it, and whether the id alone
// identifies the row across the whole cluster.
//
// Supported layouts (see schema/ids.md; Lookup resolves configured names):
//
//   - Snowflake bigints with a configurable epoch and bit widths: "seed000"
//     (Tributary's own tributary.next_id()), "quickcart", "twitter",
//     "instagram".
//   - UUIDv7 (48-bit Unix ms timestamp) and UUIDv4 (no structure).
//   - PgDog-style hash-sharded bigints and uuids: the shard of a value is its
//     PostgreSQL hash partition, computed bit-exactly as PostgreSQL 15's
//     partition routing and satisfies_hash_partition do (see pghash.go).
//   - Legacy per-shard serials, which are not global: the identity of a row
//     is (shard, id) and the shard comes from where the row was read.
//
// Decoders never guess: malformed or out-of-range input is refused with a
// *DecodeError wrapping one of the sentinel errors (ErrSyntax, ErrRange,
// ErrShard, ErrVersion), so callers branch with errors.Is.
//
// Generator issues Snowflake ids in-process; it is safe for concurrent use
// and refuses to issue ids while the clock is behind the last issued id.
package ids
