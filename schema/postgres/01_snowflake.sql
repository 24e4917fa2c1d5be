-- 01_snowflake.sql: per-shard Snowflake id generator (layout "seed000").
--
-- Idempotent: safe to apply again on every stack start. After applying, the
-- stack inserts this shard's row:
--   INSERT INTO tributary.shard_config (shard_id, shard_count) VALUES ($1, $2);
--
-- Id layout (seed000, schema/ids.md), most significant bit first:
--   1 bit   zero: ids are positive bigints
--   40 bits milliseconds since 2024-01-01T00:00:00Z. The published layout calls this a
--           41-bit field, but 41+13+10 = 64 bits, so its top bit is the
--           bigint sign bit; next_id() refuses to issue negative ids, which
--           makes 2058-11-03T19:53:47.775Z the last usable millisecond.
--   13 bits shard id (0..8191), from tributary.shard_config
--   10 bits sequence within the millisecond (0..1023)
--
-- How next_id() works
--
-- The state is one sequence, tributary.id_seq, whose value v is the last
-- issued (ms, seq) pair packed as ms << 10 | seq. A sequence is the right
-- store: nextval/setval are not undone when the calling transaction rolls
-- back (a rolled-back transaction cannot make an id be issued twice), they
-- are visible to all sessions at once, and the value survives restarts.
--
--   1. Under a session-level advisory lock, held for the few microseconds of
--      this step only (never until commit, so long transactions do not
--      serialize each other): read the clock (clock_timestamp(), ms since the
--      epoch) as now; v := nextval(id_seq); if v's ms part is behind now,
--      v := now << 10 and setval(id_seq, v) so that the next call continues
--      from there. setval only ever moves the sequence forward, because every
--      nextval and setval happens under the lock.
--   2. Outside the lock: if v's ms part is ahead of now (more than 1024 ids in
--      one ms moved it to the next ms, or the clock stepped backwards), sleep
--      until the clock reaches it, so no id carries a time later than the
--      moment it is returned. If that is more than 2 s away the call fails
--      with SQLSTATE TR001 ("clock moved backwards") rather than stall.
--      A clock outside the 40-bit range fails with TR003; a missing
--      shard_config row with TR002.
--   3. id := (ms << 23) | (shard_id << 10) | seq, with ms, seq from v.
--
-- Guarantees on one shard: ids are unique, and strictly increasing in the
-- order the calls took the lock (so a session's successive calls increase),
-- across all sessions, rollbacks, clock steps backwards and restarts. An
-- id's time is between the clock reading taken under the lock and the
-- return of the call. Across shards, uniqueness rests on distinct shard_id
-- values (the stack assigns them). Throughput is at most 1024 ids per ms per
-- shard; beyond that calls wait. One PostgreSQL caveat: after a crash, a
-- sequence can restart below values handed to transactions that never
-- committed; the clock floor of step 1 still puts new ids above them unless
-- the clock also went backwards across the crash by more than the downtime.
--
-- The advisory lock key 8390884927342928242 is the bigint of the ASCII bytes
-- "tributar"; applications must not use it.

CREATE SCHEMA IF NOT EXISTS tributary;

CREATE TABLE IF NOT EXISTS tributary.shard_config (
    -- singleton is the primary key and can only be true: at most one row.
    singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    shard_id    int NOT NULL,
    shard_count int NOT NULL,
    CONSTRAINT shard_config_count_range CHECK (shard_count BETWEEN 1 AND 8192),
    CONSTRAINT shard_config_id_range CHECK (shard_id >= 0 AND shard_id < shard_count)
);

COMMENT ON TABLE tributary.shard_config IS
    'This shard''s identity (exactly one row); read by tributary.next_id().';

CREATE SEQUENCE IF NOT EXISTS tributary.id_seq
    AS bigint MINVALUE 0 START WITH 0 CACHE 1 NO CYCLE;

COMMENT ON SEQUENCE tributary.id_seq IS
    'State of tributary.next_id(): last issued (ms since 2024-01-01) << 10 | seq. Do not call nextval on it directly.';

CREATE OR REPLACE FUNCTION tributary.next_id() RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE AS $$
DECLARE
    epoch_ms   CONSTANT bigint := 1704067200000;  -- 2024-01-01T00:00:00Z
    max_ms     CONSTANT bigint := (1::bigint << 40) - 1;  -- 41st bit is the sign bit
    max_behind CONSTANT bigint := 2000;           -- ms we wait for a lagging clock
    lock_key   CONSTANT bigint := 8390884927342928242;
    shard      int;
    now_ms     bigint;
    v          bigint;
    ms         bigint;
BEGIN
    SELECT c.shard_id INTO shard FROM tributary.shard_config c;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'tributary.next_id: tributary.shard_config has no row'
            USING ERRCODE = 'TR002';
    END IF;

    -- Critical section: only the read-modify-write of id_seq. Nothing in it
    -- waits, so the lock is held for microseconds.
    PERFORM pg_advisory_lock(lock_key);
    BEGIN
        now_ms := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - epoch_ms;
        v := nextval('tributary.id_seq');
        IF (v >> 10) < now_ms THEN
            v := now_ms << 10;
            PERFORM setval('tributary.id_seq', v, true);  -- next nextval returns v+1
        END IF;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        -- The lock is session-level: release it on every error path too.
        PERFORM pg_advisory_unlock(lock_key);
        RAISE;
    END;
    PERFORM pg_advisory_unlock(lock_key);

    -- v is now reserved for this call alone. Checks and waits happen outside
    -- the lock; an error or cancel here only leaves a gap.
    ms := v >> 10;
    IF now_ms < 0 OR ms > max_ms THEN
        RAISE EXCEPTION 'tributary.next_id: clock % ms / id time % ms since 2024-01-01 outside the 40-bit range', now_ms, ms
            USING ERRCODE = 'TR003';
    END IF;
    WHILE ms > now_ms LOOP
        -- More than 1024 ids in one ms, or the clock stepped back: wait until
        -- the clock reaches the id's ms, so no id carries a future time.
        IF ms - now_ms > max_behind THEN
            RAISE EXCEPTION 'tributary.next_id: clock moved backwards by % ms', ms - now_ms
                USING ERRCODE = 'TR001';
        END IF;
        PERFORM pg_sleep((ms - now_ms) / 1000.0);
        now_ms := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - epoch_ms;
    END LOOP;

    RETURN (ms << 23) | (shard::bigint << 10) | (v & 1023);
END
$$;

COMMENT ON FUNCTION tributary.next_id() IS
    'Snowflake id (layout seed000: ms since 2024-01-01 << 23 | shard << 10 | seq); unique and increasing per shard. See schema/ids.md.';

-- Decoding helpers for psql sessions; the Go decoder is internal/ids.
CREATE OR REPLACE FUNCTION tributary.id_shard(id bigint) RETURNS int
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS
$$ SELECT ((id >> 10) & 8191)::int $$;

CREATE OR REPLACE FUNCTION tributary.id_time(id bigint) RETURNS timestamptz
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS
$$ SELECT to_timestamp(((id >> 23) + 1704067200000) / 1000.0) $$;

CREATE OR REPLACE FUNCTION tributary.id_seq_part(id bigint) RETURNS int
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS
$$ SELECT (id & 1023)::int $$;
