package tests

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary/tributary/internal/envelope"
)

// Reader schema tests: ALTER TABLE through the reader, end to
// end, while two shards keep taking writes.

// schemaStep is one ALTER on one shard: changes whose own WAL record lies
// below at were written under the old columns, those above under the new.
// (The ALTER holds an ACCESS EXCLUSIVE lock, so no other transaction writes
// the table between its catalog change and its commit.)
type schemaStep struct {
	at    envelope.LSN
	apply func(cols []envelope.Column) []envelope.Column
}

// TestReaderSchemaChanges: on a running pipeline with writes on two shards,
// ADD COLUMN (no default; DEFAULT 5; NOT NULL DEFAULT 'new'), DROP COLUMN,
// RENAME COLUMN, and an ADD COLUMN inside a transaction that writes rows
// before and after it. Then:
//   - ClickHouse equals the shards (p.compare), and every column agrees
//     too, under schema/clickhouse.md's rules: an added column has, in rows
//     whose last change predates it, the value the source shows there (the
//     default PostgreSQL fills old rows with without writing WAL, which the
//     reader reads from the catalog: envelope.Column.Missing), or NULL when
//     added without one; a dropped column keeps its value in older rows and
//     is NULL in newer ones (its old-row value, if it had one). A rename is
//     not a rename downstream: it is a drop plus an add (the old column
//     keeps the older rows' values, the new one has the old-row value).
//   - Every change the reader wrote carries the column list (names, order,
//     types, key flag) of its relation as of the change's own WAL position
//     — in the mixed transaction, the old list before the ALTER and the new
//     one after — and an after image with exactly those columns.
func TestReaderSchemaChanges(t *testing.T) {
	p := newPipeline(t, []int{0, 1}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tbl := p.table()
	q := pgx.Identifier{tbl}.Sanitize()

	// DDL during the initial copy stops the reader by design (snapshot.go:
	// "values for columns (did the table change?)"): start after it.
	for _, s := range p.shards {
		slot := fmt.Sprintf("e2e_%s_%d", p.suffix, s)
		p.waitFor(ctx, 60*time.Second, "the initial snapshot of "+slot, func() bool {
			st, err := readState(ctx, p.brokers, "e2e_"+p.suffix+".state", slot)
			return err == nil && st != nil && st.SnapshotDone
		})
	}
	// Rows with an amount, so that dropping it matters.
	for _, s := range p.shards {
		p.exec(ctx, s, fmt.Sprintf(`INSERT INTO %s (workspace_id, title, body, amount)
			SELECT %d, 'seed', 'b', g + 0.37 FROM generate_series(1, 30) g`, q, s))
	}
	writes, stopWrites := p.startSteadyWrites(ctx, tbl)
	defer stopWrites()

	steps := map[int][]schemaStep{}
	add := func(cols []envelope.Column, more ...envelope.Column) []envelope.Column {
		return append(slices.Clone(cols), more...)
	}
	type lsns struct{ add, drop, rename, extra envelope.LSN }
	at := map[int]*lsns{}
	amounts := map[string]*string{} // "shard/id" -> amount when it was dropped
	for _, s := range p.shards {
		at[s] = &lsns{}
		at[s].add = p.alter(ctx, s, nil, fmt.Sprintf(`ALTER TABLE %s ADD COLUMN note text,
			ADD COLUMN priority integer DEFAULT 5, ADD COLUMN status text NOT NULL DEFAULT 'new'`, q))
		steps[s] = append(steps[s], schemaStep{at[s].add, func(c []envelope.Column) []envelope.Column {
			return add(c, envelope.Column{Name: "note", Type: "text", OID: 25},
				envelope.Column{Name: "priority", Type: "integer", OID: 23, Missing: text("5")},
				envelope.Column{Name: "status", Type: "text", OID: 25, Missing: text("new")})
		}})
	}
	// The reader reads old-row values from the catalog when it meets the
	// new Relation (with the first change after the ADD): let it, before the
	// rename below changes the names it looks them up by.
	p.waitFor(ctx, 30*time.Second, "the readers past the ADD COLUMN", func() bool {
		pos := p.slotPositions(ctx)
		for _, s := range p.shards {
			if pos[s] <= at[s].add {
				return false
			}
		}
		return true
	})
	for _, s := range p.shards {
		p.exec(ctx, s, fmt.Sprintf(`INSERT INTO %s (workspace_id, title, body, note, priority, status)
			SELECT %d, 'explicit', 'b', 'n' || g, g, 'open' FROM generate_series(1, 10) g`, q, s))
		p.exec(ctx, s, fmt.Sprintf(`UPDATE %s SET note = 'touched', status = 'seen' WHERE id IN (SELECT id FROM %[1]s WHERE title = 'seed' LIMIT 5)`, q))
	}
	time.Sleep(time.Second)
	for _, s := range p.shards {
		at[s].drop = p.alter(ctx, s, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, "SELECT id::text, amount::text FROM "+q)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var id string
				var amount *string
				if err := rows.Scan(&id, &amount); err != nil {
					return err
				}
				amounts[fmt.Sprintf("%d/%s", s, id)] = amount
			}
			return rows.Err()
		}, fmt.Sprintf("ALTER TABLE %s DROP COLUMN amount", q))
		steps[s] = append(steps[s], schemaStep{at[s].drop, func(c []envelope.Column) []envelope.Column {
			return slices.DeleteFunc(slices.Clone(c), func(c envelope.Column) bool { return c.Name == "amount" })
		}})
	}
	time.Sleep(time.Second)
	for _, s := range p.shards {
		at[s].rename = p.alter(ctx, s, nil, fmt.Sprintf("ALTER TABLE %s RENAME COLUMN status TO state", q))
		steps[s] = append(steps[s], schemaStep{at[s].rename, func(c []envelope.Column) []envelope.Column {
			c = slices.Clone(c)
			for i := range c {
				if c[i].Name == "status" {
					c[i].Name = "state"
				}
			}
			return c
		}})
		p.exec(ctx, s, fmt.Sprintf(`UPDATE %s SET state = 'renamed' WHERE id IN (SELECT id FROM %[1]s WHERE title = 'explicit' LIMIT 3)`, q))
	}
	time.Sleep(time.Second)

	// An ADD COLUMN between writes of one transaction (shard 0); a plain
	// one on shard 1.
	var mixedBefore, mixedAfter int64
	for _, s := range p.shards {
		var before func(pgx.Tx) error
		var after string
		if s == 0 {
			before = func(tx pgx.Tx) error {
				return tx.QueryRow(ctx, fmt.Sprintf("INSERT INTO %s (workspace_id, title, body) VALUES (1, 'mixed before', 'b') RETURNING id", q)).Scan(&mixedBefore)
			}
			after = fmt.Sprintf("INSERT INTO %s (workspace_id, title, body, extra) VALUES (1, 'mixed after', 'b', 7) RETURNING id", q)
		}
		at[s].extra = p.alterThen(ctx, s, before, fmt.Sprintf("ALTER TABLE %s ADD COLUMN extra integer DEFAULT 1", q), after, &mixedAfter)
		steps[s] = append(steps[s], schemaStep{at[s].extra, func(c []envelope.Column) []envelope.Column {
			return add(c, envelope.Column{Name: "extra", Type: "integer", OID: 23, Missing: text("1")})
		}})
	}
	time.Sleep(2 * time.Second)
	stopWrites()
	t.Logf("%d writes; ALTER positions %+v %+v", writes.Load(), *at[0], *at[1])

	positions := map[int][4]envelope.LSN{}
	for s, l := range at {
		positions[s] = [4]envelope.LSN{l.add, l.drop, l.rename, l.extra}
	}
	convStart := time.Now()
	var diff string
	for time.Since(convStart) < 60*time.Second {
		if diff = p.compare(ctx, tbl); diff == "" {
			diff = p.compareEvolved(ctx, positions, amounts)
		}
		if diff == "" {
			break
		}
		if err := p.failed(); err != nil {
			t.Fatalf("a component failed: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if diff != "" {
		t.Fatalf("ClickHouse differs from the shards:\n%s", diff)
	}
	t.Logf("converged %s after the writes stopped", time.Since(convStart).Round(100*time.Millisecond))
	if err := p.failed(); err != nil {
		t.Fatalf("a component failed: %v", err)
	}

	// The case of the old-row values, shown exercised: rows untouched since
	// the ADD (no change carries the default) and equal to the source
	// (compareEvolved above).
	var old uint64
	for _, s := range p.shards {
		var n uint64
		err := p.store.Conn().QueryRow(ctx, fmt.Sprintf("SELECT count() FROM `%s`.`%s` FINAL WHERE _deleted = 0 AND _shard = ? AND bitAnd(_version, ?) < ? AND priority = 5 AND state = 'new' AND extra = 1",
			p.chDB, tbl), uint16(s), uint64(envelope.MaxLSN), uint64(at[s].add)).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		old += n
	}
	if old == 0 {
		t.Errorf("no row untouched since the ADD COLUMN is left with the source's defaults: the old-row case was not exercised")
	}
	t.Logf("%d live rows last changed before ADD COLUMN: priority 5, state 'new', extra 1 in ClickHouse, as at the source", old)

	// ClickHouse column types: added columns Nullable, dropped and renamed
	// ones kept.
	wantTypes := map[string]string{"note": "Nullable(String)", "priority": "Nullable(Int32)", "status": "Nullable(String)",
		"state": "Nullable(String)", "amount": "Nullable(Decimal(12, 2))", "extra": "Nullable(Int32)"}
	rows, err := p.store.Conn().Query(ctx, "SELECT name, type FROM system.columns WHERE database = ? AND table = ?", p.chDB, tbl)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for rows.Next() {
		var n, ty string
		if err := rows.Scan(&n, &ty); err != nil {
			t.Fatal(err)
		}
		got[n] = ty
	}
	rows.Close()
	for n, ty := range wantTypes {
		if got[n] != ty {
			t.Errorf("ClickHouse column %s: type %q, want %q", n, got[n], ty)
		}
	}

	p.checkEnvelopes(ctx, steps, mixedBefore, mixedAfter)
}

// alter runs ddl on shard in a transaction, after lock and the optional
// before (on the locked table), and returns the WAL insert position right
// after the DDL: every change of another transaction lies on one side of
// it, and so do the changes of this one.
func (p *pipeline) alter(ctx context.Context, shard int, before func(pgx.Tx) error, ddl string) envelope.LSN {
	p.t.Helper()
	return p.alterThen(ctx, shard, before, ddl, "", nil)
}

// alterThen is alter followed, in the same transaction, by an optional
// INSERT ... RETURNING id into *id.
func (p *pipeline) alterThen(ctx context.Context, shard int, before func(pgx.Tx) error, ddl, then string, id *int64) envelope.LSN {
	p.t.Helper()
	conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[shard])
	if err != nil {
		p.t.Fatalf("connect shard %d: %v", shard, err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		p.t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit: a no-op
	if _, err := tx.Exec(ctx, "LOCK TABLE "+pgx.Identifier{p.table()}.Sanitize()+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		p.t.Fatalf("shard %d: lock: %v", shard, err)
	}
	if before != nil {
		if err := before(tx); err != nil {
			p.t.Fatalf("shard %d: before %s: %v", shard, ddl, err)
		}
	}
	if _, err := tx.Exec(ctx, ddl); err != nil {
		p.t.Fatalf("shard %d: %s: %v", shard, ddl, err)
	}
	var pos string
	if err := tx.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&pos); err != nil {
		p.t.Fatal(err)
	}
	if then != "" {
		if err := tx.QueryRow(ctx, then).Scan(id); err != nil {
			p.t.Fatalf("shard %d: %s: %v", shard, then, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		p.t.Fatalf("shard %d: commit %s: %v", shard, ddl, err)
	}
	l, err := envelope.ParseLSN(pos)
	if err != nil {
		p.t.Fatal(err)
	}
	return l
}

// compareEvolved compares the columns p.compare does not (note, priority,
// status/state, amount, extra) for every live row, by the WAL position of
// its last change (the version's LSN part) against the ALTER positions
// (add, drop, rename, extra) of its shard; amounts are the source's amount
// of each row when it was dropped. It returns "" when all agree.
func (p *pipeline) compareEvolved(ctx context.Context, at map[int][4]envelope.LSN, amounts map[string]*string) string {
	type src struct{ note, priority, state, extra *string }
	want := map[string]src{}
	for _, s := range p.shards {
		conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[s])
		if err != nil {
			return err.Error()
		}
		rows, err := conn.Query(ctx, "SELECT id::text, note, priority::text, state, extra::text FROM "+pgx.Identifier{p.table()}.Sanitize())
		if err != nil {
			conn.Close(ctx)
			return err.Error()
		}
		for rows.Next() {
			var id string
			var r src
			if err := rows.Scan(&id, &r.note, &r.priority, &r.state, &r.extra); err != nil {
				conn.Close(ctx)
				return err.Error()
			}
			want[fmt.Sprintf("%d/%s", s, id)] = r
		}
		conn.Close(ctx)
	}
	rows, err := p.store.Conn().Query(ctx, fmt.Sprintf("SELECT toString(id), _shard, _version, note, toString(priority), status, state, toString(amount), toString(extra) "+
		"FROM `%s`.`%s` FINAL WHERE _deleted = 0", p.chDB, p.table()))
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var diffs []string
	str := func(s *string) string {
		if s == nil {
			return "NULL"
		}
		return *s
	}
	for rows.Next() {
		var id string
		var shard uint16
		var version uint64
		var note, priority, status, state, amount, extra *string
		if err := rows.Scan(&id, &shard, &version, &note, &priority, &status, &state, &amount, &extra); err != nil {
			return err.Error()
		}
		key := fmt.Sprintf("%d/%s", shard, id)
		w, ok := want[key]
		if !ok {
			continue // p.compare reports it
		}
		// The version is Epoch<<48 | LSN (envelope.RowVersion).
		v, a := envelope.LSN(version)&envelope.MaxLSN, at[int(shard)]
		// A column's value in a row last changed at v: the source's if the
		// change carried the column, else the column's old-row value.
		ifAfter := func(b envelope.LSN, val, old *string) *string {
			if v > b {
				return val
			}
			return old
		}
		exp := map[string]*string{
			"note": ifAfter(a[0], w.note, nil), "priority": ifAfter(a[0], w.priority, text("5")),
			"status": ifAfter(a[0], w.state, text("new")), "state": ifAfter(a[2], w.state, text("new")),
			"extra": ifAfter(a[3], w.extra, text("1")),
		}
		if v > a[2] {
			exp["status"] = text("new") // renamed away: a dropped column, which changes no longer carry
		}
		if v < a[1] {
			exp["amount"] = amounts[key]
		} else {
			exp["amount"] = nil
		}
		have := map[string]*string{"note": note, "priority": priority, "status": status, "state": state, "amount": amount, "extra": extra}
		for _, c := range []string{"note", "priority", "status", "state", "amount", "extra"} {
			if str(have[c]) != str(exp[c]) {
				diffs = append(diffs, fmt.Sprintf("%s (version %s) column %s: ClickHouse %s, want %s", key, v, c, str(have[c]), str(exp[c])))
			}
		}
	}
	if err := rows.Err(); err != nil {
		return err.Error()
	}
	if len(diffs) == 0 {
		return ""
	}
	n := len(diffs)
	if n > 10 {
		diffs = append(diffs[:10], fmt.Sprintf("... and %d more", n-10))
	}
	return strings.Join(diffs, "\n")
}

// checkEnvelopes reads every change of the table's topic and checks its
// column list against the relation's columns at the change's WAL position
// (steps per shard, in order), its after image against the column list,
// and the mixed transaction's two inserts.
func (p *pipeline) checkEnvelopes(ctx context.Context, steps map[int][]schemaStep, mixedBefore, mixedAfter int64) {
	t := p.t
	t.Helper()
	recs, err := readTopic(ctx, p.brokers, p.topic())
	if err != nil {
		t.Fatal(err)
	}
	base := []envelope.Column{
		{Name: "id", Type: "bigint", OID: 20, Key: true}, {Name: "workspace_id", Type: "bigint", OID: 20},
		{Name: "title", Type: "text", OID: 25}, {Name: "body", Type: "text", OID: 25},
		{Name: "amount", Type: "numeric(12,2)", OID: 1700}, {Name: "created_at", Type: "timestamp with time zone", OID: 1184},
	}
	bad, changes := 0, 0
	seen := map[string]int{} // column list -> changes carrying it
	fail := func(format string, args ...any) {
		if bad < 10 {
			t.Errorf(format, args...)
		}
		bad++
	}
	var mixed [2]*envelope.Event
	for _, r := range recs {
		ev, err := envelope.Decode(r.Value)
		if err != nil {
			t.Fatalf("undecodable record %s/%d@%d: %v", r.Topic, r.Partition, r.Offset, err)
		}
		if ev.Kind != envelope.KindChange {
			continue
		}
		changes++
		want := base
		for _, st := range steps[ev.Shard] {
			if ev.LSN > st.at {
				want = st.apply(want)
			}
		}
		if !slices.EqualFunc(ev.Columns, want, sameColumn) {
			fail("shard %d change %s of %s at %s (commit %s): columns %v, want %v", ev.Shard, ev.Op, ev.ID, ev.LSN, ev.CommitLSN, ev.Columns, want)
			continue
		}
		names := make([]string, len(want))
		for i, c := range want {
			names[i] = c.Name
		}
		seen[strings.Join(names, ",")]++
		if ev.Op == envelope.OpInsert || ev.Op == envelope.OpUpdate {
			var got []string
			for n := range ev.After {
				got = append(got, n)
			}
			got = append(got, ev.Unchanged...)
			slices.Sort(got)
			sorted := slices.Sorted(slices.Values(names))
			if !slices.Equal(got, sorted) {
				fail("shard %d %s of %s at %s: after image and unchanged name %v, want %v", ev.Shard, ev.Op, ev.ID, ev.LSN, got, sorted)
			}
		}
		if ev.Op == envelope.OpInsert && ev.Shard == 0 {
			switch ev.ID {
			case fmt.Sprint(mixedBefore):
				mixed[0] = ev
			case fmt.Sprint(mixedAfter):
				mixed[1] = ev
			}
		}
		// Inserts that left the added columns to their defaults carry them.
		if ev.Op == envelope.OpInsert && ev.After["title"] != nil && *ev.After["title"] != "explicit" {
			for _, c := range [][2]string{{"priority", "5"}, {"status", "new"}, {"state", "new"}, {"extra", "1"}} {
				if v, ok := ev.After[c[0]]; ok && (v == nil || *v != c[1]) && !(c[0] == "extra" && ev.ID == fmt.Sprint(mixedAfter)) {
					fail("shard %d insert of %s at %s: %s = %v, want the default %s", ev.Shard, ev.ID, ev.LSN, c[0], v, c[1])
				}
			}
		}
	}
	t.Logf("%d changes checked; column lists seen: %v", changes, seen)
	if len(seen) < 5 {
		t.Errorf("%d distinct column lists in the topic, want at least 5 (before, after add, drop, rename, extra)", len(seen))
	}
	// One transaction, two column lists: the Relation message sent in the
	// middle of it applies from there on.
	switch {
	case mixed[0] == nil || mixed[1] == nil:
		t.Errorf("the mixed transaction's inserts are not both in the topic: %v", mixed)
	case mixed[0].CommitLSN != mixed[1].CommitLSN:
		t.Errorf("the mixed transaction's inserts have commits %s and %s", mixed[0].CommitLSN, mixed[1].CommitLSN)
	case slices.ContainsFunc(mixed[0].Columns, func(c envelope.Column) bool { return c.Name == "extra" }):
		t.Errorf("insert before the ADD COLUMN in the same transaction carries the added column: %v", mixed[0].Columns)
	case mixed[1].After["extra"] == nil || *mixed[1].After["extra"] != "7":
		t.Errorf("insert after the ADD COLUMN in the same transaction: extra = %v, want 7", mixed[1].After["extra"])
	}
}

func text(s string) *string { return &s }

// sameColumn compares envelope columns by value (Missing included).
func sameColumn(a, b envelope.Column) bool {
	if (a.Missing == nil) != (b.Missing == nil) || (a.Missing != nil && *a.Missing != *b.Missing) {
		return false
	}
	a.Missing, b.Missing = nil, nil
	return a == b
}
