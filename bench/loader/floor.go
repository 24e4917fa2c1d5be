package loader

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"syscall"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// The loader's floor: the rows the loader wrote, inserted again into a
// table of the same definition on the same server with nothing but
// clickhouse-go column batches of the loader's batch size — no Kafka, no
// decoding, no dedupe, no conversion. What the loader does beyond a bare
// insert is the difference between the two rates.

// floorChunkRows bounds the rows the floor holds in memory at a time.
const floorChunkRows = 1_000_000

// floorResult is what the floor measured: rows inserted, the wall time
// and this process's CPU of the inserts (column appends and sends only,
// not the reads that fetched the rows).
type floorResult struct {
	Rows    int64
	Wall    time.Duration
	CPU     time.Duration
	Batches int
}

// loaderFloor copies every row of db.src (all the versions ClickHouse
// holds: what the loader inserted, less what merges have replaced) into a
// new table db.dst of the same definition, batch rows per insert, and
// times the inserts. The rows are read in chunks of at most floorChunkRows
// (by a hash of idColumn), each read before its inserts start.
func loaderFloor(ctx context.Context, conn driver.Conn, db, src, dst, idColumn string, batch int) (floorResult, error) {
	var res floorResult
	q := func(name string) string { return "`" + db + "`.`" + name + "`" }
	if err := conn.Exec(ctx, "CREATE TABLE "+q(dst)+" AS "+q(src)); err != nil {
		return res, fmt.Errorf("floor table: %w", err)
	}
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM "+q(src)).Scan(&n); err != nil {
		return res, fmt.Errorf("floor count: %w", err)
	}
	chunks := max(1, (n+floorChunkRows-1)/floorChunkRows)
	for j := range chunks {
		cols, names, err := floorRead(ctx, conn, fmt.Sprintf("SELECT * FROM %s WHERE cityHash64(`%s`) %% %d = %d", q(src), idColumn, chunks, j))
		if err != nil {
			return res, err
		}
		if len(cols) == 0 || cols[0].Len() == 0 {
			continue
		}
		rows := cols[0].Len()
		insert := "INSERT INTO " + q(dst) + " (`" + strings.Join(names, "`, `") + "`)"
		var ru0, ru1 syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru0) //nolint:errcheck
		start := time.Now()
		for lo := 0; lo < rows; lo += batch {
			hi := min(rows, lo+batch)
			b, err := conn.PrepareBatch(ctx, insert)
			if err != nil {
				return res, fmt.Errorf("floor batch: %w", err)
			}
			for i, c := range cols {
				if err := b.Column(i).Append(c.Slice(lo, hi).Interface()); err != nil {
					b.Abort() //nolint:errcheck
					return res, fmt.Errorf("floor column %s: %w", names[i], err)
				}
			}
			if err := b.Send(); err != nil {
				return res, fmt.Errorf("floor insert: %w", err)
			}
			res.Batches++
		}
		res.Wall += time.Since(start)
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru1) //nolint:errcheck
		res.CPU += time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
		res.Rows += int64(rows)
	}
	return res, nil
}

// floorRead runs query and returns its columns as slices of the driver's
// scan types (what a column batch takes back), and the column names.
func floorRead(ctx context.Context, conn driver.Conn, query string) ([]reflect.Value, []string, error) {
	rows, err := conn.Query(ctx, query)
	if err != nil {
		return nil, nil, fmt.Errorf("floor read: %w", err)
	}
	defer rows.Close()
	types := rows.ColumnTypes()
	cols := make([]reflect.Value, len(types))
	dest := make([]any, len(types))
	ptrs := make([]reflect.Value, len(types))
	for i, t := range types {
		cols[i] = reflect.MakeSlice(reflect.SliceOf(t.ScanType()), 0, 1024)
		ptrs[i] = reflect.New(t.ScanType())
		dest[i] = ptrs[i].Interface()
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, nil, fmt.Errorf("floor scan: %w", err)
		}
		for i := range cols {
			cols[i] = reflect.Append(cols[i], ptrs[i].Elem())
			if types[i].ScanType().Kind() == reflect.Pointer {
				// A row's pointer must not be the next row's target.
				ptrs[i] = reflect.New(types[i].ScanType())
				dest[i] = ptrs[i].Interface()
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("floor read: %w", err)
	}
	return cols, rows.Columns(), nil
}
