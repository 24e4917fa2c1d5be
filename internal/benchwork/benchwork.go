// Package benchwork is the committed workload of the reader benchmarks:
// `bench reader` (cmd/bench) and the side-by-side with Debezium
// (bench/peers) run the same SQL, so that their numbers compare. It also
// holds the /proc readings (a process's CPU time and memory, the machine's
// load) that every benchmark takes (proc.go).
package benchwork

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Params size the workloads.
type Params struct {
	Rows, TxnRows int // cases a and b: rows inserted, rows per transaction in b
	TitleBytes    int // text per inserted row
	Updates       int // case c: updates, of UpdateRows rows of RowBytes, UpdateTxnRows per transaction
	UpdateRows    int
	UpdateTxnRows int
	RowBytes      int
}

// Workload is one case: a table, and the transactions that change it.
type Workload struct {
	Name, Desc string
	Changes    int64
	// Setup creates the table (and, for c, its rows) before any slot.
	Setup func(ctx context.Context, conn *pgx.Conn, table string) error
	// Batches transactions of Batch(k) (k an SQL integer expression) make
	// the workload, run after the slots exist.
	Batches int
	Batch   func(table, k string) string
}

// Case returns workload a (Rows inserts in one transaction), b (Rows
// inserts, TxnRows per transaction) or c (Updates of RowBytes rows).
func Case(name string, p Params) (*Workload, error) {
	switch name {
	case "a":
		return &Workload{Name: "a", Desc: fmt.Sprintf("%d inserts, one transaction", p.Rows), Changes: int64(p.Rows),
			Setup: CreateRows, Batches: 1,
			Batch: func(t, k string) string { return InsertRows(t, k, p.Rows, p.TitleBytes) }}, nil
	case "b":
		return &Workload{Name: "b", Desc: fmt.Sprintf("%d inserts, %d per transaction", p.Rows, p.TxnRows), Changes: int64(p.Rows),
			Setup: CreateRows, Batches: p.Rows / p.TxnRows,
			Batch: func(t, k string) string { return InsertRows(t, k, p.TxnRows, p.TitleBytes) }}, nil
	case "c":
		return &Workload{Name: "c", Desc: fmt.Sprintf("%d updates of %d B rows, %d per transaction", p.Updates, p.RowBytes, p.UpdateTxnRows),
			Changes: int64(p.Updates), Batches: p.Updates / p.UpdateTxnRows,
			Setup: func(ctx context.Context, conn *pgx.Conn, t string) error {
				_, err := conn.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (id bigint PRIMARY KEY, version bigint NOT NULL, body text NOT NULL);
					INSERT INTO %s SELECT g, 0, left(repeat(md5(g::text), %d), %d) FROM generate_series(1, %d) g`,
					t, t, p.RowBytes/32+1, p.RowBytes, p.UpdateRows))
				return err
			},
			Batch: func(t, k string) string {
				lo := fmt.Sprintf("((%s) * %d) %% %d + 1", k, p.UpdateTxnRows, p.UpdateRows)
				return fmt.Sprintf("UPDATE %s SET version = version + 1, body = left(repeat(md5((id + version + 1)::text), %d), %d) WHERE id BETWEEN %s AND %s + %d",
					t, p.RowBytes/32+1, p.RowBytes, lo, lo, p.UpdateTxnRows-1)
			}}, nil
	}
	return nil, fmt.Errorf("unknown case %q (a, b, c)", name)
}

// CreateRows creates the table of cases a and b.
func CreateRows(ctx context.Context, conn *pgx.Conn, t string) error {
	_, err := conn.Exec(ctx, "CREATE TABLE "+t+` (id bigint PRIMARY KEY, workspace_id bigint NOT NULL,
		title text NOT NULL, amount numeric(12,2) NOT NULL, created_at timestamptz NOT NULL)`)
	return err
}

// InsertRows inserts ids k*n+1 .. (k+1)*n: about 100 bytes of text per row
// with a 50-byte title.
func InsertRows(t, k string, n, titleBytes int) string {
	return fmt.Sprintf(`INSERT INTO %s SELECT g, g %% 1000, left(repeat(md5(g::text), %d), %d), (g %% 10000000) / 100.0,
		timestamptz '2026-11-30 12:00:00+00' + g * interval '1 ms' FROM generate_series((%s) * %d + 1, ((%s) + 1) * %d) g`,
		t, titleBytes/32+1, titleBytes, k, n, k, n)
}
