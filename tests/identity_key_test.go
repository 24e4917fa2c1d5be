package tests

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/identity"
	"github.com/tributary/tributary/internal/reader"
)

// TestReaderRefusesPartOfKey: a table keyed (tenant_id, line_no) whose
// config names line_no alone as its id column is refused by the reader at
// start, before it publishes or streams anything, with the key and the fix
// in the message. Streamed, the rows of different tenants that share a
// line number would become one row in ClickHouse (as they did, before the
// check: the loader's sort key is the id column and the shard).
func TestReaderRefusesPartOfKey(t *testing.T) {
	const shard = 1
	p := setupPipelineWith(t, []int{shard}, nil, true, "lines_",
		`{"topic_prefix":"e2e_%[1]s.","tables":[{"name":%[2]q,"id_column":"line_no","id_layout":"serial"}]}`,
		`CREATE TABLE %s (tenant_id bigint NOT NULL, line_no bigint NOT NULL, item text, PRIMARY KEY (tenant_id, line_no))`)
	tbl := p.table()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Two tenants with the same line numbers: 6 rows, 3 line numbers.
	p.exec(ctx, shard, fmt.Sprintf(`INSERT INTO %q (tenant_id, line_no, item) SELECT t, l, 'item ' || t || '/' || l
		FROM generate_series(1, 2) t, generate_series(1, 3) l`, tbl))

	runCtx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	p.startLoader(runCtx, "l1")
	r := reader.New(p.readerConfig(shard), p.log, prometheus.NewRegistry())
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()

	// Refused, or (without the check) copied and streamed: whichever
	// comes first.
	var err error
	for refused := false; !refused; {
		select {
		case err = <-done:
			refused = true
		case <-ctx.Done():
			t.Fatalf("the reader neither refused %s nor streamed it: %v", tbl, ctx.Err())
		case <-time.After(200 * time.Millisecond):
			if n := p.chLive(ctx); n > 0 {
				stop()
				<-done
				t.Fatalf("the reader streamed %s instead of refusing it: ClickHouse holds %d live rows (so far) of the shard's 6", tbl, n)
			}
		}
	}
	if !errors.Is(err, reader.ErrReplicaIdentity) {
		t.Fatalf("reader: %v, want ErrReplicaIdentity", err)
	}
	want := fmt.Sprintf("table %s: id_column: column line_no is part of the key (tenant_id, line_no) (the primary key %s_pkey) and not unique on its own: "+
		"rows that share line_no but differ in the rest of the key would become one row in ClickHouse; a row is identified by one column: ", tbl, tbl)
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "REPLICA IDENTITY USING INDEX") {
		t.Fatalf("reader: %v\nwant it to contain %q and the fix", err, want)
	}
	// Refused before streaming: no slot, no publication, nothing in Kafka.
	if n := p.countSource(ctx, shard, fmt.Sprintf("SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'e2e_%s_%d'", p.suffix, shard)); n != 0 {
		t.Fatalf("the reader created its slot (%d) before refusing", n)
	}
	if n := p.countSource(ctx, shard, fmt.Sprintf("SELECT count(*) FROM pg_publication WHERE pubname = 'e2e_%s'", p.suffix)); n != 0 {
		t.Fatalf("the reader created its publication (%d) before refusing", n)
	}
}

