package reader

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/tables"
)

func strp(s string) *string { return &s }

func TestChunkQuery(t *testing.T) {
	id := []keyColumn{{Name: "id", Type: "bigint", OID: oidInt8}}
	two := []keyColumn{{Name: "ws", Type: "bigint", OID: oidInt8}, {Name: "Name", Type: "character varying(20)", OID: 1043}}
	for _, c := range []struct {
		name  string
		key   []keyColumn
		rg    rangeProgress
		query string
		args  []string
	}{
		{"no key: whole table", nil, rangeProgress{}, `SELECT * FROM "public"."t"`, nil},
		{"first chunk, unbounded", id, rangeProgress{},
			`SELECT * FROM "public"."t" ORDER BY "id" LIMIT 100`, nil},
		{"first chunk of a middle range", id, rangeProgress{Lo: strp("10"), Hi: strp("20")},
			`SELECT * FROM "public"."t" WHERE "id" > $1::bigint AND "id" <= $2::bigint ORDER BY "id" LIMIT 100`, []string{"10", "20"}},
		{"next chunk: the last key replaces the lower bound", id, rangeProgress{Lo: strp("10"), Hi: strp("20"), After: []string{"15"}},
			`SELECT * FROM "public"."t" WHERE "id" > $1::bigint AND "id" <= $2::bigint ORDER BY "id" LIMIT 100`, []string{"15", "20"}},
		{"composite key: row comparison", two, rangeProgress{After: []string{"7", "it's"}},
			`SELECT * FROM "public"."t" WHERE ("ws", "Name") > ($1::bigint, $2::character varying(20)) ORDER BY "ws", "Name" LIMIT 100`, []string{"7", "it's"}},
		{"composite key, last range", two, rangeProgress{Lo: strp("5")},
			`SELECT * FROM "public"."t" WHERE "ws" > $1::bigint ORDER BY "ws", "Name" LIMIT 100`, []string{"5"}},
	} {
		q, args := chunkQuery(tableSelection(tables.Table{Schema: "public", Name: "t"}, nil), c.key, &c.rg, 100)
		var got []string
		for _, a := range args {
			got = append(got, string(a))
		}
		if q != c.query || !reflect.DeepEqual(got, c.args) {
			t.Errorf("%s:\n got %s %q\nwant %s %q", c.name, q, got, c.query, c.args)
		}
	}
}

func TestSplits(t *testing.T) {
	if got := histogramSplits("{1,5,9,13,17,21,25,29,33}", true, 4); !reflect.DeepEqual(got, []string{"9", "17", "25"}) {
		t.Errorf("histogram: %v", got)
	}
	// Numeric order, not text order; duplicates dropped.
	if got := histogramSplits("{1,100,20,20,3,1000}", true, 3); !reflect.DeepEqual(got, []string{"20", "100"}) {
		t.Errorf("histogram order: %v", got)
	}
	for _, bad := range []string{"", "{}", "{1,2}", "{a,b,c,d}", "1,2,3"} {
		if got := histogramSplits(bad, true, 4); got != nil {
			t.Errorf("histogram %q: %v, want none", bad, got)
		}
	}
	if got := histogramSplits("{0a,1b,2c,3d,4e}", false, 2); !reflect.DeepEqual(got, []string{"2c"}) {
		t.Errorf("uuid-like: %v", got)
	}
	if got := widthSplits(0, 100, 4); !reflect.DeepEqual(got, []string{"25", "50", "75"}) {
		t.Errorf("width: %v", got)
	}
	if got := widthSplits(5, 6, 4); !reflect.DeepEqual(got, []string{"5"}) {
		t.Errorf("narrow width: %v", got)
	}
	if got := widthSplits(-9223372036854775808, 9223372036854775807, 2); len(got) != 1 {
		t.Errorf("full int64 width: %v", got)
	}
	rs := rangesFrom([]string{"10", "20"})
	if len(rs) != 3 || rs[0].Lo != nil || *rs[0].Hi != "10" || *rs[1].Lo != "10" || *rs[1].Hi != "20" || *rs[2].Lo != "20" || rs[2].Hi != nil {
		t.Errorf("ranges: %+v", rs)
	}
	if rs := rangesFrom(nil); len(rs) != 1 || rs[0].Lo != nil || rs[0].Hi != nil {
		t.Errorf("one range: %+v", rs)
	}
}

