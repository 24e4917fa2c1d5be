package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tributary/tributary/internal/verify"
)

// otherFleetTablesJSON configures testdata/otherfleet.sql through the
// documented table config only (docs/configuration.md,
// docs/design/moves.md, "Revenue configuration"); %[1]s is the test's
// suffix.
const otherFleetTablesJSON = `{"topic_prefix": "carrier_%[1]s.", "tables": [
	{"name": "of_parcels_%[1]s", "id_column": "parcel_id", "id_layout": "uuidv7"},
	{"name": "of_charges_%[1]s", "id_column": "charge_no", "id_layout": "instagram"},
	{"name": "of_transfers_%[1]s", "id_column": "transfer_no", "id_layout": "serial"},
	{"name": "of_scans_%[1]s", "id_column": "scan_id", "id_layout": "twitter"}],
 "revenue": {"table": "of_charges_%[1]s", "amount_column": "amount", "currency_column": "currency",
	"time_column": "booked_at", "status_column": "state", "workspace_column": "account",
	"count_statuses": ["settled"], "refund_statuses": ["reversed"]},
 "moves": {"table": "of_transfers_%[1]s", "documents_table": "of_parcels_%[1]s", "document_column": "parcel",
	"to_shard_column": "dest_shard", "state_column": "phase",
	"in_progress_states": ["opened", "copied"], "done_states": ["closed"],
	"started_column": "opened_at", "finished_column": "closed_at", "grace": "2s"}}`

