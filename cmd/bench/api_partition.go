package main

// byid-partition and byid-churn: the documents table partitioned by a block
// of the id, against the table as the loader creates it (one partition).
//
// A by-id read of `documents` opens one granule in every part, because
// every part's id range covers nearly every id: the load's shuffled later
// versions (like a live table's updates) land in parts that span the whole
// id range. Partitioned by intDiv(id, 2^bits), every version of a row lands
// in its id's partition (an id never changes), parts never span two
// partitions, and the read opens only the parts of one partition (the
// minmax index of the partition key prunes the others). The copies are
// written by the load's own writer (same rows, batches and order), so their
// parts form as the original's did; ClickHouse's merges are then awaited
// like the load's.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/query"
)

// apiCopiesTable records the copies whose load completed.
const apiCopiesTable = "_bench_api_copies"

// partitionTable is the name of the copy partitioned by 2^bits ids.
func partitionTable(bits int) string { return "documents_pby" + strconv.Itoa(bits) }

// ensurePartitionCopies makes documents_pby<bits> hold every version of the
// documents load for each --partition-bits, creating and loading the
// copies that are missing or incomplete, then waits for the merges.
func (d *apiData) ensurePartitionCopies(ctx context.Context, store *chstore.Store) ([]string, error) {
	conn := store.Conn()
	db := chstore.Quote(d.c.db)
	docs, err := store.EnsureTable(ctx, "documents", "id", apiDocColumns)
	if err != nil {
		return nil, err
	}
	// Completed copies are recorded apart from the load's own fingerprint.
	if err := conn.Exec(ctx, fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s.%s (fingerprint String, loaded_at DateTime) ENGINE = TinyLog",
		db, apiCopiesTable)); err != nil {
		return nil, err
	}
	var names []string
	loadedAny := false
	for _, bits := range d.c.partitionBits {
		name := partitionTable(bits)
		names = append(names, name)
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = ? AND name = ?", d.c.db, name).Scan(&n); err != nil {
			return nil, err
		}
		if n > 0 {
			var meta uint64
			if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT count() FROM %s.%s WHERE fingerprint = ?", db, apiCopiesTable),
				d.fingerprint()+" "+name).Scan(&meta); err != nil {
				return nil, err
			}
			if meta > 0 {
				fmt.Printf("%s: loaded before (--keep)\n", name)
				continue
			}
			if err := conn.Exec(ctx, fmt.Sprintf("DROP TABLE %s.%s", db, chstore.Quote(name))); err != nil {
				return nil, err
			}
		}
		ddl := fmt.Sprintf("CREATE TABLE %s.%s AS %s.documents ENGINE = ReplacingMergeTree(_version) PARTITION BY intDiv(id, %d) ORDER BY (id, _shard) SETTINGS index_granularity = 1024",
			db, chstore.Quote(name), db, uint64(1)<<bits)
		if err := conn.Exec(ctx, ddl); err != nil {
			return nil, fmt.Errorf("create %s: %w", name, err)
		}
		tab := *docs
		tab.Name = name
		w := &apiRowWriter{d: d, conn: conn, db: d.c.db, tab: &tab, table: tDocs, n: d.c.docs, batch: d.c.batch}
		start := time.Now()
		if _, err := w.writeAll(ctx); err != nil {
			return nil, err
		}
		fmt.Printf("%s: %d rows loaded in %s\n", name, w.rows, time.Since(start).Round(time.Millisecond))
		// Marked complete only now: an interrupted load is redone.
		b, err := conn.PrepareBatch(ctx, fmt.Sprintf("INSERT INTO %s.%s (fingerprint, loaded_at)", db, apiCopiesTable))
		if err != nil {
			return nil, err
		}
		if err := b.Append(d.fingerprint()+" "+name, time.Now().UTC()); err != nil {
			return nil, err
		}
		if err := b.Send(); err != nil {
			return nil, err
		}
		loadedAny = true
	}
	if loadedAny {
		start := time.Now()
		if err := apiSettle(ctx, conn, d.c.db, d.c.settle); err != nil {
			return nil, err
		}
		fmt.Printf("merges settled in %s\n", time.Since(start).Round(time.Second))
	}
	if d.c.optimizeParts {
		for _, name := range names {
			if err := optimizePartitions(ctx, conn, d.c.db, name); err != nil {
				return nil, err
			}
		}
	}
	for _, name := range append([]string{"documents"}, names...) {
		if err := printParts(ctx, conn, d.c.db, name); err != nil {
			return nil, err
		}
	}
	return names, nil
}

