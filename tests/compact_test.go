package tests

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/compact"
	"github.com/tributary/tributary/internal/loader"
)

// TestCompactKeeper: the keeper merges a table of many parts to one, and
// every FINAL read answers as before; it leaves alone a table with few
// parts, one over its size bound, and one that does not exist.
func TestCompactKeeper(t *testing.T) {
	store, db := scratchStore(t, "e2e_compact_")
	conn := store.Conn()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	exec := func(sql string) {
		t.Helper()
		if err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// The loader's engine and key. Background merges are off for these
	// tables (no part is small enough for max_bytes_to_merge...), so the
	// parts are still there when the keeper looks; OPTIMIZE FINAL is not
	// bound by the setting.
	for _, name := range []string{"docs", "big", "few"} {
		exec(fmt.Sprintf(`CREATE TABLE %s.%s (id Int64, title String, _shard UInt16, _version UInt64, _deleted UInt8)
			ENGINE = ReplacingMergeTree(_version) ORDER BY (id, _shard)
			SETTINGS index_granularity = 64, max_bytes_to_merge_at_max_space_in_pool = 1`, db, name))
	}
	// docs and big: 6 inserts, each a part of every id's next version
	// (version 6 of a third of the ids is a tombstone); few: 2 parts.
	for v := 1; v <= 6; v++ {
		for _, name := range []string{"docs", "big"} {
			exec(fmt.Sprintf(`INSERT INTO %s.%s SELECT number, concat('v', toString(%d), '-', toString(number)),
				toUInt16(number %% 4), %d, toUInt8(%d = 6 AND number %% 3 = 0) FROM system.numbers LIMIT 3000`, db, name, v, v, v))
		}
		if v <= 2 {
			exec(fmt.Sprintf(`INSERT INTO %s.few SELECT number, 'x', 0, %d, 0 FROM system.numbers LIMIT 10`, db, v))
		}
	}
	read := func(table string) []string {
		t.Helper()
		rows, err := conn.Query(ctx, fmt.Sprintf("SELECT concat(toString(id), '/', toString(_shard), '/', title) FROM %s.%s FINAL WHERE _deleted = 0 ORDER BY id, _shard", db, table))
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		return out
	}
	parts := func(table string) int {
		t.Helper()
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM system.parts WHERE database = ? AND table = ? AND active", db, table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return int(n)
	}
	before := read("docs")
	if len(before) != 2000 || parts("docs") != 6 || parts("big") != 6 || parts("few") != 2 {
		t.Fatalf("setup: %d live rows, parts docs %d big %d few %d; want 2000 rows, 6, 6, 2", len(before), parts("docs"), parts("big"), parts("few"))
	}
	var bigBytes int64
	if err := conn.QueryRow(ctx, "SELECT toInt64(sum(bytes)) FROM system.parts WHERE database = ? AND table = 'big' AND active", db).Scan(&bigBytes); err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewRegistry()
	// MaxBytes between docs' and big's size would need them to differ:
	// big gets a keeper of its own with a bound below its size.
	k := compact.New(compact.Config{Tables: []string{"docs", "few", "absent"}, MaxParts: 3}, conn, db, slog.Default(), reg)
	out, err := k.Round(ctx)
	if err != nil {
		t.Fatalf("round: %v", err)
	}
	got := map[string]string{}
	for _, o := range out {
		got[o.Table] = o.Result
	}
	want := map[string]string{"docs": compact.ResultDone, "few": compact.ResultFewParts, "absent": compact.ResultMissing}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round results %v, want %v", got, want)
	}
	if n := parts("docs"); n != 1 {
		t.Errorf("docs has %d active parts after the merge, want 1", n)
	}
	if n := parts("few"); n != 2 {
		t.Errorf("few has %d active parts, want 2 (left alone)", n)
	}
	if after := read("docs"); !reflect.DeepEqual(after, before) {
		t.Errorf("FINAL answers changed by the merge: %d rows before, %d after", len(before), len(after))
	}
	if v, _ := metricOf(t, reg, "tributary_loader_compactions_total", map[string]string{"table": "docs", "result": "done"}); v != 1 {
		t.Errorf("compactions_total{docs,done} = %v, want 1", v)
	}
	if v, _ := metricOf(t, reg, "tributary_loader_table_parts", map[string]string{"table": "docs"}); v != 6 {
		t.Errorf("table_parts{docs} = %v, want 6 (as read before the merge)", v)
	}
	// A second round has nothing to do.
	out, err = k.Round(ctx)
	if err != nil || len(out) != 3 || out[0].Result != compact.ResultFewParts {
		t.Errorf("second round: %+v, %v; want docs few_parts", out, err)
	}

	big := compact.New(compact.Config{Tables: []string{"big"}, MaxParts: 3, MaxBytes: bigBytes - 1}, conn, db, slog.Default(), prometheus.NewRegistry())
	out, err = big.Round(ctx)
	if err != nil || len(out) != 1 || out[0].Result != compact.ResultTooLarge {
		t.Fatalf("big with MaxBytes %d (its size %d): %+v, %v; want too_large", bigBytes-1, bigBytes, out, err)
	}
	if n := parts("big"); n != 6 {
		t.Errorf("big has %d parts, want 6 (too large to merge)", n)
	}
}

// TestLoaderCompacts: a loader with a compaction interval merges the
// tables it writes while it writes them, and nothing is lost.
func TestLoaderCompacts(t *testing.T) {
	p, ctx, runCtx := oneShardPipeline(t, 3*time.Minute)
	p.startReader(runCtx, 0)
	reg := p.startMeteredLoader(runCtx, "l1", func(c *loader.Config) {
		c.CompactInterval = 300 * time.Millisecond
		c.CompactMaxParts = 1
	})
	table := pgx.Identifier{p.table()}.Sanitize()
	done := func() float64 {
		v, _ := metricOf(t, reg, "tributary_loader_compactions_total", map[string]string{"table": p.table(), "result": compact.ResultDone})
		return v
	}
	// Each insert is its own batch, so its own part; ClickHouse merges
	// small parts too, so write until the keeper has merged at least once.
	inserted := 0
	for i := 0; done() < 1; i++ {
		if i == 100 {
			t.Fatalf("no compaction of %s after %d inserts", p.table(), i)
		}
		p.exec(ctx, 0, fmt.Sprintf(`INSERT INTO %s (workspace_id, title, body) SELECT g, 'doc ' || g, 'b' FROM generate_series(1, 20) g`, table))
		p.exec(ctx, 0, fmt.Sprintf(`UPDATE %s SET title = title || '+' WHERE id %% 7 = %d`, table, i%7))
		inserted += 20
		time.Sleep(150 * time.Millisecond)
	}
	// Every row and its newest title: count and total title length, on
	// the shard and in ClickHouse.
	conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var rows, titles int64
	if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT count(*), sum(length(title)) FROM %s", table)).Scan(&rows, &titles); err != nil {
		t.Fatal(err)
	}
	if rows != int64(inserted) {
		t.Fatalf("shard holds %d rows, inserted %d", rows, inserted)
	}
	var gotRows, gotTitles int64
	p.waitFor(ctx, time.Minute, "every row and title in ClickHouse", func() bool {
		q := fmt.Sprintf("SELECT toInt64(count()), toInt64(sum(length(title))) FROM `%s`.`%s` FINAL WHERE _deleted = 0", p.chDB, p.table())
		return p.store.Conn().QueryRow(ctx, q).Scan(&gotRows, &gotTitles) == nil && gotRows == rows && gotTitles == titles
	})
	t.Logf("%d rows in %d inserts; %v compactions done", inserted, inserted/20, done())
}