// TestSnapProgress: a range's stored position moves only over chunks that
// are sealed and completely acknowledged, in order, never past a failure.
func TestSnapProgress(t *testing.T) {
	plan := snapshotState{Tables: []tableProgress{{Name: "t", Key: []string{"id"}, Estimate: 100,
		Ranges: []rangeProgress{{}, {Lo: strp("50")}}}}}
	var acked int64
	p := newSnapProgress(plan, func(_ int, rows int64, _ *tableProgress) { acked += rows })

	c1 := p.open(0, 0)
	p.seal(c1, 2, []string{"2"}, false)
	c2 := p.open(0, 0)
	p.ack(c2, nil) // acknowledged before sealed, and before the earlier chunk
	if st, _ := p.state(); st.Tables[0].Ranges[0].After != nil {
		t.Fatalf("recorded an unsealed chunk: %+v", st.Tables[0].Ranges[0])
	}
	p.seal(c2, 1, []string{"3"}, true)
	if st, _ := p.state(); st.Tables[0].Ranges[0].After != nil {
		t.Fatalf("recorded past an unacknowledged chunk: %+v", st.Tables[0].Ranges[0])
	}
	p.ack(c1, nil)
	if st, _ := p.state(); st.Tables[0].Ranges[0].After != nil {
		t.Fatalf("recorded a chunk with a record outstanding: %+v", st.Tables[0].Ranges[0])
	}
	p.ack(c1, nil)
	st, changed := p.state()
	r0 := st.Tables[0].Ranges[0]
	if !changed || !reflect.DeepEqual(r0.After, []string{"3"}) || r0.Rows != 3 || r0.Chunks != 2 || !r0.Done || acked != 3 {
		t.Fatalf("after both acks: %+v changed=%v acked=%d", r0, changed, acked)
	}
	if _, changed := p.state(); changed {
		t.Error("state unchanged but reported changed")
	}
	if plan.Tables[0].Ranges[0].Done {
		t.Error("the plan passed in was modified")
	}
	if got := progressRatio(&st.Tables[0]); got != 0.03 {
		t.Errorf("ratio %v, want 0.03", got)
	}

	// A failed record stops all recording, in every range.
	c3 := p.open(0, 1)
	p.seal(c3, 2, []string{"60"}, true)
	p.ack(c3, errors.New("boom"))
	p.ack(c3, nil)
	st, _ = p.state()
	if r1 := st.Tables[0].Ranges[1]; r1.Done || r1.After != nil || p.failure() == nil {
		t.Fatalf("recorded past a failure: %+v", r1)
	}
	tot := p.totals()
	if tot.rows != 3 || tot.ranges != 2 || tot.rangesDone != 1 || tot.tablesDone != 0 || tot.estimate != 100 {
		t.Errorf("totals %+v", tot)
	}

	// A chunk whose read failed is never sealed: nothing after it counts.
	p2 := newSnapProgress(plan, nil)
	bad := p2.open(0, 0)
	p2.ack(bad, nil)
	good := p2.open(0, 0)
	p2.seal(good, 1, []string{"9"}, true)
	p2.ack(good, nil)
	if st, _ := p2.state(); st.Tables[0].Ranges[0].After != nil || st.Tables[0].Ranges[0].Done {
		t.Errorf("recorded past an unsealed chunk: %+v", st.Tables[0].Ranges[0])
	}
}

func TestProgressRatioAndETA(t *testing.T) {
	tp := tableProgress{Estimate: 10, Ranges: []rangeProgress{{Rows: 20}}}
	if got := progressRatio(&tp); got != 0.99 {
		t.Errorf("over the estimate, not done: %v", got)
	}
	tp.Ranges[0].Done = true
	if got := progressRatio(&tp); got != 1 {
		t.Errorf("done: %v", got)
	}
	if got := progressRatio(&tableProgress{Ranges: []rangeProgress{{Rows: 5}}}); got != 0 {
		t.Errorf("unknown estimate: %v", got)
	}
	if d, ok := eta(250, 1250, 100); !ok || d != 10*time.Second {
		t.Errorf("eta %v %v", d, ok)
	}
	if _, ok := eta(10, 0, 100); ok {
		t.Error("eta without an estimate")
	}
	if d, ok := eta(2000, 1000, 100); !ok || d != 0 {
		t.Errorf("eta past the estimate: %v", d)
	}
}

func TestPacer(t *testing.T) {
	p := newPacer(1000)
	start := time.Now()
	for i := 0; i < 3; i++ {
		if err := p.wait(t.Context(), 50); err != nil {
			t.Fatal(err)
		}
	}
	// 3 reservations of 50 rows at 1000/s: the third waits ~100 ms.
	if d := time.Since(start); d < 90*time.Millisecond {
		t.Errorf("3 x 50 rows at 1000/s took %v", d)
	}
	if err := newPacer(0).wait(t.Context(), 1e9); err != nil {
		t.Error(err)
	}
}