// optimizePartitions merges every partition of table that has more than
// one active part into one (OPTIMIZE ... PARTITION p FINAL): what a
// maintenance job would do to partitions that stopped changing.
func optimizePartitions(ctx context.Context, conn driver.Conn, db, table string) error {
	rows, err := conn.Query(ctx, `SELECT partition FROM system.parts WHERE database = ? AND table = ? AND active
		GROUP BY partition HAVING count() > 1 ORDER BY partition`, db, table)
	if err != nil {
		return err
	}
	var ps []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			rows.Close()
			return err
		}
		ps = append(ps, p)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	start := time.Now()
	for _, p := range ps {
		if _, err := strconv.ParseInt(p, 10, 64); err != nil {
			return fmt.Errorf("%s: partition %q is not an id block", table, p)
		}
		if err := conn.Exec(ctx, fmt.Sprintf("OPTIMIZE TABLE %s.%s PARTITION %s FINAL", chstore.Quote(db), chstore.Quote(table), p)); err != nil {
			return fmt.Errorf("optimize %s partition %s: %w", table, p, err)
		}
	}
	fmt.Printf("%s: %d partitions merged to one part each in %s\n", table, len(ps), time.Since(start).Round(time.Millisecond))
	return nil
}

// printParts prints a table's partitions and active parts.
func printParts(ctx context.Context, conn driver.Conn, db, table string) error {
	rows, err := conn.Query(ctx, `SELECT partition, count(), sum(rows), max(rows) FROM system.parts
		WHERE database = ? AND table = ? AND active GROUP BY partition ORDER BY partition`, db, table)
	if err != nil {
		return err
	}
	defer rows.Close()
	var parts, partitions, maxParts uint64
	var per []string
	for rows.Next() {
		var p string
		var n, r, big uint64
		if err := rows.Scan(&p, &n, &r, &big); err != nil {
			return err
		}
		partitions++
		parts += n
		maxParts = max(maxParts, n)
		per = append(per, strconv.FormatUint(n, 10))
	}
	if err := rows.Err(); err != nil {
		return err
	}
	fmt.Printf("table %s: %d partitions, %d active parts (at most %d in one partition; per partition: %s)\n",
		table, partitions, parts, maxParts, strings.Join(per, " "))
	return nil
}

// checkSameRows compares query.Row (the API's read) of documents with the
// same read of each copy for random live, deleted and never-used ids.
func (d *apiData) checkSameRows(ctx context.Context, conn driver.Conn, copies []string, n int) error {
	q := query.New(conn, d.c.db)
	r := rand.New(rand.NewPCG(uint64(d.c.seed), 77))
	for j := range n {
		i := r.IntN(d.c.docs)
		id := d.id(tDocs, i, d.c.docs)
		if j%3 == 2 {
			id = d.missID(i, d.c.docs)
		}
		want, err := q.Row(ctx, "documents", "id", id)
		if err != nil {
			return err
		}
		if (len(want) == 0) != (d.docDeleted[i] || j%3 == 2) {
			return fmt.Errorf("documents: id %d: %d copies, row deleted %v", id, len(want), d.docDeleted[i])
		}
		wb, _ := json.Marshal(want)
		for _, name := range copies {
			got, err := q.Row(ctx, name, "id", id)
			if err != nil {
				return err
			}
			if gb, _ := json.Marshal(got); string(gb) != string(wb) {
				return fmt.Errorf("inexact: %s: id %d: %s, documents: %s", name, id, gb, wb)
			}
		}
	}
	return nil
}