// TestOtherFleet is a fleet that is not ours, end to end: the schema of
// testdata/otherfleet.sql (uuid and Instagram-layout keys, a keyless
// table, TOASTed manifests, numeric(14,2) amounts in char(3) currencies, a
// saga log with per-shard bigserial ids and no from-shard column) on the
// stack's first three shards numbered 1, 2 and 3 by a fleet file (shard 2's
// DSN in a file), configured by the table config and that fleet file
// alone. Preflight finds nothing wrong before the first start. The readers
// run as cdc-reader processes given --fleet and --shard; the loader runs
// the revenue pre-aggregator. Under 20 s of traffic (parcels created,
// relabelled around their TOASTed manifests, moved by the saga with some
// moves left half-done, charges quoted, settled, reversed, scans of the
// keyless table) the loader and the reader of shard 2 are SIGKILLed in
// turn. Then cmd/verify, given the fleet file, passes: every row of every
// table on shards 1..3, the moves (stuck ones included) and revenue to the
// cent; the dead-letter topic is empty; and ids of the wrong kind for a
// table's layout, or a shard the fleet does not have (0), are 400s.
func TestOtherFleet(t *testing.T) {
	t.Parallel()
	numbers := []int{1, 2, 3}
	st := sparseStack(t, numbers)
	p := setupPipelineOn(t, st, numbers, nil, true, "of_parcels_", otherFleetTablesJSON)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	names := ofNames(p.suffix)
	execSchemaFile(ctx, t, p, numbers, "testdata/otherfleet.sql")
	t.Cleanup(func() { ofDropSchema(t, p) }) // after the processes stopped (registered later, run earlier)

	pools := shardPools(ctx, t, st, numbers)
	tr := &ofTraffic{names: names, pools: pools, shards: numbers}
	for _, s := range numbers {
		// Rows the initial copy takes: the traffic edits them later.
		if err := tr.seed(ctx, s); err != nil {
			t.Fatalf("seed shard %d: %v", s, err)
		}
	}

	dir := t.TempDir()
	fleetFile, fleetEnv := ofFleet(t, dir, st)
	tablesFile := writeTablesFile(t, dir, fmt.Sprintf(otherFleetTablesJSON, p.suffix))
	procs, verifyBin := startCheckedFleet(ctx, t, p, dir, fleetFile, tablesFile, fleetEnv, nil,
		"--revenue-aggregate-interval", "1s", "--instance-id", "carrier-loader")

	// Traffic on every shard; the loader and the reader of shard 2 are
	// SIGKILLed in turn every 2.5 s, each restarted by its supervisor.
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	waitTraffic := trafficOn(wctx, numbers, tr.run)
	victims := []*supervised{procs.loader, procs.readers[2]}
	kills := map[string]int{}
	for i := 0; ; i++ {
		select {
		case <-wctx.Done():
		case <-time.After(2500 * time.Millisecond):
			v := victims[i%len(victims)]
			v.kill()
			kills[v.name]++
			continue
		}
		break
	}
	waitTraffic(t)
	t.Logf("traffic: %s; SIGKILLs %v", tr.stats.String(), kills)
	if tr.stats.movesDone.Load() == 0 || tr.stats.movesHalf.Load() == 0 || tr.stats.toastEdits.Load() == 0 || tr.stats.charges.Load() == 0 {
		t.Fatalf("traffic did too little to check: %s", tr.stats.String())
	}
	for _, v := range victims {
		if n := v.startCount(); n < 2 {
			t.Errorf("%s started %d times: it was never killed and restarted", v.name, n)
		}
	}
	time.Sleep(2500 * time.Millisecond) // the half-done moves pass their grace: stuck

	rep, code, stderr := verifyBinary(ctx, t, verifyBin, p, fleetFile, tablesFile, fleetEnv, "2m")
	if code != 0 || !rep.Passed {
		t.Fatalf("verify of the other fleet: exit %d, mismatches %+v, differences %+v\n%s", code, rep.Mismatches, rep.Differences, stderr)
	}
	for _, tbl := range rep.Tables {
		var got []int
		for _, sh := range tbl.Shards {
			got = append(got, sh.Shard)
			if sh.Sampled || int64(sh.Checked) != sh.SourceRows || sh.ClickHouseRows != sh.SourceRows || sh.SourceRows == 0 {
				t.Errorf("table %s shard %d: %+v, want every row (some) checked and counted", tbl.Table, sh.Shard, sh)
			}
		}
		if !slices.Equal(got, numbers) {
			t.Errorf("table %s: shards %v checked, want %v", tbl.Table, got, numbers)
		}
	}
	if len(rep.Tables) != 4 {
		t.Errorf("verify checked %d tables, want the 4 configured", len(rep.Tables))
	}
	if rep.Moves == nil || rep.Moves.Moves == 0 || rep.Moves.Stuck == 0 {
		t.Errorf("moves %+v: want the saga's moves compared, the half-done ones stuck", rep.Moves)
	}
	if rep.Revenue == nil || rep.Revenue.Groups == 0 {
		t.Errorf("revenue %+v: want groups compared", rep.Revenue)
	}
	t.Logf("verify: passed, %d rows checked (%d via the API), moves %+v, revenue %d groups from %v, in %.1f s",
		rep.Checked(), rep.CheckedViaAPI(), *rep.Moves, rep.Revenue.Groups, rep.Revenue.Sources, rep.TookSeconds)
	// The caller's mistakes on this fleet are 400s naming them: an id of
	// the other kind for each table's layout, and shard 0, which a fleet
	// numbered from 1 does not have.
	var parcel string
	if err := pools[1].QueryRow(ctx, "SELECT parcel_id::text FROM "+names.parcels+" LIMIT 1").Scan(&parcel); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"/v1/documents/4042794686891427072":                                      "wrong_id_kind",
		fmt.Sprintf("/v1/tables/of_charges_%s/rows/%s", p.suffix, parcel):        "wrong_id_kind",
		"/v1/documents/" + parcel + "?after=0:0/0":                               "unknown_shard",
		fmt.Sprintf("/v1/tables/of_scans_%s/rows/%s?after=4:0/0", p.suffix, "1"): "unknown_shard",
	} {
		status, _, body := apiGet(ctx, t, p.api.URL, path, "")
		var e struct{ Error string }
		if json.Unmarshal(body, &e); status != 400 || e.Error != want {
			t.Errorf("GET %s: %d %s, want 400 %s", path, status, body, want)
		}
	}
	dead := p.dlqRecords(ctx)
	t.Logf("dead-letter topic: %d records", dead)
	if dead != 0 {
		t.Errorf("the dead-letter topic %s holds %d records after the kills, want 0", p.dlqTopic(), dead)
	}
}

// ofTables are the names of the test's tables.
type ofTables struct{ parcels, charges, transfers, scans string }

