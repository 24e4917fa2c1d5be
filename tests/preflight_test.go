package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// runPreflight runs the preflight binary and returns its exit status,
// stdout and stderr.
func runPreflight(ctx context.Context, t *testing.T, bin string, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode(), stdout.String(), stderr.String()
	case err != nil:
		t.Fatalf("preflight: %v", err)
	}
	return 0, stdout.String(), stderr.String()
}

// TestPreflight: the check command against two live shards. A correct
// config passes with the superuser; the stack's least-privilege role
// passes on the demo tables it was granted (the recipe in docs/configuration.md) and is
// told exactly what it lacks on the test's own tables. A deliberately
// broken config gets one line per problem — a missing column, a layout
// that does not decode the ids, a revenue amount that is not numeric(p,s),
// an unmapped column type, a table without replica identity, an id
// column that is only part of a composite key, a nullable id column of a
// keyless table, a missing table — and the same shards numbered 1 and 2 are told their ids name
// shards 0 and 1. Exit status 1 with problems, 0 without, 2 for a bad
// fleet file, before anything connects.
func TestPreflight(t *testing.T) {
	st := loadStack(t)
	if len(st.ShardDSNs) < 2 {
		t.Skip("needs two shards")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	suffix := randSuffix()
	docs, keyless, odd := "pf_docs_"+suffix, "pf_keyless_"+suffix, "pf_odd_"+suffix
	lines, loose := "pf_lines_"+suffix, "pf_loose_"+suffix
	execOn := func(shard int, sql string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, st.ShardDSNs[shard])
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("shard %d: %s: %v", shard, sql, err)
		}
	}
	for s := 0; s < 2; s++ {
		execOn(s, fmt.Sprintf(`CREATE TABLE %s (id bigint PRIMARY KEY DEFAULT tributary.next_id(), workspace_id bigint NOT NULL,
			title text, amount numeric(12,2), currency char(3), status text, created_at timestamptz NOT NULL DEFAULT now())`, docs))
		execOn(s, fmt.Sprintf(`INSERT INTO %s (workspace_id, title, amount, currency, status)
			SELECT g, 'doc ' || g, g * 1.25, 'EUR', 'paid' FROM generate_series(1, 20) g`, docs))
		execOn(s, fmt.Sprintf(`CREATE TABLE %s (id bigint DEFAULT tributary.next_id(), note text)`, keyless))
		// A composite type: the one kind of column the loader maps to nothing.
		execOn(s, fmt.Sprintf(`CREATE TYPE %s_pair AS (a int, b int)`, odd))
		execOn(s, fmt.Sprintf(`CREATE TABLE %[1]s (id bigint PRIMARY KEY DEFAULT tributary.next_id(), raw %[1]s_pair)`, odd))
		execOn(s, fmt.Sprintf(`CREATE TABLE %s (tenant_id bigint, line_no bigint, item text, PRIMARY KEY (tenant_id, line_no))`, lines))
		execOn(s, fmt.Sprintf(`CREATE TABLE %s (id bigint DEFAULT tributary.next_id(), note text)`, loose))
		execOn(s, fmt.Sprintf(`ALTER TABLE %s REPLICA IDENTITY FULL`, loose))
	}
	t.Cleanup(func() {
		for s := 0; s < 2; s++ {
			execOn(s, fmt.Sprintf("DROP TABLE IF EXISTS %s, %s, %s, %s, %s", docs, keyless, odd, lines, loose))
			execOn(s, fmt.Sprintf("DROP TYPE IF EXISTS %s_pair", odd))
		}
	})

	dir := t.TempDir()
	bin := filepath.Join(dir, "preflight")
	if out, err := osexec(ctx, "go", "build", "-o", bin, "../cmd/preflight"); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	write := func(name, data string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	env := []string{"PF_0_DSN=" + st.ShardDSNs[0], "PF_1_DSN=" + st.ShardDSNs[1],
		"PF_0_REPL=" + st.ReplDSNs[0], "PF_1_REPL=" + st.ReplDSNs[1]}
	superFleet := write("super.json", `{"shards": [{"shard": 0, "dsn_env": "PF_0_DSN"}, {"shard": 1, "dsn_env": "PF_1_DSN"}]}`)
	replFleet := write("repl.json", `{"shards": [{"shard": 0, "dsn_env": "PF_0_DSN", "reader_dsn_env": "PF_0_REPL"},
		{"shard": 1, "dsn_env": "PF_1_DSN", "reader_dsn_env": "PF_1_REPL"}]}`)
	oneBased := write("one.json", `{"shards": [{"shard": 1, "name": "first", "dsn_env": "PF_0_DSN"}, {"shard": 2, "dsn_env": "PF_1_DSN"}]}`)
	pub := "pf_pub_" + suffix
	good := write("good.json", fmt.Sprintf(`{"tables": [
		{"name": %q, "id_column": "id", "id_layout": "seed000", "shard_key": "workspace_id",
		 "search": {"time_column": "created_at", "title_column": "title", "workspace_column": "workspace_id"}}],
		"revenue": {"table": %[1]q, "amount_column": "amount", "currency_column": "currency", "time_column": "created_at",
		            "status_column": "status", "count_statuses": ["paid"]}}`, docs))

	// Correct, as the superuser (who may create the publication).
	code, out, errOut := runPreflight(ctx, t, bin, env, "--fleet", superFleet, "--tables", good, "--publication", pub)
	if code != 0 || out != "" || !strings.Contains(errOut, "2 shards, 1 tables: no problems") {
		t.Fatalf("good config as superuser: exit %d\n%s%s", code, out, errOut)
	}

	// The stack's least-privilege role on the demo tables it was granted.
	code, out, errOut = runPreflight(ctx, t, bin, env, "--fleet", replFleet, "--tables", "../deploy/local/tables.json")
	if code != 0 || out != "" {
		t.Fatalf("demo tables as the stack's replication role: exit %d\n%s%s", code, out, errOut)
	}

	// The same role on the test's table: no SELECT, no way into the publication.
	code, out, errOut = runPreflight(ctx, t, bin, env, "--fleet", replFleet, "--tables", good, "--publication", pub)
	wantLines(t, "good config as the replication role", code, out, errOut, []string{
		fmt.Sprintf("shard 0: table %s: role tributary_repl may not SELECT public.%[1]s: the initial copy reads it (GRANT SELECT ON \"public\".%[2]q TO \"tributary_repl\")", docs, docs),
		fmt.Sprintf("shard 0: publication %s does not exist, and role tributary_repl cannot create it", pub),
		fmt.Sprintf("shard 1: table %s: role tributary_repl may not SELECT", docs),
		fmt.Sprintf("shard 1: publication %s does not exist", pub),
	})

	// Broken on purpose.
	broken := write("broken.json", fmt.Sprintf(`{"tables": [
		{"name": %q, "id_column": "id", "id_layout": "uuidv7", "shard_key": "workspace"},
		{"name": %q, "id_column": "id", "id_layout": "seed000"},
		{"name": %q, "id_column": "id", "id_layout": "seed000"},
		{"name": "pf_nosuch_%s", "id_column": "id", "id_layout": "serial"},
		{"name": %q, "id_column": "line_no", "id_layout": "serial"},
		{"name": %q, "id_column": "id", "id_layout": "seed000"}],
		"revenue": {"table": %[1]q, "amount_column": "title", "currency_column": "currency", "time_column": "created_at"}}`,
		docs, keyless, odd, suffix, lines, loose))
	code, out, errOut = runPreflight(ctx, t, bin, env, "--fleet", superFleet, "--tables", broken, "--shard", "1", "--publication", pub)
	wantLines(t, "broken config", code, out, errOut, []string{
		fmt.Sprintf(`shard 1: table %s: shard_key: column "workspace" does not exist in public.%[1]s`, docs),
		fmt.Sprintf("shard 1: table %s: id_column: column id is bigint; this setting needs one of: uuid", docs),
		fmt.Sprintf("shard 1: table %s: no usable replica identity", keyless),
		fmt.Sprintf(`shard 1: table %[1]s: column raw: unmapped PostgreSQL type: "%[1]s_pair"`, odd),
		fmt.Sprintf("shard 1: table pf_nosuch_%s: table public.pf_nosuch_%[1]s does not exist on this shard", suffix),
		fmt.Sprintf("shard 1: table %s: revenue.amount_column: column title is text; this setting needs one of: numeric", docs),
		fmt.Sprintf("shard 1: table %s: id_layout: 20 of 20 sampled ids do not decode as uuidv7", docs),
		fmt.Sprintf("shard 1: table %s: id_column: column line_no is part of the key (tenant_id, line_no) (the primary key %[1]s_pkey) and not unique on its own: rows that share line_no but differ in the rest of the key would become one row in ClickHouse; a row is identified by one column: ", lines),
		fmt.Sprintf("shard 1: table %s: id_column: column id may be NULL, and a row without an id cannot be told apart from another (ALTER TABLE \"public\".%[1]q ALTER COLUMN \"id\" SET NOT NULL)", loose),
	})

	// Numbered from 1: the ids say 0 and 1.
	code, out, errOut = runPreflight(ctx, t, bin, env, "--fleet", oneBased, "--tables", good, "--publication", pub)
	wantLines(t, "fleet numbered from 1", code, out, errOut, []string{
		fmt.Sprintf("shard 1 (first): table %s: id_layout: 0 of 20 sampled ids name this shard under seed000 (shard 0: 20)", docs),
		fmt.Sprintf("shard 2: table %s: id_layout: 0 of 20 sampled ids name this shard under seed000 (shard 1: 20)", docs),
	})

	// A bad fleet file: exit 2, nothing connected.
	twice := write("twice.json", `{"shards": [{"shard": 1, "dsn_env": "PF_0_DSN"}, {"shard": 1, "dsn_env": "PF_1_DSN"}]}`)
	code, out, errOut = runPreflight(ctx, t, bin, env, "--fleet", twice, "--tables", good)
	if code != 2 || out != "" || !strings.Contains(errOut, twice+":1:60: shards[1].shard: shard 1 is listed twice (also shards[0])") {
		t.Fatalf("fleet with a shard twice: exit %d\n%s%s", code, out, errOut)
	}
}

