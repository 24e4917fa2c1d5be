// Package benchwork is what the benchmarks of this tree share, once: the
// committed workload of the reader benchmarks (`bench reader` and `bench
// peers` run the same SQL, so that their numbers compare) and the LSNs
// they read; the /proc readings every benchmark takes (a process's CPU
// time and memory, the machine's CPU and load: proc.go); CPU and heap
// profiles (profile.go); scrapes of the pipeline's /metrics (metrics.go);
// and the local stack's fleet and demo addresses, port offset included
// (stack.go).
package benchwork

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/flagenv"
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

// Querier is what QueryLSN reads through: a connection or a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// QueryLSN runs sql, which returns one LSN as text (or NULL: 0).
func QueryLSN(ctx context.Context, q Querier, sql string, args ...any) (envelope.LSN, error) {
	var s *string
	if err := q.QueryRow(ctx, sql, args...).Scan(&s); err != nil {
		return 0, fmt.Errorf("%s: %w", sql, err)
	}
	if s == nil {
		return 0, nil
	}
	return envelope.ParseLSN(*s)
}

// DropSlot returns a cleanup that drops replication slot slot through pg
// (nothing if it is gone). The walsender of a client that just left may
// still hold the slot: it tries for 10 s.
func DropSlot(pg *pgx.Conn, slot string) func(context.Context) error {
	return func(ctx context.Context) error {
		var err error
		for range 50 {
			_, err = pg.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", slot)
			if err == nil {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("drop slot %s: %w", slot, ctx.Err())
			case <-time.After(200 * time.Millisecond):
			}
		}
		return fmt.Errorf("drop slot %s: %w", slot, err)
	}
}

// LastLines is the last n lines of text, joined by " | ": for error
// messages that quote a process's output.
func LastLines(text string, n int) string {
	l := strings.Split(strings.TrimSpace(text), "\n")
	return strings.Join(l[max(0, len(l)-n):], " | ")
}

// AddFlags registers the workloads' sizes on fs into p, the same flags in
// every benchmark that runs them; rows is the default of --rows.
func (p *Params) AddFlags(fs *flagenv.Set, rows int) {
	fs.Int(&p.Rows, "rows", "", rows, "rows inserted by cases a and b")
	fs.Int(&p.TxnRows, "txn-rows", "", 100, "rows per transaction in case b")
	fs.Int(&p.TitleBytes, "title-bytes", "", 50, "length of the text column of the ~100 B rows")
	fs.Int(&p.Updates, "updates", "", 200_000, "updates in case c")
	fs.Int(&p.UpdateRows, "update-rows", "", 10_000, "rows of the case c table (updated round-robin)")
	fs.Int(&p.UpdateTxnRows, "update-txn-rows", "", 100, "updates per transaction in case c")
	fs.Int(&p.RowBytes, "row-bytes", "", 1024, "length of the text column of case c (below the ~2 kB TOAST threshold: sent whole)")
}

// Validate reports every size that cannot make the workloads: a count
// below 1, transactions that do not divide their rows.
func (p Params) Validate() []error {
	if p.Rows < 1 || p.TxnRows < 1 || p.TitleBytes < 1 || p.Updates < 1 || p.UpdateRows < 1 || p.UpdateTxnRows < 1 || p.RowBytes < 1 {
		return []error{errors.New("--rows, --txn-rows, --title-bytes, --updates, --update-rows, --update-txn-rows and --row-bytes must be >= 1")}
	}
	var errs []error
	if p.Rows%p.TxnRows != 0 {
		errs = append(errs, fmt.Errorf("--rows %d must be a multiple of --txn-rows %d", p.Rows, p.TxnRows))
	}
	if p.Updates%p.UpdateTxnRows != 0 || p.UpdateRows%p.UpdateTxnRows != 0 {
		errs = append(errs, fmt.Errorf("--updates %d and --update-rows %d must be multiples of --update-txn-rows %d", p.Updates, p.UpdateRows, p.UpdateTxnRows))
	}
	return errs
}
