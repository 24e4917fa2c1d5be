-- Workload replayed by capture/main.go. Every statement here becomes pgoutput
-- messages in ../pgoutput_v1.txt.gz.
insert into cap_items values (1, 1234.50, 'Zoë – naïve ☃', null, '2026-11-30 12:34:56.789012+00',
  '{a,"b c",NULL}', 'happy', '{sad,ok}', 'x@example.com',
  (select string_agg(md5(g::text), '') from generate_series(1, 200) g),
  true, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"k": [1, 2]}', '2026-01-01',
  '2026-11-30 01:02:03.456', 1.5e300, '\x00ff0a', 'ab', '1 day 02:03:04.56');
insert into cap_items (id) values (2);
-- big is TOASTed and unchanged: sent as 'u'.
update cap_items set note = 'changed' where id = 1;
-- key change: old key sent as 'K'.
update cap_items set id = 10 where id = 2;
delete from cap_items where id = 10;
insert into cap_full values (1, 'one'), (2, null);
-- replica identity full: old row sent as 'O'.
update cap_full set v = 'uno' where id = 1;
delete from cap_full where id = 2;
select pg_logical_emit_message(false, 'tributary.heartbeat', 'hb-1');
begin;
select pg_logical_emit_message(true, 'tx', '\x00010203'::bytea);
insert into cap_parent values (1);
insert into cap_child values (1, 1);
commit;
truncate cap_parent, cap_child restart identity cascade;
truncate cap_full;
select pg_replication_origin_session_setup('cap_upstream');
begin;
select pg_replication_origin_xact_setup('1/ABCDEF', '2026-01-02 03:04:05+00');
insert into cap_full values (7, 'from upstream');
commit;
select pg_replication_origin_session_reset();
-- Larger than logical_decoding_work_mem (64kB): spilled to disk by the
-- server and sent after the commit; the rolled-back ones are never sent.
begin;
insert into cap_bulk select g, repeat('p', 1000) from generate_series(1, 100) g;
commit;
begin;
insert into cap_bulk select g, repeat('q', 1000) from generate_series(1001, 1100) g;
rollback;
begin;
insert into cap_bulk select g, repeat('r', 1000) from generate_series(2001, 2100) g;
savepoint s1;
insert into cap_bulk select g, repeat('s', 1000) from generate_series(3001, 3100) g;
rollback to savepoint s1;
insert into cap_bulk values (9999, 'after');
commit;
-- a new Relation message follows a schema change.
alter table cap_items add column extra int;
insert into cap_items (id, extra) values (3, 42);