// byIDPartition times the API's by-id read on documents and on each
// partitioned copy, interleaved, after checking they answer alike.
func (d *apiData) byIDPartition(ctx context.Context, store *chstore.Store) ([]apiScenarioResult, error) {
	conn := store.Conn()
	copies, err := d.ensurePartitionCopies(ctx, store)
	if err != nil {
		return nil, err
	}
	if err := d.checkSameRows(ctx, conn, copies, 3000); err != nil {
		return nil, err
	}
	fmt.Printf("exact: the API's read of 3000 random ids (live, deleted, never used) answers alike on documents and %s\n", strings.Join(copies, ", "))
	return d.timeMixed(ctx, conn, d.partitionShapes(copies), d.randLiveID), nil
}

// randLiveID is a random live document's id, as timeMixed's arguments.
func (d *apiData) randLiveID(r *rand.Rand) []any {
	return []any{d.id(tDocs, d.docLive[r.IntN(len(d.docLive))], d.c.docs)}
}

// partitionShapes: the API's read (and the key columns alone) of
// documents and of every copy, and the floor.
func (d *apiData) partitionShapes(copies []string) []apiShape {
	db := chstore.Quote(d.c.db)
	settings := query.PointLookup()
	var shapes []apiShape
	for _, t := range append([]string{"documents"}, copies...) {
		shapes = append(shapes,
			apiShape{name: "byid-api-" + t, sql: query.PlanRow(d.c.db, t, "id"), settings: settings},
			apiShape{name: "byid-key-columns-" + t, settings: settings,
				sql: "SELECT id, _shard, _version FROM " + db + "." + chstore.Quote(t) + " FINAL PREWHERE id = ? WHERE _deleted = 0"})
	}
	return append(shapes, apiShape{name: "select-1", sql: "SELECT 1 FROM system.one WHERE 1 = 1 OR ? = 0"})
}

// byIDChurn writes --churn-batches small batches of --churn-rows random
// documents' (among the newest --churn-recent share) final versions again (a redelivery: the same rows, so every
// answer stays the same) into documents and every copy, then times the
// reads at once, before ClickHouse merges the new small parts away: the
// parts a live table carries while the loader writes updates of old rows.
// In a partitioned copy, every batch makes one part in each partition it
// touches.
func (d *apiData) byIDChurn(ctx context.Context, store *chstore.Store) ([]apiScenarioResult, error) {
	conn := store.Conn()
	copies, err := d.ensurePartitionCopies(ctx, store)
	if err != nil {
		return nil, err
	}
	docs, err := store.EnsureTable(ctx, "documents", "id", apiDocColumns)
	if err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 78))
	for range d.c.churnBatches {
		rowsOf := make([]int, d.c.churnRows)
		// The newest --churn-recent share of the rows (ids follow the
		// row number): updates that touch recent documents only.
		recent := max(1, int(float64(d.c.docs)*d.c.churnRecent))
		for j := range rowsOf {
			rowsOf[j] = d.c.docs - recent + r.IntN(recent)
		}
		for _, name := range append([]string{"documents"}, copies...) {
			tab := *docs
			tab.Name = name
			w := &apiRowWriter{d: d, conn: conn, db: d.c.db, tab: &tab, table: tDocs, n: d.c.docs, batch: d.c.churnRows + 1}
			for _, i := range rowsOf {
				u, del := d.updates(tDocs, i)
				if del {
					u++
				}
				if err := w.add(ctx, i, u); err != nil {
					return nil, err
				}
			}
			if err := w.flush(ctx); err != nil {
				return nil, err
			}
		}
	}
	fmt.Printf("churn: %d batches of %d final versions of the newest %.0f%% of the rows written again into documents and %s\n",
		d.c.churnBatches, d.c.churnRows, 100*d.c.churnRecent, strings.Join(copies, ", "))
	for _, name := range append([]string{"documents"}, copies...) {
		if err := printParts(ctx, conn, d.c.db, name); err != nil {
			return nil, err
		}
	}
	if err := d.checkSameRows(ctx, conn, copies, 1000); err != nil {
		return nil, err
	}
	rs := d.timeMixed(ctx, conn, d.partitionShapes(copies), d.randLiveID)
	for _, name := range append([]string{"documents"}, copies...) {
		if err := printParts(ctx, conn, d.c.db, name); err != nil {
			return nil, err
		}
	}
	return rs, nil
}
