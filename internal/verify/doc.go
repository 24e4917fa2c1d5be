// Package verify checks the whole pipeline end to end: it computes the
// ground truth by scatter-gather over the source shards and compares it with
// what the HTTP API answers, row by row and column by column.
//
// It is a test tool, meant to run after traffic stopped. While a source
// keeps changing, rows legitimately differ for a moment; the verifier waits
// until the API's watermarks pass each shard's current WAL position before
// comparing, and re-checks every difference once after waiting again, but it
// cannot tell a lasting difference from one that keeps being re-made.
//
// # What is checked
//
//  1. Positions: each shard's pg_current_wal_lsn() is read, then
//     GET /v1/shards is polled until every shard is complete with a
//     commit_lsn at or past it (bounded by Config.Wait). A shard that does
//     not get there is a KindLagging difference; the comparison still runs.
//
//  2. Rows: for every configured table, every live id on every shard (or a
//     random sample of Config.Sample ids per shard when there are more) is
//     compared with its copies. A random Config.APISample of each shard's
//     ids is looked up with GET /v1/tables/{table}/rows/{id}; the copies
//     of the others are read from ClickHouse in bulk, 500 ids a query,
//     with the API's by-id read (FINAL, the id in PREWHERE, tombstones
//     filtered) and turned into the JSON the API writes (chrows.go) —
//     because every API lookup costs ClickHouse a merge of one granule per
//     part, and one by one they are the whole run's time. The copies must
//     be exactly one per shard where the id is live at the source
//     (KindMissing, KindExtra, KindWrongShard), and each copy's row must
//     equal the source row column by column (KindWrongValue). A difference
//     found in the bulk read is looked up through the API before it is
//     reported (the re-check below), so every reported difference is the
//     API's. Tables whose ids are not integers go through the API only.
//
//  3. Counts: per table and shard, live rows at the source against
//     `SELECT _shard, count() FROM t FINAL WHERE _deleted = 0` in ClickHouse
//     (KindCountMismatch). Rows the API returns that no shard has cannot
//     be found from the source's ids, so when a shard's ids were all read
//     (no sampling) its live ids in ClickHouse are listed as well, and
//     each one the shard does not have is looked up like any other id and
//     reported as KindExtra — also when a missing row on the same shard
//     makes the counts agree. With sampling, only the counts see them.
//
//  4. Moves (when the table config has a `moves` section): from every
//     shard's move log and where each moved document is live, a document
//     whose newest move is in progress must be shown once by
//     GET /v1/documents/{id} — the source's copy while it is live, else the
//     target's — with that move (log shard and move id: a move is
//     identified by both) and no duplicate flag (KindMoveShown); the stuck
//     moves (the document's newest, in progress since before the cutoff)
//     and lost ones (the document's newest, done before the cutoff, live on
//     no shard) that exist must be exactly
//     what GET /v1/anomalies/moves lists (KindMoveAnomaly). The cutoff is
//     the one the listing states (now minus the grace period, whole
//     seconds). A document deleted at its target after it arrived looks
//     lost at the source; ClickHouse's delete tombstone on the target tells
//     the two apart (moves_compare.go).
//
// Every id with a difference and every count mismatch is checked once more
// after waiting for fresh positions; only what still differs is reported
// (the move checks are run again as a whole).
//
// # Normalization
//
// Source values are read as PostgreSQL text (what pgoutput sends the
// reader: each type's output function). The API's JSON values are what
// internal/query writes: each value's PostgreSQL text in the JSON type that
// carries it (schema/clickhouse.md, "Values as PostgreSQL has them"). The
// two are compared exactly, per column, by the ClickHouse type the loader
// maps the PostgreSQL type to (a domain as its base type); the mapping here
// is written independently of the loader's, on purpose:
//
//   - smallint, integer: the same digits, as a JSON number; bigint: the
//     same digits, as a string.
//   - numeric(p,s): the same text, with its s fractional digits ("12.50",
//     never "12.5").
//   - numeric without a Decimal-sized declaration: the same text (stored as
//     String), or, for a Decimal chosen in the table config, the same value.
//   - real, double precision: the same digits as a JSON number (PostgreSQL's
//     shortest form); NaN, Infinity and -Infinity as those strings.
//   - boolean: t/f against JSON true/false.
//   - date: the same "YYYY-MM-DD".
//   - timestamp, timestamptz: the same instant in RFC 3339 UTC with the
//     same fractional digits ("2026-11-30T12:00:00.25Z"): the loader keeps
//     the microseconds beside the DateTime's seconds.
//   - uuid: case-insensitive.
//   - everything else (text, char(n), varchar, json, jsonb, bytea, arrays,
//     enums, interval, ...): the PostgreSQL text byte for byte, since that
//     is what is stored.
//   - NULL equals only JSON null; an empty string is not NULL.
//
// The JSON type is part of the API's contract and is checked as well: a
// bigint or a decimal written as a JSON number (which most JSON readers
// round through float64) is a difference even when the digits agree.
//
// Columns the API returns that the source table no longer has (a dropped
// column stays in ClickHouse) are ignored; a source column absent from the
// API's row is a difference. A source value that cannot be represented in
// its ClickHouse type (a date before 1970, 'infinity', a NaN in a
// numeric(p,s)) cannot be
// equal to anything the API returns and is reported with the reason.
package verify
