package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/reader"
	"github.com/tributary/tributary/internal/tables"
)

// contactsDDL: a table keyed by id whose replica identity is a unique index on (id,
// status), so a row filter on status and a column list without email both
// keep UPDATE and DELETE working at the source.
var contactsDDL = []string{
	`CREATE TABLE %[1]s (id bigint PRIMARY KEY, status text NOT NULL, email text, note text, amount numeric(12,2),
		CONSTRAINT %[1]s_ident UNIQUE (id, status))`,
	`ALTER TABLE %[1]s REPLICA IDENTITY USING INDEX %[1]s_ident`,
}

const contactsCfg = `{"topic_prefix":"e2e_%[1]s.","tables":[{"name":%[2]q,"id_column":"id","id_layout":"serial",
	"exclude_columns":["email"],"row_filter":"status <> 'archived'"}]}`

// TestReplicateColumnsAndRows: a table replicated without its email column
// and without archived rows. The excluded column never reaches Kafka nor
// ClickHouse (not in the copy, not in any streamed change); archived rows
// are not copied; a row archived later is deleted in ClickHouse, one
// unarchived appears; ClickHouse equals the shard's unarchived rows.
func TestReplicateColumnsAndRows(t *testing.T) {
	p := setupPipelineWith(t, []int{0}, nil, true, "contacts_", contactsCfg, contactsDDL...)
	tbl := p.table()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	t.Cleanup(func() { stop(); p.wg.Wait() })
	q := func(sql string) { p.exec(ctx, 0, fmt.Sprintf(sql, tbl)) }
	q(`INSERT INTO %s SELECT g, CASE WHEN mod(g, 5) = 0 THEN 'archived' ELSE 'active' END, 'secret-' || g || '@example.com', 'n' || g, g
		FROM generate_series(1, 40) g`)
	p.startLoader(runCtx, "l1")
	p.startReader(runCtx, 0)
	step := func(what string) {
		t.Helper()
		p.waitFor(ctx, 60*time.Second, what, func() bool { return p.compareContacts(ctx, tbl) == "" })
		if err := p.failed(); err != nil {
			t.Fatal(err)
		}
	}
	step("the copy of the unarchived rows, without email")

	q(`INSERT INTO %s SELECT g, CASE WHEN mod(g, 4) = 0 THEN 'archived' ELSE 'active' END, 'secret-' || g || '@example.com', 'n' || g, g
		FROM generate_series(41, 60) g`)
	q(`UPDATE %s SET email = 'secret-changed@example.com', note = 'edited' WHERE id BETWEEN 1 AND 8`)
	q(`UPDATE %s SET status = 'archived' WHERE id IN (11, 12, 13)`) // stops matching: deleted downstream
	q(`UPDATE %s SET status = 'active' WHERE id IN (5, 10)`)        // starts matching: appears
	q(`DELETE FROM %s WHERE id IN (21, 22)`)
	step("streamed changes, rows leaving and entering the filter")

	var n uint64
	if err := p.store.Conn().QueryRow(ctx, "SELECT count() FROM system.columns WHERE database = ? AND table = ? AND name = 'email'", p.chDB, tbl).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Error("ClickHouse has an email column")
	}
	recs, err := readTopic(ctx, p.brokers, p.tables.Tables[0].Topic)
	if err != nil {
		t.Fatal(err)
	}
	changes := 0
	for _, r := range recs {
		if bytes.Contains(r.Value, []byte(`"kind":"change"`)) {
			changes++
		}
		if bytes.Contains(r.Value, []byte("email")) || bytes.Contains(r.Value, []byte("secret-")) {
			t.Fatalf("an excluded column reached Kafka: %s", r.Value)
		}
	}
	if changes < 40 {
		t.Errorf("only %d change records in Kafka: the check saw too little", changes)
	}
	// The verifier compares what the config replicates: without the email
	// column and the archived rows (it reported both as differences).
	if rep := p.runVerify(ctx); !rep.Passed {
		t.Error("verify failed on a table with a column list and a row filter")
	}
}