// TestIdentityOfPartitionedTables: PostgreSQL makes a partitioned table's
// primary key include its partition key and its sub-partitions' keys, so
// the identity read from a real shard names those columns (for the root
// and for a partition), and an id column that is the key's only other
// column is the whole key. A column that is only part of the key besides
// the partition key is refused. An id with a unique index of its own is
// accepted inside a wider replica identity index (as a row filter needs),
// and refused there without one.
func TestIdentityOfPartitionedTables(t *testing.T) {
	st := loadStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, st.ShardDSNs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	pay, lines, wide := "idpay_"+randSuffix(), "idlines_"+randSuffix(), "idwide_"+randSuffix()
	for _, stmt := range []string{
		`CREATE TABLE %[1]s (id bigint NOT NULL, region text NOT NULL, paid_at timestamptz NOT NULL,
			PRIMARY KEY (id, paid_at, region)) PARTITION BY RANGE (paid_at)`,
		`CREATE TABLE %[1]s_01 PARTITION OF %[1]s FOR VALUES FROM ('2026-01-01') TO ('2026-02-01') PARTITION BY LIST (region)`,
		`CREATE TABLE %[1]s_01_eu PARTITION OF %[1]s_01 FOR VALUES IN ('eu')`,
		`CREATE TABLE %[1]s_02 PARTITION OF %[1]s FOR VALUES FROM ('2026-02-01') TO ('2026-03-01') PARTITION BY HASH (id)`,
		`CREATE TABLE %[1]s_02_h0 PARTITION OF %[1]s_02 FOR VALUES WITH (modulus 1, remainder 0)`,
		`CREATE TABLE %[2]s (tenant_id bigint, line_no bigint, at date, PRIMARY KEY (tenant_id, line_no, at)) PARTITION BY RANGE (at)`,
		`CREATE TABLE %[3]s (id bigint NOT NULL, status text NOT NULL, CONSTRAINT %[3]s_ident UNIQUE (id, status))`,
		`ALTER TABLE %[3]s REPLICA IDENTITY USING INDEX %[3]s_ident`,
	} {
		if _, err := conn.Exec(ctx, fmt.Sprintf(stmt, pay, lines, wide)); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		if c, err := pgx.Connect(cctx, st.ShardDSNs[0]); err == nil {
			c.Exec(cctx, fmt.Sprintf("DROP TABLE IF EXISTS %s, %s, %s", pay, lines, wide)) //nolint:errcheck
			c.Close(cctx)
		}
	})

	k, err := identity.Read(ctx, conn, "public", pay, []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(k.Columns, []string{"id", "paid_at", "region"}) || !slices.Equal(k.PartitionColumns, []string{"id", "paid_at", "region"}) {
		t.Fatalf("%s: key %v, partition columns %v; want (id, paid_at, region) for both", pay, k.Columns, k.PartitionColumns)
	}
	if err := k.Check(); err != nil {
		t.Fatalf("%s by id: %v, want accepted", pay, err)
	}
	k, err = identity.Read(ctx, conn, "public", pay+"_01_eu", []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(k.PartitionColumns, []string{"id", "paid_at", "region"}) || k.Check() != nil {
		t.Fatalf("partition %s_01_eu: partition columns %v, check %v; want (id, paid_at, region) and accepted", pay, k.PartitionColumns, k.Check())
	}

	k, err = identity.Read(ctx, conn, "public", lines, []string{"line_no"})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("column line_no is part of the key (tenant_id, line_no, at) (the primary key %s_pkey, beyond the partition key columns at) and not unique on its own: ", lines)
	if err := k.Check(); err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("%s by line_no: %v\nwant an error starting %q", lines, err, want)
	}

	k, err = identity.Read(ctx, conn, "public", wide, []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	want = fmt.Sprintf("column id is part of the key (id, status) (the replica identity index %s_ident) and not unique on its own: ", wide)
	if err := k.Check(); err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("%s by id, without a unique index on id: %v\nwant an error starting %q", wide, err, want)
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER TABLE %s ADD PRIMARY KEY (id)", wide)); err != nil {
		t.Fatal(err)
	}
	if k, err = identity.Read(ctx, conn, "public", wide, []string{"id"}); err != nil || !k.IDUnique || k.Check() != nil {
		t.Fatalf("%s by id, with a primary key on id: %+v, %v; want unique and accepted", wide, k, err)
	}
}