func TestPlanCtid(t *testing.T) {
	// 1000 blocks of 50 rows, chunks of 500 rows: 10-block chunks, 4 ranges
	// covering [0, 1000) without gap or overlap.
	tp := tableProgress{Estimate: 50_000}
	planCtid(&tp, 42, 1000, 4, 500)
	if !tp.Ctid || tp.Filenode != 42 || tp.ChunkBlocks != 10 || len(tp.Ranges) != 4 {
		t.Fatalf("plan: %+v", tp)
	}
	want := "0"
	for _, rg := range tp.Ranges {
		if *rg.Lo != want {
			t.Errorf("range starts at %s, want %s", *rg.Lo, want)
		}
		want = *rg.Hi
	}
	if want != "1000" {
		t.Errorf("ranges end at %s, want 1000", want)
	}
	// Small or empty tables: one range.
	small := tableProgress{Estimate: 600}
	planCtid(&small, 1, 12, 4, 500)
	empty := tableProgress{}
	planCtid(&empty, 1, 0, 4, 500)
	if len(small.Ranges) != 1 || len(empty.Ranges) != 1 || *empty.Ranges[0].Hi != "0" {
		t.Errorf("small %+v, empty %+v", small.Ranges, empty.Ranges)
	}
	// Resume: the next block is After, not Lo.
	next, end, err := ctidBounds(&rangeProgress{Lo: strp("250"), Hi: strp("500"), After: []string{"260"}})
	if err != nil || next != 260 || end != 500 {
		t.Errorf("bounds: %d %d %v", next, end, err)
	}
	if _, _, err := ctidBounds(&rangeProgress{}); err == nil {
		t.Error("a ctid range without bounds was accepted")
	}
	q, args := ctidChunkQuery(tableSelection(tables.Table{Schema: "public", Name: "t"}, nil), 10, 20)
	if q != `SELECT * FROM "public"."t" WHERE ctid >= $1::tid AND ctid < $2::tid` || string(args[0]) != "(10,0)" || string(args[1]) != "(20,0)" {
		t.Errorf("query %s %q", q, args)
	}
}

// A column list and a row filter narrow what the copy reads to what the
// publication publishes.
func TestTableSelection(t *testing.T) {
	tb := tables.Table{Schema: "public", Name: "t", IDColumn: "id", ExcludeColumns: []string{"email"}, RowFilter: "status <> 'archived'"}
	sel := tableSelection(tb, []envelope.Column{{Name: "id"}, {Name: "status"}})
	q, _ := chunkQuery(sel, []keyColumn{{Name: "id", Type: "bigint", OID: oidInt8}}, &rangeProgress{After: []string{"5"}}, 10)
	want := `SELECT "id", "status" FROM "public"."t" WHERE (status <> 'archived') AND "id" > $1::bigint ORDER BY "id" LIMIT 10`
	if q != want {
		t.Errorf("chunk query\n got %s\nwant %s", q, want)
	}
	q, _ = ctidChunkQuery(sel, 0, 8)
	if want := `SELECT "id", "status" FROM "public"."t" WHERE ctid >= $1::tid AND ctid < $2::tid AND (status <> 'archived')`; q != want {
		t.Errorf("ctid query\n got %s\nwant %s", q, want)
	}
	if q, _ := chunkQuery(tableSelection(tables.Table{Schema: "public", Name: "t", RowFilter: "a > 1"}, nil), nil, &rangeProgress{}, 10); q != `SELECT * FROM "public"."t" WHERE (a > 1)` {
		t.Errorf("keyless filtered query: %s", q)
	}
}

func TestSplitSnapshot(t *testing.T) {
	for _, c := range []struct {
		text string
		xmin string
		xmax string
		xip  []string
		bad  bool
	}{
		{text: "100:105:101,103", xmin: "100", xmax: "105", xip: []string{"101", "103"}},
		{text: "100:100:", xmin: "100", xmax: "100", xip: []string{}},
		// An exported slot snapshot printed so; pg_snapshot's input refuses it.
		{text: "74715:74674:", xmin: "74715", xmax: "74674", xip: []string{}},
		{text: "100:105", bad: true},
		{text: "100:x:", bad: true},
		{text: "100:105:101,", bad: true},
	} {
		xmin, xmax, xip, err := splitSnapshot(c.text)
		if c.bad {
			if err == nil {
				t.Errorf("%q: no error", c.text)
			}
			continue
		}
		if err != nil || xmin != c.xmin || xmax != c.xmax || !reflect.DeepEqual(xip, c.xip) {
			t.Errorf("%q: %q %q %q %v, want %q %q %q", c.text, xmin, xmax, xip, err, c.xmin, c.xmax, c.xip)
		}
	}
}
