package tests

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary/tributary/internal/ids"
)

// These tests check internal/ids against a real PostgreSQL: the hash
// partition of bigint and uuid values (PgDog-style sharding) and the
// tributary.next_id() generator of schema/postgres/01_snowflake.sql.

var updateIDVectors = flag.Bool("update-id-vectors", false,
	"rewrite "+idVectorsFile+" from the live PostgreSQL")

const idVectorsFile = "testdata/ids_pg_partition_vectors.json"

// How many values of each type the golden file keeps.
const goldenBigints, goldenUUIDs = 1500, 1000

// idModuli are the partition counts compared.
var idModuli = []int{2, 3, 4, 8, 32}

// idVectors is the golden file: each value with its partition remainder
// for every modulus, as PostgreSQL computed them.
type idVectors struct {
	Server  string          `json:"server"` // server_version of the source
	Moduli  []int           `json:"moduli"`
	Bigints []idVectorEntry `json:"bigints"`
	UUIDs   []idVectorEntry `json:"uuids"`
}

type idVectorEntry struct {
	Value      string `json:"v"`
	Remainders []int  `json:"r"` // one per modulus, in Moduli order
}

// idTestBigints returns the bigint values to compare: boundaries of int32,
// uint32 and int64 (hashint8extended folds the high half into the low
// half), Snowflake ids, and seeded pseudo-random values of several scales.
func idTestBigints() []int64 {
	vals := []int64{0, 1, -1, 2, -2, 42, -42, 1000, 1284551,
		math.MaxInt32, math.MaxInt32 - 1, math.MinInt32, math.MinInt32 + 1,
		math.MaxInt32 + 1, math.MinInt32 - 1, math.MaxUint32, math.MaxUint32 + 1, -math.MaxUint32, -math.MaxUint32 - 1,
		math.MaxInt64, math.MaxInt64 - 1, math.MinInt64, math.MinInt64 + 1,
		1 << 32, 1<<32 - 1, -(1 << 32), 1 << 62, -(1 << 62),
		734197815705617408, 734197815705604096, 734197815713992704, 362387865620483, 362388285050880,
	}
	r := rand.New(rand.NewPCG(20260101, 3))
	for range 1000 {
		vals = append(vals, int64(r.Uint64()))   // full range
		vals = append(vals, int64(r.Int32()))    // int32 range, both signs
		vals = append(vals, r.Int64N(1_000_000)) // serial-like
		vals = append(vals, -r.Int64N(1<<40))
	}
	return vals
}

// idTestUUIDs returns uuids to compare: nil, max, RFC examples and seeded
// pseudo-random bytes (any version: hashing does not look at it).
func idTestUUIDs() []ids.UUID {
	var out []ids.UUID
	for _, s := range []string{
		"00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff",
		"017f22e2-79b0-7cc3-98c4-dc0c0c07398f", "919108f7-52d1-4320-9bac-f847db4148a8",
	} {
		u, err := ids.ParseUUID(s)
		if err != nil {
			panic(err)
		}
		out = append(out, u)
	}
	r := rand.New(rand.NewPCG(20260101, 4))
	for range 2000 {
		var u ids.UUID
		for i := range u {
			u[i] = byte(r.Uint32())
		}
		out = append(out, u)
	}
	return out
}

func connectShard(ctx context.Context, t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// uniqueIDName is a table name no other test run uses.
func uniqueIDName(prefix string) string {
	return fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), time.Now().UnixNano())
}