// TestIdentityOfCompositeKeys: identity reads a list of id columns
// against a real catalogue: the whole primary key in index order is
// accepted (a key column of a domain over text too); out of order, a
// missing column, a nullable one or a timestamp are refused with the fix,
// and one column of the key names the id_columns that would identify it.
func TestIdentityOfCompositeKeys(t *testing.T) {
	st := loadStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, st.ShardDSNs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	sfx := randSuffix()
	lines, stamped, keyless, coded := "idcl_"+sfx, "idcs_"+sfx, "idck_"+sfx, "idcd_"+sfx
	for _, stmt := range []string{
		`CREATE TABLE %[1]s (tenant_id text NOT NULL, line_no integer NOT NULL, note text, PRIMARY KEY (tenant_id, line_no))`,
		`CREATE TABLE %[2]s (a bigint NOT NULL, b timestamptz NOT NULL, PRIMARY KEY (a, b))`,
		`CREATE TABLE %[3]s (x integer NOT NULL, n integer)`,
		`ALTER TABLE %[3]s REPLICA IDENTITY FULL`,
		`CREATE DOMAIN %[4]s_code AS varchar(12)`,
		`CREATE TABLE %[4]s (code %[4]s_code NOT NULL, id uuid NOT NULL, PRIMARY KEY (code, id))`,
	} {
		if _, err := conn.Exec(ctx, fmt.Sprintf(stmt, lines, stamped, keyless, coded)); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		if c, err := pgx.Connect(cctx, st.ShardDSNs[0]); err == nil {
			c.Exec(cctx, fmt.Sprintf("DROP TABLE IF EXISTS %s, %s, %s, %s", lines, stamped, keyless, coded)) //nolint:errcheck
			c.Exec(cctx, fmt.Sprintf("DROP DOMAIN IF EXISTS %s_code", coded))                                //nolint:errcheck
			c.Close(cctx)
		}
	})
	for _, c := range []struct {
		table string
		key   []string
		want  string // "" accepted; else the start of the refusal
	}{
		{lines, []string{"tenant_id", "line_no"}, ""},
		{coded, []string{"code", "id"}, ""},
		{keyless, []string{"x", "x2"}, "column x2 does not exist in public." + keyless},
		{lines, []string{"line_no", "tenant_id"}, fmt.Sprintf(`id_columns ["line_no", "tenant_id"] name the key's columns out of order: the primary key %s_pkey orders them ["tenant_id", "line_no"]`, lines)},
		{lines, []string{"tenant_id", "note"}, `key column note may be NULL`},
		{lines, []string{"tenant_id", "nope"}, "column nope does not exist in public." + lines},
		{stamped, []string{"a", "b"}, "key column b has type timestamp with time zone; a key of several columns takes only smallint, integer, bigint, uuid, text, character varying columns"},
		{keyless, []string{"x", "n"}, "key column n may be NULL"},
		{lines, []string{"line_no"}, "column line_no is part of the key (tenant_id, line_no)"},
	} {
		k, err := identity.Read(ctx, conn, "public", c.table, c.key)
		if err != nil {
			t.Fatalf("%s %v: %v", c.table, c.key, err)
		}
		err = k.Check()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s %v: %v, want accepted", c.table, c.key, err)
		case c.want != "" && (err == nil || !strings.HasPrefix(err.Error(), c.want)):
			t.Errorf("%s %v: %v\nwant an error starting %q", c.table, c.key, err, c.want)
		}
		if len(c.key) == 1 && err != nil && !strings.Contains(err.Error(), `"id_columns": ["tenant_id", "line_no"], "id_layout": "key"`) {
			t.Errorf("%s %v: %v\nwant the id_columns that identify it", c.table, c.key, err)
		}
	}
}

// TestReaderRefusesNullableID: a table without a key under REPLICA
// IDENTITY FULL whose id column may be NULL is refused by the reader at
// start, before it publishes or streams anything, with the ALTER TABLE
// that fixes it: a row without an id cannot be told from another.
func TestReaderRefusesNullableID(t *testing.T) {
	const shard = 1
	p := setupPipelineWith(t, []int{shard}, nil, true, "loose_",
		`{"topic_prefix":"e2e_%[1]s.","tables":[{"name":%[2]q,"id_column":"id","id_layout":"serial"}]}`,
		`CREATE TABLE %s (id bigint, note text)`, `ALTER TABLE %s REPLICA IDENTITY FULL`)
	tbl := p.table()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p.exec(ctx, shard, fmt.Sprintf(`INSERT INTO %q (id, note) VALUES (1, 'a'), (NULL, 'b'), (NULL, 'c')`, tbl))
	rctx, stop := context.WithTimeout(ctx, 60*time.Second)
	defer stop()
	err := reader.New(p.readerConfig(shard), p.log, prometheus.NewRegistry()).Run(rctx)
	if rctx.Err() != nil {
		t.Fatalf("the reader ran on a table with a nullable id column instead of refusing it: %v", err)
	}
	if !errors.Is(err, reader.ErrReplicaIdentity) {
		t.Fatalf("reader: %v, want ErrReplicaIdentity", err)
	}
	want := fmt.Sprintf("column id may be NULL, and a row without an id cannot be told apart from another (ALTER TABLE \"public\".%q ALTER COLUMN \"id\" SET NOT NULL)", tbl)
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("reader: %v\nwant it to contain %q", err, want)
	}
	for what, sql := range map[string]string{
		"its slot":        fmt.Sprintf("SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'e2e_%s_%d'", p.suffix, shard),
		"its publication": fmt.Sprintf("SELECT count(*) FROM pg_publication WHERE pubname = 'e2e_%s'", p.suffix),
	} {
		if n := p.countSource(ctx, shard, sql); n != 0 {
			t.Errorf("the reader created %s (%d) before refusing", what, n)
		}
	}
}