// wantLines checks that preflight exited 1 and printed exactly the
// expected problems, one line each (each want is a prefix of its line).
func wantLines(t *testing.T, what string, code int, out, errOut string, want []string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 1 || len(lines) != len(want) {
		t.Fatalf("%s: exit %d, %d lines, want exit 1 and %d lines:\n%s%s", what, code, len(lines), len(want), out, errOut)
	}
	for _, w := range want {
		found := false
		for _, l := range lines {
			found = found || strings.HasPrefix(l, w)
		}
		if !found {
			t.Errorf("%s: no line starts with\n  %s\nlines:\n%s", what, w, out)
		}
	}
}

// osexec runs a command and returns its combined output.
func osexec(ctx context.Context, name string, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}

// TestPreflightTypesAsTheLoaderMapsThem: preflight judges a column as the
// loader will store it. Enums (stored as their labels), arrays of enums,
// domains over domains (their base type) and a composite-type column given
// "String" in column_types pass, as does a revenue section whose status is
// an enum, whose amount is a domain over numeric(12,2) and whose refunded
// amount an unconstrained numeric stored as a Decimal(20, 2) by
// column_types; before the fix preflight called the enums and the nested
// domain unmapped, refused the enum status and the chosen decimal, and
// ignored column_types. A column_types choice the loader would refuse
// (a Decimal for a text column) is a problem naming column_types.
func TestPreflightTypesAsTheLoaderMapsThem(t *testing.T) {
	st := loadStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tbl := "pf_shapes_" + randSuffix()
	conn, err := pgx.Connect(ctx, st.ShardDSNs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	ddl := strings.ReplaceAll(`CREATE TYPE {t}_state AS ENUM ('open', 'paid', 'refunded');
		CREATE DOMAIN {t}_money AS numeric(12,2) CHECK (VALUE >= 0);
		CREATE DOMAIN {t}_price AS {t}_money;
		CREATE TYPE {t}_pair AS (a int, b int);
		CREATE TABLE {t} (id bigint PRIMARY KEY DEFAULT tributary.next_id(), state {t}_state NOT NULL,
			states {t}_state[], amount {t}_price NOT NULL, currency char(3) NOT NULL, paid_at timestamptz NOT NULL,
			raw {t}_pair, note text, given_back numeric);
		INSERT INTO {t} (state, states, amount, currency, paid_at, raw, note, given_back)
			SELECT 'paid', '{open,paid}', g, 'EUR', now(), ROW(g, g)::{t}_pair, 'n', 0 FROM generate_series(1, 5) g`, "{t}", tbl)
	if _, err := conn.Exec(ctx, ddl); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), st.ShardDSNs[0])
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(context.Background())
		conn.Exec(context.Background(), strings.ReplaceAll("DROP TABLE IF EXISTS {t}; DROP TYPE IF EXISTS {t}_state, {t}_pair; DROP DOMAIN IF EXISTS {t}_price, {t}_money", "{t}", tbl)) //nolint:errcheck
	})

	dir := t.TempDir()
	bin := filepath.Join(dir, "preflight")
	if out, err := osexec(ctx, "go", "build", "-o", bin, "../cmd/preflight"); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	write := func(name, data string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	env := []string{"PF_0_DSN=" + st.ShardDSNs[0]}
	fleet := write("fleet.json", `{"shards": [{"shard": 0, "dsn_env": "PF_0_DSN"}]}`)
	cfg := `{"tables": [{"name": %q, "id_column": "id", "id_layout": "seed000", "column_types": {"raw": "String", "given_back": "Decimal(20, 2)"%s}}],
		"revenue": {"table": %[1]q, "amount_column": "amount", "currency_column": "currency", "time_column": "paid_at",
		            "status_column": "state", "count_statuses": ["paid"], "refund_statuses": ["refunded"],
		            "refunded_amount_column": "given_back"}}`
	good := write("good.json", fmt.Sprintf(cfg, tbl, ""))
	code, out, errOut := runPreflight(ctx, t, bin, env, "--fleet", fleet, "--tables", good, "--publication", "pf_pub_"+tbl)
	if code != 0 || out != "" {
		t.Fatalf("enums, domains and a column stored as text: exit %d\n%s%s", code, out, errOut)
	}
	bad := write("bad.json", fmt.Sprintf(cfg, tbl, `, "note": "Decimal(10, 2)"`))
	code, out, errOut = runPreflight(ctx, t, bin, env, "--fleet", fleet, "--tables", bad, "--publication", "pf_pub_"+tbl)
	wantLines(t, "a Decimal chosen for a text column", code, out, errOut, []string{
		fmt.Sprintf("shard 0: table %s: column_types: unmapped PostgreSQL type: table %[1]s column note (text): column_types: Decimal(10, 2) is for numeric columns", tbl),
	})
}