// pgRemainders asks PostgreSQL for the partition remainder of each value
// (given as text, cast to typ) among modulus hash partitions, twice: by
// routing rows into a hash-partitioned table, and with
// satisfies_hash_partition. It fails the test if the two disagree.
func pgRemainders(ctx context.Context, t *testing.T, conn *pgx.Conn, typ string, values []string, modulus int) []int {
	t.Helper()
	parent := uniqueIDName("ids_hp_" + typ)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(fmt.Sprintf(`CREATE TABLE %s (i int NOT NULL, v %s) PARTITION BY HASH (v)`, parent, typ))
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), "DROP TABLE IF EXISTS "+parent)
	})
	for r := range modulus {
		exec(fmt.Sprintf(`CREATE TABLE %s_p%d PARTITION OF %s FOR VALUES WITH (MODULUS %d, REMAINDER %d)`,
			parent, r, parent, modulus, r))
	}
	exec(fmt.Sprintf(`INSERT INTO %s (i, v) SELECT o - 1, x::%s FROM unnest($1::text[]) WITH ORDINALITY AS u(x, o)`, parent, typ), values)

	rows, err := conn.Query(ctx, fmt.Sprintf(`
		SELECT i, substring(tableoid::regclass::text FROM '_p([0-9]+)$')::int,
		       (SELECT array_agg(r) FROM generate_series(0, $1 - 1) r
		         WHERE satisfies_hash_partition(%s::regclass, $1, r, v))
		FROM %s ORDER BY i`, quoteLiteral(parent), parent), modulus)
	if err != nil {
		t.Fatalf("query remainders: %v", err)
	}
	out := make([]int, len(values))
	n := 0
	for rows.Next() {
		var i, routed int
		var satisfied []int32
		if err := rows.Scan(&i, &routed, &satisfied); err != nil {
			t.Fatalf("scan: %v", err)
		}
		if len(satisfied) != 1 || int(satisfied[0]) != routed {
			t.Fatalf("%s %s: routed to remainder %d, satisfies_hash_partition true for %v", typ, values[i], routed, satisfied)
		}
		out[i] = routed
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("rows: %v", err)
	}
	if n != len(values) {
		t.Fatalf("%d rows back, inserted %d", n, len(values))
	}
	return out
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// TestIDsHashPartitionMatchesPostgres compares ids.PartitionInt8 and
// ids.PartitionUUID with a live PostgreSQL for thousands of values.
func TestIDsHashPartitionMatchesPostgres(t *testing.T) {
	s := loadStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	conn := connectShard(ctx, t, s.ShardDSNs[0])

	var server string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&server); err != nil {
		t.Fatal(err)
	}
	bigints := idTestBigints()
	uuids := idTestUUIDs()
	golden := idVectors{Server: server, Moduli: idModuli}

	bigText := make([]string, len(bigints))
	for i, v := range bigints {
		bigText[i] = strconv.FormatInt(v, 10)
		golden.Bigints = append(golden.Bigints, idVectorEntry{Value: bigText[i]})
	}
	uuidText := make([]string, len(uuids))
	for i, u := range uuids {
		uuidText[i] = u.String()
		golden.UUIDs = append(golden.UUIDs, idVectorEntry{Value: uuidText[i]})
	}

	// The raw 64-bit hashes first: a mismatch there pinpoints the hash
	// function rather than the partition arithmetic.
	rows, err := conn.Query(ctx, `SELECT hashint8extended(v, $2) FROM unnest($1::int8[]) WITH ORDINALITY u(v, o) ORDER BY o`,
		bigints, int64(ids.HashPartitionSeed))
	if err != nil {
		t.Fatal(err)
	}
	hashes, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range hashes {
		if got := ids.HashInt8Extended(bigints[i], ids.HashPartitionSeed); got != uint64(h) {
			t.Errorf("hashint8extended(%d) = %d, ids says %d", bigints[i], h, int64(got))
		}
	}

	for _, m := range idModuli {
		pgBig := pgRemainders(ctx, t, conn, "int8", bigText, m)
		for i, v := range bigints {
			got, err := ids.PartitionInt8(v, m)
			if err != nil || got != pgBig[i] {
				t.Errorf("bigint %d modulus %d: PostgreSQL remainder %d, ids %d (%v)", v, m, pgBig[i], got, err)
			}
			golden.Bigints[i].Remainders = append(golden.Bigints[i].Remainders, pgBig[i])
		}
		pgUUID := pgRemainders(ctx, t, conn, "uuid", uuidText, m)
		for i, u := range uuids {
			got, err := ids.PartitionUUID(u, m)
			if err != nil || got != pgUUID[i] {
				t.Errorf("uuid %s modulus %d: PostgreSQL remainder %d, ids %d (%v)", u, m, pgUUID[i], got, err)
			}
			golden.UUIDs[i].Remainders = append(golden.UUIDs[i].Remainders, pgUUID[i])
		}
		// The layouts used by per-table config agree too.
		lb, _ := ids.Lookup(fmt.Sprintf("pgdog-hash-bigint:%d", m))
		lu, _ := ids.Lookup(fmt.Sprintf("pgdog-hash-uuid:%d", m))
		for i := 0; i < len(bigText) && i < 50; i++ {
			if d, err := lb.Decode(bigText[i]); err != nil || d.Shard != pgBig[i] {
				t.Errorf("%s.Decode(%s) = %+v, %v; want shard %d", lb.Name(), bigText[i], d, err, pgBig[i])
			}
			if d, err := lu.Decode(uuidText[i]); err != nil || d.Shard != pgUUID[i] {
				t.Errorf("%s.Decode(%s) = %+v, %v; want shard %d", lu.Name(), uuidText[i], d, err, pgUUID[i])
			}
		}
	}
	t.Logf("compared %d bigints and %d uuids for moduli %v on PostgreSQL %s", len(bigints), len(uuids), idModuli, server)

	if *updateIDVectors && !t.Failed() {
		// A prefix keeps the file small: every boundary value and
		// enough random ones.
		golden.Bigints = golden.Bigints[:min(len(golden.Bigints), goldenBigints)]
		golden.UUIDs = golden.UUIDs[:min(len(golden.UUIDs), goldenUUIDs)]
		if err := os.WriteFile(idVectorsFile, marshalIDVectors(t, golden), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// marshalIDVectors writes the golden file with one value per line, so that
// diffs stay readable.
func marshalIDVectors(t *testing.T, g idVectors) []byte {
	t.Helper()
	var b strings.Builder
	enc := func(v any) string {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	fmt.Fprintf(&b, "{\"server\": %s,\n\"moduli\": %s,\n", enc(g.Server), enc(g.Moduli))
	for _, part := range []struct {
		name    string
		entries []idVectorEntry
	}{{"bigints", g.Bigints}, {"uuids", g.UUIDs}} {
		fmt.Fprintf(&b, "\"%s\": [\n", part.name)
		for i, e := range part.entries {
			sep := ","
			if i == len(part.entries)-1 {
				sep = ""
			}
			fmt.Fprintf(&b, "%s%s\n", enc(e), sep)
		}
		if part.name == "bigints" {
			b.WriteString("],\n")
		} else {
			b.WriteString("]}\n")
		}
	}
	return []byte(b.String())
}

// TestIDsHashPartitionGolden checks internal/ids against vectors recorded
// from PostgreSQL (go test -run HashPartitionMatchesPostgres
// -update-id-vectors), so the bit-exactness is checked without a stack.
func TestIDsHashPartitionGolden(t *testing.T) {
	data, err := os.ReadFile(filepath.FromSlash(idVectorsFile))
	if err != nil {
		t.Fatalf("read golden vectors: %v", err)
	}
	var g idVectors
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatalf("parse %s: %v", idVectorsFile, err)
	}
	if len(g.Bigints) < goldenBigints || len(g.UUIDs) < goldenUUIDs {
		t.Fatalf("%s holds only %d bigints and %d uuids", idVectorsFile, len(g.Bigints), len(g.UUIDs))
	}
	for _, e := range g.Bigints {
		v, err := strconv.ParseInt(e.Value, 10, 64)
		if err != nil || len(e.Remainders) != len(g.Moduli) {
			t.Fatalf("bad golden entry %+v", e)
		}
		for j, m := range g.Moduli {
			if got, _ := ids.PartitionInt8(v, m); got != e.Remainders[j] {
				t.Errorf("bigint %d modulus %d: PostgreSQL %s said %d, ids %d", v, m, g.Server, e.Remainders[j], got)
			}
		}
	}
	for _, e := range g.UUIDs {
		u, err := ids.ParseUUID(e.Value)
		if err != nil || len(e.Remainders) != len(g.Moduli) {
			t.Fatalf("bad golden entry %+v", e)
		}
		for j, m := range g.Moduli {
			if got, _ := ids.PartitionUUID(u, m); got != e.Remainders[j] {
				t.Errorf("uuid %s modulus %d: PostgreSQL %s said %d, ids %d", u, m, g.Server, e.Remainders[j], got)
			}
		}
	}
}

// nextIDLockKey is the advisory lock tributary.next_id() holds while it
// touches tributary.id_seq (see schema/postgres/01_snowflake.sql).
const nextIDLockKey int64 = 8390884927342928242

// TestIDsNextIDConcurrent calls tributary.next_id() from several
// connections on every shard: no duplicates within or across shards, each
// connection sees increasing ids, and every id decodes (layout seed000) to
// its shard and to a time within the calls' window.
func TestIDsNextIDConcurrent(t *testing.T) {
	s := loadStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const conns, batches, perBatch = 8, 20, 500
	type result struct {
		ids []int64
		err error
	}
	var all []int64
	for shardIdx, dsn := range s.ShardDSNs {
		admin := connectShard(ctx, t, dsn)
		var shardID, shardCount int
		if err := admin.QueryRow(ctx, `SELECT shard_id, shard_count FROM tributary.shard_config`).Scan(&shardID, &shardCount); err != nil {
			t.Fatalf("shard %d: read tributary.shard_config (is schema/postgres applied?): %v", shardIdx, err)
		}
		layout, err := ids.Lookup("seed000:" + strconv.Itoa(shardCount))
		if err != nil {
			t.Fatal(err)
		}
		var before time.Time
		if err := admin.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&before); err != nil {
			t.Fatal(err)
		}

		results := make([]result, conns)
		var wg sync.WaitGroup
		for c := range conns {
			wg.Go(func() {
				conn, err := pgx.Connect(ctx, dsn)
				if err != nil {
					results[c].err = err
					return
				}
				defer conn.Close(context.Background())
				var prevMax int64 = -1
				for b := range batches {
					rows, err := conn.Query(ctx, `SELECT tributary.next_id() FROM generate_series(1, $1)`, perBatch)
					if err != nil {
						results[c].err = err
						return
					}
					got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
					if err != nil {
						results[c].err = err
						return
					}
					// Statements of one connection are sequential, so every id
					// of batch b is above every id of batch b-1.
					if slices.Min(got) <= prevMax {
						results[c].err = fmt.Errorf("batch %d: id %d not above the previous batch's %d", b, slices.Min(got), prevMax)
						return
					}
					prevMax = slices.Max(got)
					results[c].ids = append(results[c].ids, got...)
				}
			})
		}
		wg.Wait()
		var after time.Time
		if err := admin.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&after); err != nil {
			t.Fatal(err)
		}
		for c, r := range results {
			if r.err != nil {
				t.Fatalf("shard %d connection %d: %v", shardIdx, c, r.err)
			}
			for _, id := range r.ids {
				d, err := layout.Decode(strconv.FormatInt(id, 10))
				if err != nil {
					t.Fatalf("shard %d: id %d does not decode: %v", shardIdx, id, err)
				}
				if d.Shard != shardID {
					t.Fatalf("shard %d: id %d decodes to shard %d, config says %d", shardIdx, id, d.Shard, shardID)
				}
				if d.Time.Before(before.Truncate(time.Millisecond)) || d.Time.After(after) {
					t.Fatalf("shard %d: id %d time %v outside the calls' window [%v, %v]", shardIdx, id, d.Time, before, after)
				}
			}
			all = append(all, r.ids...)
		}
	}
	slices.Sort(all)
	if i := firstDuplicate(all); i >= 0 {
		t.Fatalf("duplicate id %d", all[i])
	}
	if want := len(s.ShardDSNs) * conns * batches * perBatch; len(all) != want {
		t.Fatalf("%d ids, want %d", len(all), want)
	}
}

