// Package loader is `bench loader`: Kafka -> ClickHouse throughput of the
// loader (internal/loader) with dedupe on, beside its floor (floor.go).
package loader

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/bench/internal/benchwork"
	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/flagenv"
	"github.com/tributary/tributary/internal/kafkaconn"
	"github.com/tributary/tributary/internal/loader"
	"github.com/tributary/tributary/internal/tables"
)

// Run is `bench loader`: it produces synthetic change envelopes to a fresh topic, then
// runs the loader until the group has committed all of them, and reports
// rows/s, CPU and peak RSS of the load phase, and whether ClickHouse holds
// exactly the expected live rows.
func Run(ctx context.Context, args []string) error {
	var changes, keys, shards, partitions, batch, unchangedPct, bodyBytes, imageCache, nTables, wmEvery int
	var brokers, chCluster, jsonOut, cpuProfile, memProfile string
	var floor bool
	fs := flagenv.New("bench loader", "bench loader — Kafka -> ClickHouse throughput of the loader with dedupe on.")
	fs.Int(&changes, "changes", "", 1_000_000, "changes to produce (mix: first write of a key is an insert, then 80% updates, 20% deletes)")
	fs.Int(&keys, "keys", "", 200_000, "distinct ids")
	fs.Int(&shards, "shards", "", 4, "source shards the changes claim to come from")
	fs.Int(&partitions, "partitions", "", 4, "topic partitions")
	fs.Int(&batch, "batch-records", "", 50000, "loader batch size")
	fs.Int(&unchangedPct, "unchanged-percent", "", 0, "share of updates (0..100) that leave a TOASTed body column unchanged, so the loader must find its base (adds the body column)")
	fs.Int(&bodyBytes, "body-bytes", "", 0, "size of the body column's values (0: no body column, or 2000 with --unchanged-percent)")
	fs.Int(&imageCache, "image-cache-bytes", "", loader.DefaultImageCacheBytes, "the loader's image cache for unchanged-TOAST bases (0: off, every base read from ClickHouse)")
	fs.Int(&nTables, "tables", "", 1, "tables (each its own topic) the ids are spread over; a batch writes every table it holds")
	fs.Int(&wmEvery, "watermark-every", "", 0, "after every N changes, a watermark record of each shard to every partition of every topic, as a reader sends them (0: none)")
	fs.Bool(&floor, "floor", "", true, "after the load, measure the floor: the rows the loader wrote inserted again into a copy of the table with bare clickhouse-go column batches of --batch-records rows (floor.go), and print the ratio")
	var kafkaSec kafkaconn.Security
	kafkaconn.AddClientFlags(fs, &brokers, &kafkaSec)
	var ch chstore.Conn
	chstore.AddFlags(fs, &ch, chstore.ConnUsage{Database: "prefix of the scratch database the bench loads into and drops (<prefix>_bench_<run>)"})
	fs.String(&chCluster, "clickhouse-cluster", "TRIBUTARY_CLICKHOUSE_CLUSTER", "", "load in ClickHouse cluster mode over this cluster, as the loader's --clickhouse-cluster (empty: one server)")
	fs.String(&jsonOut, "json", "", "", "also write the results as JSON to this file")
	fs.String(&cpuProfile, "cpuprofile", "TRIBUTARY_BENCH_CPUPROFILE", "", "write a CPU profile of the load phase to this file")
	fs.String(&memProfile, "memprofile", "TRIBUTARY_BENCH_MEMPROFILE", "", "write a heap profile at the end of the load phase to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if unchangedPct < 0 || unchangedPct > 100 || bodyBytes < 0 || imageCache < 0 || nTables < 1 || wmEvery < 0 {
		return errors.New("--unchanged-percent must be in 0..100, --body-bytes, --image-cache-bytes and --watermark-every >= 0, --tables >= 1")
	}
	if unchangedPct > 0 && bodyBytes == 0 {
		bodyBytes = 2000
	}
	if err := errors.Join(ch.Validate()...); err != nil {
		return fmt.Errorf("%w (source .stack/stack.env)", err)
	}
	if err := ch.ReadPassword(); err != nil {
		return err
	}
	if err := errors.Join(kafkaconn.ValidateClient(brokers, kafkaSec)...); err != nil {
		return err
	}
	run := strconv.FormatInt(time.Now().Unix(), 36)
	db := ch.Database + "_bench_" + run
	// Table i is "docs" (the first) or "docs<i>", with its own topic.
	tableName := func(i int) string {
		if i == 0 {
			return "docs"
		}
		return "docs" + strconv.Itoa(i)
	}
	var names, topics, tcfgs []string
	for i := range nTables {
		names = append(names, tableName(i))
		topics = append(topics, "bench_"+run+"."+tableName(i))
		tcfgs = append(tcfgs, fmt.Sprintf(`{"name":%q,"id_column":"id","id_layout":"seed000","topic":%q}`, names[i], topics[i]))
	}
	tcfg, err := tables.Parse([]byte(`{"tables":[` + strings.Join(tcfgs, ",") + `]}`))
	if err != nil {
		return err
	}
	// Partitions chosen here: a change by its key (Kafka's murmur2, as the
	// reader), a watermark to each partition.
	cl, err := kafkaSec.NewClient(flagenv.List(brokers), kgo.ProducerLinger(10*time.Millisecond),
		kgo.MaxBufferedRecords(200_000), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	byKey := kgo.StickyKeyPartitioner(nil).ForTopic("")
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopics(ctx, int32(partitions), -1, nil, topics...); err != nil {
		return fmt.Errorf("create topic: %w", err)
	}
	defer adm.DeleteTopics(context.Background(), topics...) //nolint:errcheck
	if err := topicsReady(ctx, adm, topics, partitions); err != nil {
		return err
	}

	// Produce.
	cols := []envelope.Column{{Name: "id", Type: "bigint", OID: 20, Key: true}, {Name: "workspace_id", Type: "bigint", OID: 20},
		{Name: "title", Type: "text", OID: 25}, {Name: "amount", Type: "numeric(12,2)", OID: 1700},
		{Name: "created_at", Type: "timestamp with time zone", OID: 1184}}
	if bodyBytes > 0 {
		cols = append(cols, envelope.Column{Name: "body", Type: "text", OID: 25})
	}
	// A body is "<n>|" and padding, n the change that wrote it: the check
	// sums the n of the live rows, so a base filled from the wrong version
	// shows.
	padding := strings.Repeat("x", bodyBytes)
	lastBody := make([]int64, keys)
	unchangedN := 0
	live := make([]bool, keys)
	// The last values written per id, to check columns, not just counts.
	lastCents := make([]int64, keys)
	lastTitle := make([]int64, keys)
	seen := make([]bool, keys)
	shardOf := make([]int, keys)
	rnd := rand.New(rand.NewPCG(1, 2))
	start := time.Now()
	var lsn envelope.LSN = 0x1000000
	var bytes, records int64
	produce := func(r *kgo.Record) {
		records++
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil && ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "produce: %v\n", err)
			}
		})
	}
	for i := 0; i < changes; i++ {
		if wmEvery > 0 && i > 0 && i%wmEvery == 0 {
			for s := range shards {
				b, err := envelope.Encode(&envelope.Event{Kind: envelope.KindWatermark, Shard: s, CommitLSN: lsn,
					CommitTime: time.Now().UTC(), Partitions: int32(partitions)})
				if err != nil {
					return err
				}
				for _, tp := range topics {
					for p := range partitions {
						produce(&kgo.Record{Topic: tp, Partition: int32(p), Value: b})
					}
				}
			}
		}
		k := rnd.IntN(keys)
		if !seen[k] {
			seen[k], shardOf[k] = true, rnd.IntN(shards)
		}
		lsn += 64
		id := strconv.Itoa(734197815705617408 + k)
		ev := &envelope.Event{Kind: envelope.KindChange, Shard: shardOf[k], Schema: "public", Table: names[k%nTables], ID: id,
			LSN: lsn, CommitLSN: lsn + 32, CommitTime: time.Now().UTC(), Columns: cols}
		switch {
		case !live[k]:
			ev.Op = envelope.OpInsert
			live[k] = true
		case rnd.IntN(5) == 0:
			ev.Op = envelope.OpDelete
			ev.Before = map[string]*string{"id": &id}
			live[k] = false
		default:
			ev.Op = envelope.OpUpdate
		}
		if ev.Op != envelope.OpDelete {
			cents := rnd.Int64N(10_000_000)
			lastCents[k], lastTitle[k] = cents, int64(i)
			ws, title, amt, ts := strconv.Itoa(rnd.IntN(1000)), "title "+strconv.Itoa(i), fmt.Sprintf("%d.%02d", cents/100, cents%100), "2026-11-30 12:00:00.123456+00"
			ev.After = map[string]*string{"id": &id, "workspace_id": &ws, "title": &title, "amount": &amt, "created_at": &ts}
			switch {
			case bodyBytes == 0:
			case ev.Op == envelope.OpUpdate && rnd.IntN(100) < unchangedPct:
				ev.Unchanged = []string{"body"}
				unchangedN++
			default:
				body := strconv.Itoa(i) + "|" + padding
				ev.After["body"] = &body
				lastBody[k] = int64(i)
			}
		}
		b, err := envelope.Encode(ev)
		if err != nil {
			return err
		}
		bytes += int64(len(b))
		r := &kgo.Record{Topic: topics[k%nTables], Key: []byte(id), Value: b}
		r.Partition = int32(byKey.Partition(r, partitions))
		produce(r)
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	produceDur := time.Since(start)
	wantLive := 0
	var wantCents, wantTitles, wantBodies int64
	for k, l := range live {
		if l {
			wantLive++
			wantCents += lastCents[k]
			wantTitles += lastTitle[k]
			wantBodies += lastBody[k]
		}
	}
	fmt.Printf("produced %d changes (%.1f MB JSON, avg %d B) and %d watermark records over %d tables in %s: %.0f records/s; %d ids live at the end\n",
		changes, float64(bytes)/1e6, bytes/int64(changes), records-int64(changes), nTables, produceDur.Round(time.Millisecond), float64(records)/produceDur.Seconds(), wantLive)
	if bodyBytes > 0 {
		fmt.Printf("%d updates (%.1f%% of the changes) leave the %d-byte body unchanged\n", unchangedN, 100*float64(unchangedN)/float64(changes), bodyBytes)
	}

	// Load.
	store, err := chstore.Open(ctx, chstore.Options{Addr: ch.Addr, Database: db, Username: ch.User, Password: ch.Password, TLS: ch.TLS, Cluster: chCluster})
	if err != nil {
		return err
	}
	defer func() {
		store.DropDatabase(context.Background()) //nolint:errcheck
		store.Close()
	}()
	if chCluster != "" {
		fmt.Printf("ClickHouse cluster mode: cluster %s, %d nodes\n", chCluster, len(store.Nodes()))
	}
	// The producer phase's garbage is returned to the OS first, and the
	// load phase's peak is sampled (VmHWM cannot be reset here).
	debug.FreeOSMemory()
	var loadPeak int64
	var ru0 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0) //nolint:errcheck
	chPID := clickhousePID()
	chCPU0 := benchwork.CPUOf(chPID)
	group := "bench_" + run
	var logOut io.Writer = io.Discard
	if os.Getenv("TRIBUTARY_BENCH_LOG") != "" {
		logOut = os.Stderr
	}
	reg := prometheus.NewRegistry()
	cacheBudget := int64(imageCache)
	if cacheBudget == 0 {
		cacheBudget = -1 // off (Config's 0 is the default)
	}
	l := loader.New(loader.Config{Brokers: flagenv.List(brokers), KafkaSecurity: kafkaSec, Group: group, DLQTopic: "bench_" + run + ".dlq",
		Tables: tcfg, BatchRecords: batch, BatchWait: 200 * time.Millisecond, LagInterval: time.Hour,
		ImageCacheBytes: cacheBudget},
		store, slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelInfo})), reg)
	stopProfile, err := benchwork.StartCPUProfile(cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	loadStart := time.Now()
	go func() { errc <- l.Run(lctx) }()
	var loadDur time.Duration
	for {
		select {
		case err := <-errc:
			return fmt.Errorf("loader stopped: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		loadPeak = max(loadPeak, benchwork.SelfKB("VmRSS"))
		lags, err := adm.Lag(ctx, group)
		if err != nil {
			continue
		}
		// Done when the group's committed offsets add up to every record
		// produced (the topic is new, so offsets start at 0).
		var committed int64
		if g, ok := lags[group]; ok {
			for _, m := range g.Lag.Sorted() {
				if m.Err == nil && m.Commit.At > 0 {
					committed += m.Commit.At
				}
			}
		}
		if committed >= records {
			loadDur = time.Since(loadStart)
			break
		}
	}
	if path := memProfile; path != "" {
		// Heap at the end of the load, while the loader still runs: what it
		// holds between batches (inuse) and what it allocated (alloc).
		if err := benchwork.WriteHeapProfile(path); err != nil {
			return err
		}
	}
	var ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1) //nolint:errcheck
	cancel()
	<-errc
	stopProfile() // the load phase only: not the check, nor the floor
	cpu := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) * time.Nanosecond
	chCPU := benchwork.CPUOf(chPID) - chCPU0
	hwm := loadPeak

	var gotLive, gotTitles uint64
	var dup int64
	var gotAmount string
	// Every table's live rows, FINAL each (ids are disjoint across tables).
	var parts []string
	for _, n := range names {
		parts = append(parts, "SELECT id, _shard, amount, title, body FROM `"+db+"`.`"+n+"` FINAL WHERE _deleted = 0")
	}
	if bodyBytes == 0 {
		for i := range parts {
			parts[i] = strings.Replace(parts[i], ", body FROM", ", '' AS body FROM", 1)
		}
	}
	liveRows := "(" + strings.Join(parts, " UNION ALL ") + ")"
	row := store.Conn().QueryRow(ctx, "SELECT count(), count() - uniqExact(id, _shard), toString(sum(amount)), sum(toUInt64(substring(title, 7))) FROM "+liveRows)
	if err := row.Scan(&gotLive, &dup, &gotAmount, &gotTitles); err != nil {
		return fmt.Errorf("count: %w", err)
	}
	wantAmount := fmt.Sprintf("%d.%02d", wantCents/100, wantCents%100)
	exact := int(gotLive) == wantLive && dup == 0 && decimalEqual(gotAmount, wantAmount) && int64(gotTitles) == wantTitles
	bodiesOK := true
	if bodyBytes > 0 {
		var gotBodies int64
		q := "SELECT toInt64(sum(toUInt64(splitByChar('|', assumeNotNull(body))[1]))) FROM " + liveRows
		if err := store.Conn().QueryRow(ctx, q).Scan(&gotBodies); err != nil {
			return fmt.Errorf("check bodies: %w", err)
		}
		bodiesOK = gotBodies == wantBodies
		exact = exact && bodiesOK
	}
	res := map[string]any{
		"changes": changes, "keys": keys, "load_seconds": loadDur.Seconds(),
		"rows_per_second": float64(changes) / loadDur.Seconds(), "cpu_seconds": cpu.Seconds(),
		"cores_used": cpu.Seconds() / loadDur.Seconds(), "peak_rss_mb": float64(hwm) / 1024,
		"live_expected": wantLive, "live_in_clickhouse": gotLive, "duplicates": dup, "exact": exact,
	}
	fmt.Printf("loaded %d changes in %s: %.0f changes/s, %.2f cores (loader + ClickHouse client; ClickHouse server not included), peak RSS during the load %.0f MB\n",
		changes, loadDur.Round(time.Millisecond), res["rows_per_second"], res["cores_used"], res["peak_rss_mb"])
	fmt.Printf("ClickHouse server CPU during the load: %.1f s (%.2f cores)\n", chCPU.Seconds(), chCPU.Seconds()/loadDur.Seconds())
	res["clickhouse_cpu_seconds"] = chCPU.Seconds()
	stages := stageSeconds(reg)
	res["stage_seconds"] = stages
	fmt.Printf("where the loader's time went (wall s):")
	for _, st := range sortedKeys(stages) {
		fmt.Printf(" %s %.1f", st, stages[st])
	}
	fmt.Println()
	fmt.Printf("exact: %v (live ids expected %d, in ClickHouse %d, duplicates %d; sum(amount) expected %s, got %s; latest titles %v; bodies from the right version %v)\n",
		exact, wantLive, gotLive, dup, wantAmount, gotAmount, int64(gotTitles) == wantTitles, bodiesOK)
	if bodyBytes > 0 {
		bases := map[string]float64{}
		for _, src := range []string{"batch", "cache", "clickhouse"} {
			bases[src] = counterOf(reg, "tributary_loader_toast_bases_total", "source", src)
		}
		res["toast_bases"] = bases
		fmt.Printf("unchanged-TOAST bases: batch %.0f, image cache %.0f, read from ClickHouse %.0f\n", bases["batch"], bases["cache"], bases["clickhouse"])
	}
	if floor && exact {
		inserted := 0.0
		for _, n := range names {
			inserted += counterOf(reg, "tributary_loader_rows_inserted_total", "table", n)
		}
		f, err := loaderFloor(ctx, store.Conn(), db, names[0], "floor_"+names[0], "id", batch)
		if err != nil {
			return err
		}
		floorRate := float64(f.Rows) / f.Wall.Seconds()
		rate := float64(changes) / loadDur.Seconds()
		res["floor_rows"], res["floor_seconds"], res["floor_cpu_seconds"], res["floor_rows_per_second"] = f.Rows, f.Wall.Seconds(), f.CPU.Seconds(), floorRate
		res["rows_inserted"], res["ratio_to_floor"] = inserted, rate/floorRate
		res["cpu_us_per_change"], res["floor_cpu_us_per_row"] = 1e6*cpu.Seconds()/float64(changes), 1e6*f.CPU.Seconds()/float64(f.Rows)
		fmt.Printf("floor (bare column-batch inserts of the %d rows of %s as ClickHouse holds them, %d batches, into a copy of the table): %.0f rows/s, %.2f CPU-µs per row\n",
			f.Rows, names[0], f.Batches, floorRate, res["floor_cpu_us_per_row"])
		fmt.Printf("loader / floor: %.3f (%.0f changes/s, %.0f rows inserted, %.2f CPU-µs per change; goal >= 0.25 and <= 3 µs)\n",
			rate/floorRate, rate, inserted, res["cpu_us_per_change"])
		if nTables > 1 {
			fmt.Println("(the floor copies the first table only)")
		}
	}
	if jsonOut != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(jsonOut, b, 0o644); err != nil {
			return err
		}
	}
	if !exact {
		return errors.New("ClickHouse does not hold exactly the expected rows")
	}
	return nil
}

