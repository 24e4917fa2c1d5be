-- Generates format_type.golden (psql -AtF $'\t' -f format_type.sql).
with types(oid) as (
  select t.oid from pg_type t
  where t.typnamespace='pg_catalog'::regnamespace and t.typtype in ('b','r','m') and t.typarray<>0
    and t.typname not in ('gtsvector','aclitem','txid_snapshot','pg_snapshot','tid','cid','refcursor')
    and t.typelem=0 or t.oid=600 or t.oid=601 or t.oid=603 or t.oid=628 or t.oid=18 or t.oid=19
),
alltypes(oid) as (select oid from types union select typarray from pg_type where oid in (select oid from types)),
mods(oid, typmod) as (
  select b.oid, m.typmod from alltypes b join pg_type t on t.oid=b.oid
  join pg_type e on e.oid = case when t.typelem<>0 and t.typlen=-1 then t.typelem else t.oid end
  cross join lateral (
    select unnest(case e.typname
      when 'bpchar' then array[-1,0,4,5,14,44,10485764]
      when 'varchar' then array[-1,0,4,5,14,44,10485764]
      when 'numeric' then array[-1,0,3,4,786438,(10<<16)+4,((5<<16)|(-2&2047))+4,((3<<16)|5)+4,((1000<<16)|1000)+4,((1<<16)|(-1000&2047))+4]
      when 'time' then array[-1,0,3,6]
      when 'timetz' then array[-1,0,3,6]
      when 'timestamp' then array[-1,0,3,6]
      when 'timestamptz' then array[-1,0,3,6]
      when 'bit' then array[-1,0,1,8]
      when 'varbit' then array[-1,0,1,8]
      when 'interval' then array[-1, 2147483647, (32767<<16)|0, (32767<<16)|6,
          (4<<16)|65535, (2<<16)|65535, (8<<16)|65535, (1024<<16)|65535, (2048<<16)|65535, (4096<<16)|65535, (4096<<16)|3,
          (6<<16)|65535, (1032<<16)|65535, (3080<<16)|65535, (7176<<16)|65535, (7176<<16)|2,
          (3072<<16)|65535, (7168<<16)|65535, (7168<<16)|0, (6144<<16)|65535, (6144<<16)|5]
      else array[-1,7] end) as typmod) m
)
select oid, typmod, format_type(oid, typmod) from mods order by oid, typmod;
