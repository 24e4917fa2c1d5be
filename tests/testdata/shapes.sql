-- The table shapes SaaS fleets have, for tests/shapes_done_test.go, which
-- creates this schema on every shard with {{sfx}} replaced by the test's
-- suffix and {{shard}} by the shard's number in the fleet (the shard field
-- of the payments' Instagram-layout ids).
--
--   payments  the revenue table, partitioned by month (RANGE on paid_at),
--             keyed (id, paid_at) as PostgreSQL makes every key of a
--             partitioned table; amounts and partial refunds in a domain
--             over numeric(14,2), currencies in a domain over text, the
--             status an enum, the payer's address a domain over text, an
--             unconstrained numeric exchange rate;
--   quotes    uuid keys (UUIDv7 made here), enums (one of them an array),
--             domains over text and numeric, and unconstrained numerics:
--             price kept as its exact text (the default), qty stored as a
--             Decimal(38, 12) chosen in the table config.
--
-- A new table for the test is a CREATE here, its entry in shapesTables and
-- its traffic.

CREATE DOMAIN sh_money_{{sfx}} AS numeric(14,2) CHECK (VALUE >= 0);
CREATE DOMAIN sh_currency_{{sfx}} AS text CHECK (VALUE ~ '^[A-Z]{3}$');
CREATE DOMAIN sh_email_{{sfx}} AS text CHECK (VALUE LIKE '%@%');
CREATE TYPE sh_status_{{sfx}} AS ENUM ('pending', 'paid', 'refunded', 'failed');
CREATE TYPE sh_side_{{sfx}} AS ENUM ('buy', 'sell', 'it''s "both"');

-- Instagram's scheme: ms since 2011-08-24T21:07:01.721Z << 23 | shard << 10
-- | a sequence modulo 1024.
CREATE SEQUENCE sh_pay_seq_{{sfx}};
CREATE FUNCTION sh_pay_id_{{sfx}}() RETURNS bigint LANGUAGE sql VOLATILE AS $$
	SELECT ((floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - 1314220021721) << 23)
		| ({{shard}}::bigint << 10) | (nextval('sh_pay_seq_{{sfx}}') % 1024)
$$;

-- UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, version 7, variant 10.
CREATE FUNCTION sh_uuidv7_{{sfx}}() RETURNS uuid LANGUAGE plpgsql VOLATILE AS $$
DECLARE
	b bytea := uuid_send(gen_random_uuid());
	ms bigint := floor(extract(epoch FROM clock_timestamp()) * 1000);
BEGIN
	FOR i IN 0..5 LOOP
		b := set_byte(b, i, ((ms >> (8 * (5 - i))) & 255)::int);
	END LOOP;
	b := set_byte(b, 6, (get_byte(b, 6) & 15) | 112);
	b := set_byte(b, 8, (get_byte(b, 8) & 63) | 128);
	RETURN encode(b, 'hex')::uuid;
END $$;

CREATE TABLE sh_payments_{{sfx}} (
	id bigint NOT NULL DEFAULT sh_pay_id_{{sfx}}(),
	account bigint NOT NULL,
	amount sh_money_{{sfx}} NOT NULL,
	refunded sh_money_{{sfx}},
	currency sh_currency_{{sfx}} NOT NULL,
	status sh_status_{{sfx}} NOT NULL,
	payer sh_email_{{sfx}},
	fx_rate numeric,
	paid_at timestamptz NOT NULL,
	PRIMARY KEY (id, paid_at)
) PARTITION BY RANGE (paid_at);
CREATE TABLE sh_payments_{{sfx}}_2026_08 PARTITION OF sh_payments_{{sfx}} FOR VALUES FROM ('2026-08-01') TO ('2026-09-01');
CREATE TABLE sh_payments_{{sfx}}_2026_09 PARTITION OF sh_payments_{{sfx}} FOR VALUES FROM ('2026-09-01') TO ('2026-10-01');
CREATE TABLE sh_payments_{{sfx}}_2026_10 PARTITION OF sh_payments_{{sfx}} FOR VALUES FROM ('2026-10-01') TO ('2026-11-01');
CREATE TABLE sh_payments_{{sfx}}_2026_11 PARTITION OF sh_payments_{{sfx}} FOR VALUES FROM ('2026-11-01') TO ('2026-12-01');
CREATE TABLE sh_payments_{{sfx}}_2026_12 PARTITION OF sh_payments_{{sfx}} FOR VALUES FROM ('2026-12-01') TO ('2027-01-01');

CREATE TABLE sh_quotes_{{sfx}} (
	id uuid PRIMARY KEY DEFAULT sh_uuidv7_{{sfx}}(),
	side sh_side_{{sfx}} NOT NULL,
	sides sh_side_{{sfx}}[],
	state sh_status_{{sfx}},
	contact sh_email_{{sfx}},
	cap sh_money_{{sfx}},
	price numeric,
	qty numeric,
	quoted_at timestamptz NOT NULL DEFAULT now()
);

-- Composite identity: two tenants per shard with the same line numbers.
CREATE TABLE sh_lines_{{sfx}} (
	tenant_id text NOT NULL,
	line_no integer NOT NULL,
	note text,
	qty numeric(12,3),
	PRIMARY KEY (tenant_id, line_no)
);
