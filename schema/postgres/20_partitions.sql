-- 20_partitions.sql: what a publication via the partition root does not send.
--
-- Tributary publishes a partitioned table through its root
-- (publish_via_partition_root = true), so every row change of any partition
-- arrives under the root. Three things that remove a partition's rows send
-- nothing through the root: TRUNCATE of a partition, ALTER TABLE ... DETACH
-- PARTITION, and DROP TABLE of a partition. For each, these helpers emit a
-- transactional logical message (prefix 'tributary.partition') in the same
-- transaction, after the statement took its lock on the partition, so its
-- position is above every change of the partition's rows before it and
-- below every change after it. The reader turns it into a truncate scoped
-- to the partition's bound (internal/reader/leaf.go); the loader deletes
-- exactly the rows of that bound (internal/loader/partition.go). A fourth,
-- ALTER TABLE ... ATTACH PARTITION of a table that has rows, brings rows
-- no change ever published under the root: its message makes the reader
-- copy the partition's rows, versioned at the message's position.
--
-- The message is JSON:
--   {"cause": "truncate" | "detach" | "drop" | "attach",
--    "root": "public.payments", "partition": "public.payments_2026_01",
--    "levels": [{"strategy": "r" | "l" | "h", "columns": ["paid_at"],
--                "bound": "FOR VALUES FROM (...) TO (...)",
--                "siblings": [...]}]}
-- levels go from the root down to the partition (more than one for
-- sub-partitioned tables); a row was in the partition if it satisfies every
-- level. bound is pg_get_expr(relpartbound) printed with DateStyle ISO and
-- TimeZone UTC; siblings, for a DEFAULT partition only, are the bounds of
-- the other partitions of its parent.
--
-- Install once per shard, as a superuser (event triggers need one); it is
-- idempotent. The trigger functions run as their owner (SECURITY DEFINER),
-- so any role's TRUNCATE, ALTER TABLE and DROP TABLE work as before
-- without access to the tributary schema. A TRUNCATE trigger is put on every partition of every
-- partitioned table, now and whenever one is created or attached. The
-- reader refuses to stream a partitioned table whose partitions lack it.
-- Cost: ALTER TABLE and DROP TABLE read the partitions of every partitioned
-- table of the database once (pg_inherits), to see which ones they remove.

CREATE SCHEMA IF NOT EXISTS tributary;

-- The bound of rel and of each ancestor below the root, root first.
CREATE OR REPLACE FUNCTION tributary.partition_scope(rel regclass) RETURNS jsonb
LANGUAGE sql STABLE
SET "DateStyle" = 'ISO, YMD' SET "TimeZone" = 'UTC' SET search_path = pg_catalog
AS $$
  SELECT jsonb_build_object(
    'root', (SELECT a.relid::regclass::text FROM pg_partition_ancestors(rel) a
             JOIN pg_class c ON c.oid = a.relid WHERE NOT c.relispartition),
    'partition', rel::text,
    'levels', (
      SELECT jsonb_agg(jsonb_build_object(
               'strategy', pt.partstrat::text,
               'columns', (SELECT jsonb_agg(att.attname::text ORDER BY k.ord)
                           FROM unnest(pt.partattrs::int2[]) WITH ORDINALITY k(attnum, ord)
                           LEFT JOIN pg_attribute att ON att.attrelid = pt.partrelid AND att.attnum = k.attnum),
               'bound', pg_get_expr(c.relpartbound, c.oid),
               'siblings', CASE WHEN pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT' THEN
                             (SELECT coalesce(jsonb_agg(pg_get_expr(s.relpartbound, s.oid)), '[]')
                              FROM pg_inherits si JOIN pg_class s ON s.oid = si.inhrelid
                              WHERE si.inhparent = pt.partrelid AND s.oid <> c.oid) END)
             ORDER BY anc.depth DESC)
      FROM pg_partition_ancestors(rel) WITH ORDINALITY anc(relid, depth)
      JOIN pg_class c ON c.oid = anc.relid AND c.relispartition
      JOIN pg_inherits inh ON inh.inhrelid = c.oid
      JOIN pg_partitioned_table pt ON pt.partrelid = inh.inhparent))
$$;

CREATE OR REPLACE FUNCTION tributary.partition_gone(scope jsonb, cause text) RETURNS void
LANGUAGE sql VOLATILE SET search_path = pg_catalog
AS $$
  SELECT pg_logical_emit_message(true, 'tributary.partition', (scope || jsonb_build_object('cause', cause))::text)
$$;

CREATE OR REPLACE FUNCTION tributary.partition_truncated() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog
AS $$
BEGIN
  PERFORM tributary.partition_gone(tributary.partition_scope(TG_RELID), 'truncate');
  RETURN NULL;
END
$$;

-- Puts the TRUNCATE trigger on every partition that lacks it. It runs as
-- its owner (the superuser who installed it): it runs at the end of any
-- CREATE or ALTER TABLE, and the user's statement must not fail because
-- another role owns a partition.
CREATE OR REPLACE FUNCTION tributary.watch_partitions() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog
AS $$
DECLARE
  p regclass;
