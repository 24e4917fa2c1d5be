package tests

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/envelope"
)

// TestAddColumnMissingValues: a column added at the source with a default
// (envelope.Column.Missing: PostgreSQL's value for rows older than the
// column) becomes a ClickHouse column with that DEFAULT, for every mapped
// type and a string that needs escaping. Rows stored before the ADD read
// the value, and so do changes that arrive after the ADD with the older
// column list (from another partition, or replayed); a change that says
// NULL stays NULL. A loader started later (its layout read back from
// ClickHouse) keeps doing so.
func TestAddColumnMissingValues(t *testing.T) {
	st := loadStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := "e2e_missing_" + randSuffix()
	open := func() *chstore.Store {
		s, err := chstore.Open(ctx, chstore.Options{Addr: st.ClickHouseAddr, Database: db})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	store := open()
	defer func() {
		store.Conn().Exec(context.Background(), "DROP DATABASE IF EXISTS `"+db+"`") //nolint:errcheck
		store.Close()
	}()
	s := func(v string) *string { return &v }
	v1 := []envelope.Column{{Name: "id", Type: "bigint", OID: 20, Key: true}, {Name: "title", Type: "text", OID: 25}}
	added := []struct {
		col  envelope.Column
		want string // toString() of the column in ClickHouse for older rows
	}{
		{envelope.Column{Name: "p", Type: "integer", OID: 23, Missing: s("5")}, "5"},
		{envelope.Column{Name: "big", Type: "bigint", OID: 20, Missing: s("-9223372036854775808")}, "-9223372036854775808"},
		{envelope.Column{Name: "s", Type: "text", OID: 25, Missing: s(`it's \ "q"` + "\n{x}")}, `it's \ "q"` + "\n{x}"},
		{envelope.Column{Name: "d", Type: "numeric(12,2)", OID: 1700, Missing: s("12.30")}, "12.30"},
		{envelope.Column{Name: "wide", Type: "numeric(30,4)", OID: 1700, Missing: s("-12345678901234567890.5")}, "-12345678901234567890.5000"},
		{envelope.Column{Name: "ts", Type: "timestamp with time zone", OID: 1184, Missing: s("2026-01-02 04:04:05.25+01")}, "2026-01-02 03:04:05"},
		{envelope.Column{Name: "dt", Type: "date", OID: 1082, Missing: s("2026-01-02")}, "2026-01-02"},
		{envelope.Column{Name: "b", Type: "boolean", OID: 16, Missing: s("t")}, "1"},
		{envelope.Column{Name: "u", Type: "uuid", OID: 2950, Missing: s("0190b0a8-0000-7000-8000-000000000001")}, "0190b0a8-0000-7000-8000-000000000001"},
		{envelope.Column{Name: "f", Type: "double precision", OID: 701, Missing: s("1.5")}, "1.5"},
		{envelope.Column{Name: "finf", Type: "double precision", OID: 701, Missing: s("Infinity")}, "inf"},
		{envelope.Column{Name: "arr", Type: "integer[]", OID: 1007, Missing: s("{1,2}")}, "{1,2}"},
		{envelope.Column{Name: "plain", Type: "text", OID: 25}, "NULL"}, // added without a default
	}
	v2 := append([]envelope.Column{}, v1...)
	for _, a := range added {
		v2 = append(v2, a.col)
	}

	insert := func(st *chstore.Store, cols []envelope.Column, rows ...*chstore.Row) {
		t.Helper()
		tab, err := st.EnsureTable(ctx, "t", []string{"id"}, cols)
		if err != nil {
			t.Fatal(err)
		}
		b := tab.NewBlock(len(rows), time.Now())
		idx := make([]int, len(rows))
		for i, r := range rows {
			if err := b.Set(i, r); err != nil {
				t.Fatalf("row %d: %v", i, err)
			}
			idx[i] = i
		}
		if err := st.InsertBlock(ctx, b, idx); err != nil {
			t.Fatal(err)
		}
	}
	row := func(id int, vals map[string]*string) *chstore.Row {
		vals["id"] = s(fmt.Sprint(id))
		return &chstore.Row{Shard: 0, Version: uint64(100 + id), CommitLSN: uint64(100 + id), CommitTS: time.Now(), Values: vals}
	}
	insert(store, v1, row(1, map[string]*string{"title": s("stored before the ADD")}))

	nulls := map[string]*string{"title": s("explicit NULLs")}
	explicit := map[string]*string{"title": s("explicit values")}
	for _, a := range added {
		nulls[a.col.Name] = nil
		explicit[a.col.Name] = a.col.Missing
	}
	explicit["p"], explicit["plain"] = s("6"), s("x")
	insert(store, v2,
		row(2, map[string]*string{"title": s("older column list, arrived after the ADD")}),
		row(3, nulls), row(4, explicit))

	// A restarted loader: the layout (and the defaults) read back.
	store2 := open()
	defer store2.Close()
	insert(store2, v2, row(5, map[string]*string{"title": s("older column list, after a restart")}))

	want := map[int]map[string]string{1: {}, 2: {}, 3: {}, 4: {}, 5: {}}
	for _, a := range added {
		for _, id := range []int{1, 2, 5} {
			want[id][a.col.Name] = a.want
		}
		want[3][a.col.Name] = "NULL"
		want[4][a.col.Name] = a.want
	}
	want[4]["p"], want[4]["plain"] = "6", "x"

	var exprs []string
	for _, a := range added {
		exprs = append(exprs, fmt.Sprintf("ifNull(toString(`%s`), 'NULL')", a.col.Name))
	}
	rows, err := store.Conn().Query(ctx, fmt.Sprintf("SELECT toInt64(id), %s FROM `%s`.t FINAL ORDER BY id", strings.Join(exprs, ", "), db))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var id int64
		vals := make([]string, len(added))
		dest := []any{&id}
		for i := range vals {
			dest = append(dest, &vals[i])
		}
		if err := rows.Scan(dest...); err != nil {
			t.Fatal(err)
		}
		seen++
		for i, a := range added {
			if w := want[int(id)][a.col.Name]; vals[i] != w {
				t.Errorf("row %d column %s (%s): ClickHouse %q, want %q", id, a.col.Name, a.col.Type, vals[i], w)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if seen != 5 {
		t.Fatalf("%d rows in ClickHouse, want 5", seen)
	}
}