// decimalEqual compares two decimal texts ("12.50" and "12.5").
func decimalEqual(a, b string) bool {
	norm := func(s string) string {
		if strings.Contains(s, ".") {
			s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
		}
		return s
	}
	return norm(a) == norm(b)
}

// clickhousePID reads the local stack's ClickHouse pid (0 if unknown).
func clickhousePID() int {
	home := os.Getenv("TRIBUTARY_HOME")
	if home == "" {
		return 0
	}
	b, err := os.ReadFile(home + "/clickhouse/clickhouse-server.pid")
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// stageSeconds reads tributary_loader_stage_seconds_total by stage.
func stageSeconds(g prometheus.Gatherer) map[string]float64 {
	out := map[string]float64{}
	mfs, err := g.Gather()
	if err != nil {
		return out
	}
	for _, mf := range mfs {
		if mf.GetName() != "tributary_loader_stage_seconds_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "stage" {
					out[lp.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

func sortedKeys(m map[string]float64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// counterOf is the value of the counter name{label=value} in g (0 if none).
func counterOf(g prometheus.Gatherer, name, label, value string) float64 {
	mfs, err := g.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// topicsReady waits until every partition of topics has a leader: a
// broker that created them may not host them yet, and a produce then
// fails after its retries (UNKNOWN_TOPIC_OR_PARTITION), which would lose
// changes the check expects.
func topicsReady(ctx context.Context, adm *kadm.Client, topics []string, partitions int) error {
	deadline := time.Now().Add(time.Minute)
	for {
		md, err := adm.Metadata(ctx, topics...)
		ready := err == nil
		for _, t := range topics {
			td, ok := md.Topics[t]
			if !ready || !ok || td.Err != nil || len(td.Partitions) != partitions {
				ready = false
				break
			}
			for _, p := range td.Partitions {
				if p.Err != nil || p.Leader < 0 {
					ready = false
				}
			}
		}
		if ready {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topics %v: no leader for every partition after a minute (metadata error: %v)", topics, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