// TestReplicateRefusesBrokenWrites: a column list without a replica
// identity column, or a row filter over a column outside it, would make
// PostgreSQL refuse UPDATE and DELETE on the source table; the reader
// refuses them before changing anything, with PostgreSQL's reason. An
// existing publication that publishes the table otherwise than configured
// is refused with the statements that fix it.
func TestReplicateRefusesBrokenWrites(t *testing.T) {
	p := setupPipelineWith(t, []int{0}, nil, true, "contacts_", contactsCfg, contactsDDL...)
	tbl := p.table()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, c := range []struct{ name, cfg, want string }{
		{"an identity column excluded", `"exclude_columns":["status"]`, "does not cover the replica identity"},
		{"a filter outside the identity", `"row_filter":"note <> 'x'"`, "not part of the replica identity"},
	} {
		tc, err := tables.Parse([]byte(fmt.Sprintf(`{"topic_prefix":"e2e_%s.","tables":[{"name":%q,"id_column":"id","id_layout":"serial",%s}]}`, p.suffix, tbl, c.cfg)))
		if err != nil {
			t.Fatal(err)
		}
		cfg := p.readerConfig(0)
		cfg.Tables = tc
		rctx, stop := context.WithTimeout(ctx, 20*time.Second)
		err = reader.New(cfg, p.log, prometheus.NewRegistry()).Run(rctx)
		stop()
		if err == nil || !strings.Contains(err.Error(), "would break UPDATE or DELETE") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", c.name, err)
		}
		var exists bool
		conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[0])
		if err != nil {
			t.Fatal(err)
		}
		err = conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)", cfg.Publication).Scan(&exists)
		conn.Close(ctx)
		if err != nil || exists {
			t.Errorf("%s: the publication was left behind (%v)", c.name, err)
		}
		// The source's writes still work.
		p.exec(ctx, 0, fmt.Sprintf("UPDATE %s SET note = 'still writable' WHERE id = 1", tbl))
	}

	// A publication made beforehand that publishes the table whole, while
	// the config filters it: refused with the statements that fix it, which
	// then let the reader start (the filter compared in PostgreSQL's form).
	cfg := p.readerConfig(0)
	pub := pgx.Identifier{cfg.Publication}.Sanitize()
	p.exec(ctx, 0, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
	rctx, stop := context.WithTimeout(ctx, 20*time.Second)
	err := reader.New(cfg, p.log, prometheus.NewRegistry()).Run(rctx)
	stop()
	if err == nil || !strings.Contains(err.Error(), "ALTER PUBLICATION "+pub+" DROP TABLE") {
		t.Fatalf("a publication without the config's filter: %v", err)
	}
	fix := err.Error()[strings.Index(err.Error(), "ALTER PUBLICATION "+pub+" DROP TABLE"):]
	for _, stmt := range strings.Split(fix, "; ") {
		p.exec(ctx, 0, stmt)
	}
	// Past its checks, the reader creates its slot: then it is stopped.
	rctx, stop = context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- reader.New(cfg, p.log, prometheus.NewRegistry()).Run(rctx) }()
	p.waitFor(ctx, 60*time.Second, "the reader past its checks (its slot created)", func() bool {
		select {
		case err := <-done:
			done <- err
			return true
		default:
		}
		return p.slotExists(ctx, cfg.Slot)
	})
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("after the fix: %v", err)
	}
	if !p.slotExists(ctx, cfg.Slot) {
		t.Error("after the fix the reader did not get as far as its slot")
	}
}

// compareContacts compares the shard's unarchived contacts (without email)
// with ClickHouse's live rows.
func (p *pipeline) compareContacts(ctx context.Context, tbl string) string {
	return p.compareKeyed(ctx,
		`SELECT id::text, status || ' ' || coalesce(note, '') || ' ' || amount::text FROM `+pgx.Identifier{tbl}.Sanitize()+` WHERE status <> 'archived'`,
		fmt.Sprintf("SELECT toString(id), concat(status, ' ', ifNull(note, ''), ' ', toString(amount)) FROM `%s`.`%s` FINAL WHERE _deleted = 0", p.chDB, tbl))
}

// compareKeyed compares (id, value) rows read from shard 0 by pgSQL with
// those read from ClickHouse by chSQL: "" when equal, else a summary of
// the differences.
func (p *pipeline) compareKeyed(ctx context.Context, pgSQL, chSQL string) string {
	want, err := p.shardPairs(ctx, 0, pgSQL)
	if err != nil {
		return err.Error()
	}
	got := map[string]string{}
	crows, err := p.store.Conn().Query(ctx, chSQL)
	if err != nil {
		return err.Error()
	}
	defer crows.Close()
	for crows.Next() {
		var id, v string
		if err := crows.Scan(&id, &v); err != nil {
			return err.Error()
		}
		got[id] = v
	}
	var diffs []string
	for id, w := range want {
		if g, ok := got[id]; !ok {
			diffs = append(diffs, "missing "+id)
		} else if g != w {
			diffs = append(diffs, fmt.Sprintf("%s: %q, want %q", id, g, w))
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			diffs = append(diffs, "extra "+id)
		}
	}
	if len(diffs) > 0 {
		return fmt.Sprintf("%d differences, e.g. %v", len(diffs), diffs[:min(len(diffs), 5)])
	}
	return ""
}

// slotExists says whether the replication slot exists on shard 0.
func (p *pipeline) slotExists(ctx context.Context, slot string) bool {
	conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[0])
	if err != nil {
		return false
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var ok bool
	err = conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)", slot).Scan(&ok)
	return err == nil && ok
}