// TestPreflightPartitions: the bad input for partitioned tables,
// caught before the first start as the reader would refuse it: a config
// naming a partition instead of its partitioned table, and a publication
// made beforehand without publish_via_partition_root, each one line with
// the fix. The same table named by its root, with the publication fixed,
// passes.
func TestPreflightPartitions(t *testing.T) {
	st := loadStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tbl := "pf_parts_" + randSuffix()
	pub := "pf_pub_" + tbl
	conn, err := pgx.Connect(ctx, st.ShardDSNs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	ddl := strings.ReplaceAll(`CREATE TABLE {t} (id bigint NOT NULL, paid_at timestamptz NOT NULL, PRIMARY KEY (id, paid_at)) PARTITION BY RANGE (paid_at);
		CREATE TABLE {t}_2026_01 PARTITION OF {t} FOR VALUES FROM ('2026-01-01') TO ('2026-02-01');
		INSERT INTO {t} SELECT g, '2026-01-02'::timestamptz + g * interval '1 hour' FROM generate_series(1, 20) g;
		CREATE PUBLICATION {p} FOR TABLE {t}`, "{t}", tbl)
	if _, err := conn.Exec(ctx, strings.ReplaceAll(ddl, "{p}", pub)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), st.ShardDSNs[0])
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(context.Background())
		conn.Exec(context.Background(), fmt.Sprintf("DROP PUBLICATION IF EXISTS %s; DROP TABLE IF EXISTS %s", pub, tbl)) //nolint:errcheck
	})

	dir := t.TempDir()
	bin := filepath.Join(dir, "preflight")
	if out, err := osexec(ctx, "go", "build", "-o", bin, "../cmd/preflight"); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	write := func(name, data string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	env := []string{"PF_0_DSN=" + st.ShardDSNs[0]}
	fleet := write("fleet.json", `{"shards": [{"shard": 0, "dsn_env": "PF_0_DSN"}]}`)
	cfg := `{"tables": [{"name": %q, "id_column": "id", "id_layout": "serial"}]}`
	root, leaf := write("root.json", fmt.Sprintf(cfg, tbl)), write("leaf.json", fmt.Sprintf(cfg, tbl+"_2026_01"))

	code, out, errOut := runPreflight(ctx, t, bin, env, "--fleet", fleet, "--tables", leaf, "--publication", pub)
	wantLines(t, "a partition named", code, out, errOut, []string{
		fmt.Sprintf("shard 0: table %s_2026_01: public.%[1]s_2026_01 is a partition of %[1]s: name the partitioned table %[1]s in the table config instead", tbl),
	})
	code, out, errOut = runPreflight(ctx, t, bin, env, "--fleet", fleet, "--tables", root, "--publication", pub)
	wantLines(t, "a publication without publish_via_partition_root", code, out, errOut, []string{
		fmt.Sprintf("shard 0: table %s: publication %s publishes partitioned tables under their partitions' names, so the changes of public.%[1]s would be skipped: run ALTER PUBLICATION %[2]q SET (publish_via_partition_root = true)", tbl, pub),
	})
	if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER PUBLICATION %s SET (publish_via_partition_root = true)", pub)); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut = runPreflight(ctx, t, bin, env, "--fleet", fleet, "--tables", root, "--publication", pub); code != 0 || out != "" {
		t.Fatalf("the root, with the publication fixed: exit %d\n%s%s", code, out, errOut)
	}
}