func ofNames(suffix string) ofTables {
	q := func(n string) string { return pgx.Identifier{n + "_" + suffix}.Sanitize() }
	return ofTables{parcels: q("of_parcels"), charges: q("of_charges"), transfers: q("of_transfers"), scans: q("of_scans")}
}

// ofDropSchema removes what testdata/otherfleet.sql created.
func ofDropSchema(t *testing.T, p *pipeline) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := ofNames(p.suffix)
	for _, s := range p.shards {
		conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[s])
		if err != nil {
			t.Errorf("cleanup shard %d: %v", s, err)
			continue
		}
		sfx := p.suffix
		conn.Exec(ctx, fmt.Sprintf("DROP TABLE IF EXISTS %s, %s, %s, %s; DROP FUNCTION IF EXISTS of_uuidv7_%s(), of_charge_id_%s(), of_scan_id_%s(); DROP SEQUENCE IF EXISTS of_charge_seq_%s, of_scan_seq_%s", //nolint:errcheck
			n.parcels, n.charges, n.transfers, n.scans, sfx, sfx, sfx, sfx, sfx))
		conn.Close(ctx)
	}
}

// ofFleet writes the fleet file: the stack's shards 0, 1, 2 as 1, 2, 3,
// with names of their own; shard 2's DSN comes from a file next to it,
// the others' from variables. It returns the file and those variables.
func ofFleet(t *testing.T, dir string, st *Stack) (string, []string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "shard2.dsn"), []byte(st.ShardDSNs[2]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fleet := `{"shards": [
  {"shard": 1, "name": "depot-north", "dsn_env": "CARRIER_NORTH_DSN"},
  {"shard": 2, "name": "depot-south", "dsn_file": "shard2.dsn"},
  {"shard": 3, "name": "depot-east", "dsn_env": "CARRIER_EAST_DSN"}
]}
`
	path := filepath.Join(dir, "carrier-fleet.json")
	if err := os.WriteFile(path, []byte(fleet), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, []string{"CARRIER_NORTH_DSN=" + st.ShardDSNs[1], "CARRIER_EAST_DSN=" + st.ShardDSNs[3]}
}

// ofBuild builds the preflight and verify binaries into dir.
func ofBuild(ctx context.Context, t *testing.T, dir string) (preflight, verifyBin string) {
	t.Helper()
	preflight, verifyBin = filepath.Join(dir, "preflight"), filepath.Join(dir, "verify")
	for bin, pkg := range map[string]string{preflight: "../cmd/preflight", verifyBin: "../cmd/verify"} {
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	return preflight, verifyBin
}

// ofProcs are the fleet's supervised processes.
type ofProcs struct {
	readers map[int]*supervised
	loader  *supervised
}

// ofStart starts a cdc-reader process per shard, given only the fleet
// file and its number (no $TRIBUTARY_PG_DSN), and one loader process
// (given loaderArgs besides the pipeline's own); each is restarted
// whenever it exits, until the test ends.
func ofStart(t *testing.T, p *pipeline, fleetFile, tablesFile string, fleetEnv []string, loaderArgs ...string) *ofProcs {
	t.Helper()
	bin := binaries(t)
	logf, err := os.Create(filepath.Join(t.TempDir(), "procs.log"))
	if err != nil {
		t.Fatal(err)
	}
	brokers := strings.Join(p.brokers, ",")
	procs := &ofProcs{readers: map[int]*supervised{}}
	all := []*supervised{}
	for _, s := range p.shards {
		rd := &supervised{name: fmt.Sprintf("reader-%d", s), log: logf, done: make(chan struct{}),
			args: []string{bin + "/cdc-reader", "--fleet", fleetFile, "--shard", strconv.Itoa(s), "--tables", tablesFile,
				"--kafka-brokers", brokers, "--slot", fmt.Sprintf("e2e_%s_%d", p.suffix, s), "--publication", "e2e_" + p.suffix,
				"--state-topic", "e2e_" + p.suffix + ".state", "--metrics-addr", "", "--status-interval", "200ms",
				"--watermark-interval", "200ms", "--heartbeat-interval", "1s", "--log-level", "warn"},
			env: append([]string{"TRIBUTARY_PG_DSN="}, fleetEnv...)}
		procs.readers[s] = rd
		all = append(all, rd)
	}
	procs.loader = &supervised{name: "loader", log: logf, done: make(chan struct{}),
		args: append([]string{bin + "/loader", "--tables", tablesFile, "--kafka-brokers", brokers, "--group", p.group(),
			"--dlq-topic", p.dlqTopic(), "--clickhouse-addr", p.stack.ClickHouseAddr, "--clickhouse-db", p.chDB,
			"--metrics-addr", "", "--batch-records", "500", "--batch-wait", "50ms", "--log-level", "warn"}, loaderArgs...)}
	all = append(all, procs.loader)
	for _, pr := range all {
		go pr.run()
	}
	t.Cleanup(func() {
		for _, pr := range all {
			pr.stop()
		}
		if t.Failed() || os.Getenv("TRIBUTARY_TEST_LOG") != "" {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("process logs:\n%s", b)
		}
		logf.Close()
	})
	return procs
}

// verifyBinary runs the verify binary bin on the fleet file against the
// pipeline's API and ClickHouse database, and returns its report, exit
// status and stderr; exit 2 (could not verify: bad settings) has no
// report.
func verifyBinary(ctx context.Context, t *testing.T, bin string, p *pipeline, fleetFile, tablesFile string, fleetEnv []string, wait string) (*verify.Report, int, string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, "--fleet", fleetFile, "--tables", tablesFile, "--api", p.api.URL,
		"--clickhouse-addr", p.stack.ClickHouseAddr, "--clickhouse-db", p.chDB, "--json",
		"--sample", "0", "--api-sample", "40", "--wait", wait, "--max-diffs", "10", "--log-level", "warn")
	cmd.Env = append(os.Environ(), fleetEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if code == 2 {
		return nil, code, stderr.String()
	}
	var rep verify.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("verify exit %d, report not JSON: %v\n%s\n%s", code, err, stdout.String(), stderr.String())
	}
	return &rep, code, stderr.String()
}

// ofStats counts what the traffic did.
type ofStats struct {
	parcels, toastEdits, manifests, parcelDeletes, movesDone, movesHalf atomic.Int64
	charges, chargeEdits, chargeDeletes, scans, scanEdits, scanDeletes  atomic.Int64
}

func (s *ofStats) String() string {
	return fmt.Sprintf("%d parcels, %d TOAST-unchanged edits, %d new manifests, %d parcel deletes, %d moves closed, %d left half-done, "+
		"%d charges, %d charge edits, %d charge deletes, %d scans, %d scan edits, %d scan deletes",
		s.parcels.Load(), s.toastEdits.Load(), s.manifests.Load(), s.parcelDeletes.Load(), s.movesDone.Load(), s.movesHalf.Load(),
		s.charges.Load(), s.chargeEdits.Load(), s.chargeDeletes.Load(), s.scans.Load(), s.scanEdits.Load(), s.scanDeletes.Load())
}

// ofTraffic is the carrier's own application: one writer per shard.
// A parcel is only ever written by one writer at a time: busy holds the
// parcels under a move (and, for good, those whose move was left
// half-done), which no writer picks.
type ofTraffic struct {
	names  ofTables
	pools  map[int]*pgxpool.Pool
	shards []int
	busy   sync.Map // parcel id (text) -> struct{}
	stats  ofStats
}

var ofCurrencies = []string{"EUR", "SEK", "JPY", "USD", "CHF"}

// manifest is a parcel's manifest: several kB, so always TOASTed.
func ofManifest() string {
	var b strings.Builder
	for n := 3000 + rand.IntN(4000); b.Len() < n; {
		fmt.Fprintf(&b, "item %d: %d x sku-%08x; ", b.Len(), 1+rand.IntN(9), rand.Uint32())
	}
	return b.String()
}

// seed writes rows before the readers start, for the initial copy.
func (tr *ofTraffic) seed(ctx context.Context, shard int) error {
	pool := tr.pools[shard]
	for range 60 {
		if err := tr.insertParcel(ctx, pool, shard); err != nil {
			return err
		}
		if err := tr.insertCharge(ctx, pool); err != nil {
			return err
		}
		if err := tr.insertScan(ctx, pool); err != nil {
			return err
		}
	}
	return nil
}

func (tr *ofTraffic) insertParcel(ctx context.Context, pool *pgxpool.Pool, shard int) error {
	_, err := pool.Exec(ctx, "INSERT INTO "+tr.names.parcels+" (depot, label, weight_g, manifest) VALUES ($1, $2, $3, $4)",
		shard*10+rand.IntN(10), "lbl-"+strconv.Itoa(rand.IntN(1e6)), 100+rand.IntN(30000), ofManifest())
	if err == nil {
		tr.stats.parcels.Add(1)
	}
	return err
}

func (tr *ofTraffic) insertCharge(ctx context.Context, pool *pgxpool.Pool) error {
	// Up to 10^9 with cents; booked within the last 300 days, in UTC
	// wall time (the column has no time zone).
	cents := rand.Int64N(100_000_000_000)
	_, err := pool.Exec(ctx, "INSERT INTO "+tr.names.charges+" (account, amount, currency, state, booked_at) VALUES ($1, $2::numeric / 100, $3, $4, (now() AT TIME ZONE 'UTC') - make_interval(secs => $5))",
		1+rand.IntN(40), cents, ofCurrencies[rand.IntN(len(ofCurrencies))], []string{"quoted", "settled"}[rand.IntN(2)], float64(3600+rand.IntN(300*86400)))
	if err == nil {
		tr.stats.charges.Add(1)
	}
	return err
}

func (tr *ofTraffic) insertScan(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, "INSERT INTO "+tr.names.scans+" (parcel, station, note) VALUES (of_uuidv7_"+tr.suffix()+"(), $1, $2)",
		"st-"+strconv.Itoa(rand.IntN(50)), "scan "+strconv.Itoa(rand.IntN(1e6)))
	if err == nil {
		tr.stats.scans.Add(1)
	}
	return err
}