func firstDuplicate(sorted []int64) int {
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			return i
		}
	}
	return -1
}

// TestIDsNextIDRollbackAndAhead: a rolled-back transaction does not rewind
// next_id(), and when the sequence state is ahead of the clock (as after a
// burst of more than 1024 ids in a millisecond) next_id() waits for the
// clock instead of issuing an id from the future.
func TestIDsNextIDRollbackAndAhead(t *testing.T) {
	s := loadStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := connectShard(ctx, t, s.ShardDSNs[0])

	var inTx, afterTx int64
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, `SELECT tributary.next_id()`).Scan(&inTx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT tributary.next_id()`).Scan(&afterTx); err != nil {
		t.Fatal(err)
	}
	if afterTx <= inTx {
		t.Fatalf("id after rollback %d not above the rolled-back %d", afterTx, inTx)
	}

	// Push the state 200 ms into the future, under next_id()'s own lock
	// and never backwards, then ask for an id.
	const aheadMS = 200
	var forcedMS int64
	err = conn.QueryRow(ctx, `
		WITH l AS (SELECT pg_advisory_lock($1)),
		     s AS (SELECT setval('tributary.id_seq', GREATEST(
		                (SELECT last_value FROM tributary.id_seq),
		                ((floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - 1704067200000 + $2) << 10))) AS v
		           FROM l)
		SELECT v >> 10 FROM s`, nextIDLockKey, aheadMS).Scan(&forcedMS)
	if _, uerr := conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, nextIDLockKey); uerr != nil {
		t.Fatal(uerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	var id int64
	var issued time.Time
	if err := conn.QueryRow(ctx, `SELECT tributary.next_id(), clock_timestamp()`).Scan(&id, &issued); err != nil {
		t.Fatal(err)
	}
	layout, _ := ids.Lookup("seed000")
	d, err := layout.Decode(strconv.FormatInt(id, 10))
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Time.UnixMilli() - 1704067200000; got < forcedMS {
		t.Fatalf("id time field %d below the forced state %d", got, forcedMS)
	}
	if d.Time.After(issued) {
		t.Fatalf("id time %v is after the call returned (%v): issued from the future", d.Time, issued)
	}
}
