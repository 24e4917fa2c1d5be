-- A fleet that is not the demo's: a parcel carrier's shards, numbered 1..3
-- by their fleet file. tests/otherfleet_test.go creates this schema on every
-- shard, with {{sfx}} replaced by the test's suffix and {{shard}} by the
-- shard's number in the fleet (the node field of its Snowflake ids).
--
-- How it differs from the demo (deploy/local/schema.sql):
--   parcels   uuid keys (UUIDv7 made here), a TOASTed manifest of several kB
--             edited around, no workspace, moved between shards by a saga;
--   charges   the money: bigint keys in Instagram's layout (13 shard bits),
--             numeric(14,2) amounts, char(3) currencies, timestamp without
--             time zone, statuses of its own (settled counts, reversed is a
--             refund, quoted and voided count for nothing);
--   transfers the saga's log: per-shard bigserial numbers (they collide
--             across shards), no from-shard column (the log row lives on the
--             source), phases opened -> copied -> closed;
--   scans     keyless (REPLICA IDENTITY FULL), Twitter-layout bigint ids.

-- UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, version 7, variant 10,
-- the rest random.
CREATE FUNCTION of_uuidv7_{{sfx}}() RETURNS uuid LANGUAGE plpgsql VOLATILE AS $$
DECLARE
	b bytea := uuid_send(gen_random_uuid());
	ms bigint := floor(extract(epoch FROM clock_timestamp()) * 1000);
BEGIN
	FOR i IN 0..5 LOOP
		b := set_byte(b, i, ((ms >> (8 * (5 - i))) & 255)::int);
	END LOOP;
	b := set_byte(b, 6, (get_byte(b, 6) & 15) | 112);  -- version 7
	b := set_byte(b, 8, (get_byte(b, 8) & 63) | 128);  -- variant 10
	RETURN encode(b, 'hex')::uuid;
END $$;

-- Instagram's scheme: ms since 2011-08-24T21:07:01.721Z << 23 | shard << 10
-- | a sequence modulo 1024.
CREATE SEQUENCE of_charge_seq_{{sfx}};
CREATE FUNCTION of_charge_id_{{sfx}}() RETURNS bigint LANGUAGE sql VOLATILE AS $$
	SELECT ((floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - 1314220021721) << 23)
		| ({{shard}}::bigint << 10) | (nextval('of_charge_seq_{{sfx}}') % 1024)
$$;

-- Twitter's scheme: ms since 2010-11-04T01:42:54.657Z << 22 | worker << 12
-- | a sequence modulo 4096 (the worker is the shard number).
CREATE SEQUENCE of_scan_seq_{{sfx}};
CREATE FUNCTION of_scan_id_{{sfx}}() RETURNS bigint LANGUAGE sql VOLATILE AS $$
	SELECT ((floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - 1288834974657) << 22)
		| ({{shard}}::bigint << 12) | (nextval('of_scan_seq_{{sfx}}') % 4096)
$$;

CREATE TABLE of_parcels_{{sfx}} (
	parcel_id uuid PRIMARY KEY DEFAULT of_uuidv7_{{sfx}}(),
	depot integer NOT NULL,
	label text NOT NULL,
	weight_g integer,
	manifest text,
	received_at timestamptz NOT NULL DEFAULT now()
);
-- Out of line and uncompressed: a manifest over ~2 kB is always TOASTed,
-- so an edit of the label sends it as unchanged.
ALTER TABLE of_parcels_{{sfx}} ALTER COLUMN manifest SET STORAGE EXTERNAL;

CREATE TABLE of_charges_{{sfx}} (
	charge_no bigint PRIMARY KEY DEFAULT of_charge_id_{{sfx}}(),
	parcel uuid,
	account integer NOT NULL,
	amount numeric(14,2) NOT NULL,
	currency char(3) NOT NULL,
	state text NOT NULL CHECK (state IN ('quoted', 'settled', 'reversed', 'voided')),
	booked_at timestamp NOT NULL
);

CREATE TABLE of_transfers_{{sfx}} (
	transfer_no bigserial PRIMARY KEY,
	parcel uuid NOT NULL,
	dest_shard smallint NOT NULL,
	phase text NOT NULL DEFAULT 'opened',
	opened_at timestamptz NOT NULL DEFAULT now(),
	closed_at timestamptz
);

CREATE TABLE of_scans_{{sfx}} (
	scan_id bigint NOT NULL DEFAULT of_scan_id_{{sfx}}(),
	parcel uuid,
	station text NOT NULL,
	note text
);
ALTER TABLE of_scans_{{sfx}} REPLICA IDENTITY FULL;