// suffix is the test's suffix, taken from a table name.
func (tr *ofTraffic) suffix() string {
	n := strings.Trim(tr.names.parcels, `"`)
	return n[strings.LastIndexByte(n, '_')+1:]
}

// pickParcel returns a parcel of shard with a TOASTed manifest that no
// move holds, or "" when there is none.
func (tr *ofTraffic) pickParcel(ctx context.Context, shard int) (string, error) {
	rows, err := tr.pools[shard].Query(ctx, "SELECT parcel_id::text FROM "+tr.names.parcels+" WHERE length(manifest) > 2500 ORDER BY random() LIMIT 5")
	if err != nil {
		return "", err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", err
	}
	for _, id := range ids {
		if _, held := tr.busy.Load(id); !held {
			return id, nil
		}
	}
	return "", nil
}

// run writes on shard until ctx ends.
func (tr *ofTraffic) run(ctx context.Context, shard int) error {
	pool := tr.pools[shard]
	for ctx.Err() == nil {
		var err error
		switch op := rand.IntN(100); {
		case op < 12:
			err = tr.insertParcel(ctx, pool, shard)
		case op < 36: // a small column of a parcel, its manifest unchanged (TOAST)
			var id string
			if id, err = tr.pickParcel(ctx, shard); err == nil && id != "" {
				_, err = pool.Exec(ctx, "UPDATE "+tr.names.parcels+" SET label = $1, weight_g = $2 WHERE parcel_id = $3",
					"re-"+strconv.Itoa(rand.IntN(1e6)), rand.IntN(30000), id)
				tr.stats.toastEdits.Add(1)
			}
		case op < 40:
			var id string
			if id, err = tr.pickParcel(ctx, shard); err == nil && id != "" {
				_, err = pool.Exec(ctx, "UPDATE "+tr.names.parcels+" SET manifest = $1 WHERE parcel_id = $2", ofManifest(), id)
				tr.stats.manifests.Add(1)
			}
		case op < 43:
			var id string
			if id, err = tr.pickParcel(ctx, shard); err == nil && id != "" {
				_, err = pool.Exec(ctx, "DELETE FROM "+tr.names.parcels+" WHERE parcel_id = $1", id)
				tr.stats.parcelDeletes.Add(1)
			}
		case op < 53:
			err = tr.move(ctx, shard)
		case op < 65:
			err = tr.insertCharge(ctx, pool)
		case op < 80: // quoted -> settled or voided, settled -> reversed
			_, err = pool.Exec(ctx, "UPDATE "+tr.names.charges+` SET state = CASE WHEN state = 'settled' THEN 'reversed'
				WHEN random() < 0.8 THEN 'settled' ELSE 'voided' END
				WHERE charge_no = (SELECT charge_no FROM `+tr.names.charges+" WHERE state IN ('quoted', 'settled') ORDER BY random() LIMIT 1)")
			tr.stats.chargeEdits.Add(1)
		case op < 83:
			_, err = pool.Exec(ctx, "DELETE FROM "+tr.names.charges+" WHERE charge_no = (SELECT charge_no FROM "+tr.names.charges+" ORDER BY random() LIMIT 1)")
			tr.stats.chargeDeletes.Add(1)
		case op < 91:
			err = tr.insertScan(ctx, pool)
		case op < 96: // keyless: the old row is the whole row
			_, err = pool.Exec(ctx, "UPDATE "+tr.names.scans+" SET note = $1 WHERE ctid = (SELECT ctid FROM "+tr.names.scans+" ORDER BY random() LIMIT 1)",
				"seen "+strconv.Itoa(rand.IntN(1e6)))
			tr.stats.scanEdits.Add(1)
		default:
			_, err = pool.Exec(ctx, "DELETE FROM "+tr.names.scans+" WHERE ctid = (SELECT ctid FROM "+tr.names.scans+" ORDER BY random() LIMIT 1)")
			tr.stats.scanDeletes.Add(1)
		}
		if err != nil {
			return err
		}
		time.Sleep(5 * time.Millisecond) // the machine's cores are shared
	}
	return nil
}