BEGIN
  FOR p IN SELECT c.oid::regclass FROM pg_class c
           WHERE c.relispartition AND c.relkind IN ('r', 'p')
             AND NOT EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = c.oid AND t.tgname = 'tributary_partition_truncated')
  LOOP
    EXECUTE format('CREATE TRIGGER tributary_partition_truncated AFTER TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION tributary.partition_truncated()', p);
  END LOOP;
END
$$;

-- Before ALTER TABLE / DROP TABLE: every partition's own level (its
-- parent, root, bound and the parent's partitioning), by oid, in one
-- set-based read, kept in a transaction-local setting for the end of the
-- command. The scope of a partition that goes is assembled from it then
-- (the catalogue no longer has a dropped partition).
CREATE OR REPLACE FUNCTION tributary.partitions_before() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog
SET "DateStyle" = 'ISO, YMD' SET "TimeZone" = 'UTC'
AS $$
BEGIN
  PERFORM set_config('tributary.partitions_before', coalesce((
    SELECT jsonb_object_agg(c.oid::text, jsonb_build_object(
             'parent', i.inhparent::text,
             'root', pg_partition_root(c.oid)::regclass::text,
             'partition', c.oid::regclass::text,
             'level', jsonb_build_object(
               'strategy', pt.partstrat::text,
               'columns', (SELECT jsonb_agg(att.attname::text ORDER BY k.ord)
                           FROM unnest(pt.partattrs::int2[]) WITH ORDINALITY k(attnum, ord)
                           LEFT JOIN pg_attribute att ON att.attrelid = pt.partrelid AND att.attnum = k.attnum),
               'bound', pg_get_expr(c.relpartbound, c.oid),
               'siblings', CASE WHEN c.relpartbound IS NOT NULL AND pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT' THEN
                             (SELECT coalesce(jsonb_agg(pg_get_expr(s.relpartbound, s.oid)), '[]')
                              FROM pg_inherits si JOIN pg_class s ON s.oid = si.inhrelid
                              WHERE si.inhparent = pt.partrelid AND s.oid <> c.oid) END)))
    FROM pg_inherits i
    JOIN pg_partitioned_table pt ON pt.partrelid = i.inhparent
    JOIN pg_class c ON c.oid = i.inhrelid AND c.relkind IN ('r', 'p')), '{}')::text, true);
END
$$;

-- The scope of partition k as it was before the command: its level and
-- those of its partitioned ancestors below the root, root first.
CREATE OR REPLACE FUNCTION tributary.scope_before(before jsonb, k text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog
AS $$
DECLARE
  levels jsonb := '[]';
  cur text := k;
BEGIN
  WHILE before ? cur LOOP
    levels := jsonb_build_array(before->cur->'level') || levels;
    cur := before->cur->>'parent';
  END LOOP;
  RETURN jsonb_build_object('root', before->k->>'root', 'partition', before->k->>'partition', 'levels', levels);
END
$$;

-- After the command (its locks taken, its changes made): a message for each
-- partition that is no longer one of the same root, one for each table
-- attached as a partition, and the TRUNCATE trigger on new partitions.
CREATE OR REPLACE FUNCTION tributary.partitions_after() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog
AS $$
DECLARE
  before jsonb := coalesce(nullif(current_setting('tributary.partitions_before', true), ''), '{}')::jsonb;
  k text;
  gone boolean;
BEGIN
  FOR k, gone IN
    SELECT b.key, NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = b.key::oid)
    FROM jsonb_each(before) b
    WHERE NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = b.key::oid AND c.relispartition
                      AND pg_partition_root(c.oid)::regclass::text = b.value->>'root')
  LOOP
    PERFORM tributary.partition_gone(tributary.scope_before(before, k), CASE WHEN gone THEN 'drop' ELSE 'detach' END);
  END LOOP;
  -- ALTER TABLE ... ATTACH PARTITION brings rows that were never published
  -- under the root (CREATE TABLE ... PARTITION OF brings none).
  IF tg_tag = 'ALTER TABLE' THEN
    FOR k IN SELECT i.inhrelid::text FROM pg_inherits i
             JOIN pg_class p ON p.oid = i.inhparent AND p.relkind = 'p'
             JOIN pg_class c ON c.oid = i.inhrelid AND c.relkind IN ('r', 'p')
             WHERE NOT before ? i.inhrelid::text LOOP
      PERFORM tributary.partition_gone(tributary.partition_scope(k::oid), 'attach');
    END LOOP;
  END IF;
  PERFORM set_config('tributary.partitions_before', '', true);
  PERFORM tributary.watch_partitions();
END
$$;

DROP EVENT TRIGGER IF EXISTS tributary_partitions_before;
CREATE EVENT TRIGGER tributary_partitions_before ON ddl_command_start
  WHEN TAG IN ('ALTER TABLE', 'DROP TABLE') EXECUTE FUNCTION tributary.partitions_before();
DROP EVENT TRIGGER IF EXISTS tributary_partitions_after;
CREATE EVENT TRIGGER tributary_partitions_after ON ddl_command_end
  WHEN TAG IN ('ALTER TABLE', 'DROP TABLE', 'CREATE TABLE') EXECUTE FUNCTION tributary.partitions_after();

SELECT tributary.watch_partitions();
