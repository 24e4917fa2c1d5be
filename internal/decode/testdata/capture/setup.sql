-- Schema for capture/main.go. Drops what an earlier run left.
select pg_drop_replication_slot(slot_name) from pg_replication_slots where slot_name = 'cap_v1';
select pg_replication_origin_drop('cap_upstream') from pg_replication_origin where roname = 'cap_upstream';
drop publication if exists cap;
drop table if exists cap_items, cap_full, cap_child, cap_parent, cap_bulk;
drop type if exists cap_mood;
drop domain if exists cap_email;
create type cap_mood as enum ('sad', 'ok', 'happy');
create domain cap_email as varchar(50);
create table cap_items (
  id bigint primary key, amount numeric(12,2), name varchar(40), note text, ts timestamptz,
  tags text[], m cap_mood, moods cap_mood[], e cap_email, big text, b bool, u uuid, j jsonb,
  d date, t3 timestamp(3), f float8, bin bytea, code char(3), iv interval day to second(2));
create table cap_full (id int primary key, v text);
alter table cap_full replica identity full;
create table cap_parent (id int primary key);
create table cap_child (id int primary key, pid int references cap_parent(id));
create table cap_bulk (id int primary key, payload text);
create publication cap for table cap_items, cap_full, cap_parent, cap_child, cap_bulk;
select pg_create_logical_replication_slot('cap_v1', 'pgoutput');
select pg_replication_origin_create('cap_upstream');