// move runs the carrier's saga for a parcel of from: open the transfer in
// the source's log, copy the parcel to the target and mark it copied, then
// delete it at the source and close the transfer in one transaction. One
// move in five stops after opening or copying, for good.
func (tr *ofTraffic) move(ctx context.Context, from int) error {
	id, err := tr.pickParcel(ctx, from)
	if err != nil || id == "" {
		return err
	}
	if _, held := tr.busy.LoadOrStore(id, struct{}{}); held {
		return nil
	}
	others := slices.DeleteFunc(slices.Clone(tr.shards), func(s int) bool { return s == from })
	to := others[rand.IntN(len(others))]
	src, dst := tr.pools[from], tr.pools[to]
	halfDone := rand.IntN(5) == 0
	stopAt := rand.IntN(2) // 0: after opening, 1: after copying
	var no int64
	if err := src.QueryRow(ctx, "INSERT INTO "+tr.names.transfers+" (parcel, dest_shard) VALUES ($1, $2) RETURNING transfer_no", id, to).Scan(&no); err != nil {
		return err
	}
	if halfDone && stopAt == 0 {
		tr.stats.movesHalf.Add(1)
		return nil // held for good
	}
	var depot, weight int
	var label, manifest string
	var received time.Time
	if err := src.QueryRow(ctx, "SELECT depot, label, weight_g, manifest, received_at FROM "+tr.names.parcels+" WHERE parcel_id = $1", id).
		Scan(&depot, &label, &weight, &manifest, &received); err != nil {
		return err
	}
	if _, err := dst.Exec(ctx, "INSERT INTO "+tr.names.parcels+" (parcel_id, depot, label, weight_g, manifest, received_at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (parcel_id) DO NOTHING",
		id, to*10+rand.IntN(10), label, weight, manifest, received); err != nil {
		return err
	}
	if _, err := src.Exec(ctx, "UPDATE "+tr.names.transfers+" SET phase = 'copied' WHERE transfer_no = $1", no); err != nil {
		return err
	}
	if halfDone {
		tr.stats.movesHalf.Add(1)
		return nil
	}
	err = pgx.BeginFunc(ctx, src, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "DELETE FROM "+tr.names.parcels+" WHERE parcel_id = $1", id); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE "+tr.names.transfers+" SET phase = 'closed', closed_at = now() WHERE transfer_no = $1", no)
		return err
	})
	if err != nil {
		return err
	}
	tr.stats.movesDone.Add(1)
	tr.busy.Delete(id)
	return nil
}
