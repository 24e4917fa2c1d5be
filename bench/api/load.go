package api

// Loading: the tables created through chstore (the loader's DDL), every
// version inserted column-wise, the watermarks written.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/shopspring/decimal"

	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/tables"
)

var docColumns = []envelope.Column{
	{Name: "id", Type: "bigint", OID: 20, Key: true},
	{Name: "workspace_id", Type: "bigint", OID: 20},
	{Name: "title", Type: "text", OID: 25},
	{Name: "body", Type: "text", OID: 25},
	{Name: "created_at", Type: "timestamp with time zone", OID: 1184},
	{Name: "updated_at", Type: "timestamp with time zone", OID: 1184},
}

var invoiceColumns = []envelope.Column{
	{Name: "id", Type: "bigint", OID: 20, Key: true},
	{Name: "workspace_id", Type: "bigint", OID: 20},
	{Name: "amount", Type: "numeric(12,2)", OID: 1700},
	{Name: "currency", Type: "text", OID: 25},
	{Name: "status", Type: "text", OID: 25},
	{Name: "issued_at", Type: "timestamp with time zone", OID: 1184},
	{Name: "paid_at", Type: "timestamp with time zone", OID: 1184},
}

const metaTable = "_bench_api"

// fingerprint names the data: a kept database is reused only for the same.
func (d *dataset) fingerprint() string {
	return fmt.Sprintf("v1 docs=%d invoices=%d shards=%d body=%d seed=%d", d.c.docs, d.c.invoices, d.c.shards, d.c.bodyBytes, d.c.seed)
}

// loadedBefore reports whether the database holds a complete load of the
// same data.
func (d *dataset) loadedBefore(ctx context.Context, store *chstore.Store) (bool, error) {
	conn := store.Conn()
	if err := conn.Exec(ctx, fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s.%s (fingerprint String, loaded_at DateTime) ENGINE = TinyLog",
		chstore.Quote(d.c.db), metaTable)); err != nil {
		return false, err
	}
	var n uint64
	if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT count() FROM %s.%s", chstore.Quote(d.c.db), metaTable)).Scan(&n); err != nil {
		return false, err
	}
	if n == 0 {
		var tabs uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = ? AND name IN ('documents', 'invoices')", d.c.db).Scan(&tabs); err != nil {
			return false, err
		}
		if tabs > 0 {
			return false, fmt.Errorf("database %s has tables but no completed load: drop it or choose another --db", d.c.db)
		}
		return false, nil
	}
	var fp string
	if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT any(fingerprint) FROM %s.%s", chstore.Quote(d.c.db), metaTable)).Scan(&fp); err != nil {
		return false, err
	}
	if fp != d.fingerprint() {
		return false, fmt.Errorf("database %s holds other data (%s), not %s: choose another --db", d.c.db, fp, d.fingerprint())
	}
	return true, nil
}

// load creates the tables through chstore, inserts every version and
// writes the watermarks. It returns the number of rows inserted.
func (d *dataset) load(ctx context.Context, store *chstore.Store, tcfg *tables.Config) (int, error) {
	d.truth()
	docs, err := store.EnsureTable(ctx, "documents", []string{"id"}, docColumns)
	if err != nil {
		return 0, err
	}
	inv, err := store.EnsureTable(ctx, "invoices", []string{"id"}, invoiceColumns)
	if err != nil {
		return 0, err
	}
	total := 0
	var maxVersion uint64
	for _, t := range []struct {
		tab   *chstore.Table
		table byte
		n     int
	}{{docs, tDocs, d.c.docs}, {inv, tInvoices, d.c.invoices}} {
		w := &rowWriter{d: d, conn: store.Conn(), db: d.c.db, tab: t.tab, table: t.table, n: t.n, batch: d.c.batch}
		later, err := w.writeAll(ctx)
		if err != nil {
			return 0, err
		}
		total += w.rows
		maxVersion = max(maxVersion, w.maxVersion)
		fmt.Printf("  %s: %d rows (%d inserts, %d later versions)\n", t.tab.Name, w.rows, t.n, later)
	}
	var ws []chstore.Watermark
	for _, topic := range tcfg.Topics() {
		for p := range 4 {
			for s := range d.c.shards {
				ws = append(ws, chstore.Watermark{Topic: topic, Partition: int32(p), Partitions: 4, Shard: uint16(s),
					CommitLSN: maxVersion + 16, CommitTS: time.Now().UTC()})
			}
		}
	}
	if err := store.WriteWatermarks(ctx, ws); err != nil {
		return 0, err
	}
	b, err := store.Conn().PrepareBatch(ctx, fmt.Sprintf("INSERT INTO %s.%s (fingerprint, loaded_at)", chstore.Quote(d.c.db), metaTable))
	if err != nil {
		return 0, err
	}
	if err := b.Append(d.fingerprint(), time.Now().UTC()); err != nil {
		return 0, err
	}
	return total, b.Send()
}

// writeAll inserts every version of the writer's table in the load's
// order and batches: phase 1 the inserts in id order, phase 2 the later
// versions (updates, tombstones) shuffled. It returns the number of later
// versions.
func (w *rowWriter) writeAll(ctx context.Context) (int, error) {
	d := w.d
	var later []uint64 // i<<3 | k
	for i := range w.n {
		u, del := d.updates(w.table, i)
		for k := 1; k <= u; k++ {
			later = append(later, uint64(i)<<3|uint64(k))
		}
		if del {
			later = append(later, uint64(i)<<3|uint64(u+1))
		}
	}
	r := rand.New(rand.NewPCG(uint64(d.c.seed), uint64(w.table)))
	r.Shuffle(len(later), func(a, b int) { later[a], later[b] = later[b], later[a] })
	for i := range w.n {
		if err := w.add(ctx, i, 0); err != nil {
			return 0, err
		}
	}
	for _, ik := range later {
		if err := w.add(ctx, int(ik>>3), int(ik&7)); err != nil {
			return 0, err
		}
	}
	return len(later), w.flush(ctx)
}

// rowWriter batches versions of one table column-wise.
type rowWriter struct {
	d          *dataset
	conn       driver.Conn
	db         string
	tab        *chstore.Table
	table      byte
	n, batch   int
	rows       int
	maxVersion uint64

	id                 []int64
	ws                 []*int64
	title, body        []*string
	created, updated   []*time.Time
	amount             []*decimal.Decimal
	currency, status   []*string
	issued, paid       []*time.Time
	shard              []uint16
	version, commitLSN []uint64
	deleted            []uint8
	commitTS, loadedAt []time.Time
}

func (w *rowWriter) add(ctx context.Context, i, k int) error {
	d := w.d
	u, _ := d.updates(w.table, i)
	del := k > u
	ver := d.version(w.table, i, k, w.n)
	ts := time.UnixMilli(d.versionTime(w.table, i, k, w.n)).UTC().Truncate(time.Second)
	if w.table == tInvoices {
		var v invoice
		if !del {
			v = d.invoiceAt(i, k, w.n)
		}
		return w.addInvoice(ctx, i, ver, ts, del, v)
	}
	w.meta(d.id(tDocs, i, w.n), d.shard(tDocs, i), ver, ts, del)
	if del { // a tombstone: the key only
		w.ws, w.title, w.body, w.created, w.updated = append(w.ws, nil), append(w.title, nil), append(w.body, nil), append(w.created, nil), append(w.updated, nil)
	} else {
		ws := d.workspace(tDocs, i)
		title, body := d.title(i, k), d.body(i, k)
		created := time.UnixMilli(d.created(i, w.n)).UTC().Truncate(time.Second)
		w.ws, w.title, w.body, w.created, w.updated = append(w.ws, &ws), append(w.title, &title), append(w.body, &body), append(w.created, &created), append(w.updated, &ts)
	}
	return w.maybeFlush(ctx)
}

// addInvoice appends one version of invoice row i (a tombstone if del).
func (w *rowWriter) addInvoice(ctx context.Context, i int, ver uint64, ts time.Time, del bool, v invoice) error {
	d := w.d
	w.meta(d.id(tInvoices, i, w.n), d.shard(tInvoices, i), ver, ts, del)
	if del {
		w.ws, w.amount, w.currency, w.status, w.issued, w.paid = append(w.ws, nil), append(w.amount, nil), append(w.currency, nil), append(w.status, nil), append(w.issued, nil), append(w.paid, nil)
		return w.maybeFlush(ctx)
	}
	ws := d.workspace(tInvoices, i)
	amt := decimal.New(v.cents, -2)
	cur, st := currencies[v.currency], statusText[v.status]
	issued := time.Unix(v.issuedAt, 0).UTC()
	var paid *time.Time
	if v.status == stPaid || v.status == stRefunded {
		p := issued.Add(24 * time.Hour)
		paid = &p
	}
	w.ws, w.amount, w.currency, w.status, w.issued, w.paid = append(w.ws, &ws), append(w.amount, &amt), append(w.currency, &cur), append(w.status, &st), append(w.issued, &issued), append(w.paid, paid)
	return w.maybeFlush(ctx)
}

func (w *rowWriter) meta(id int64, shard int, ver uint64, ts time.Time, del bool) {
	w.maxVersion = max(w.maxVersion, ver)
	w.id = append(w.id, id)
	w.shard = append(w.shard, uint16(shard))
	w.version = append(w.version, ver)
	w.commitLSN = append(w.commitLSN, ver|3)
	w.commitTS = append(w.commitTS, ts)
	w.loadedAt = append(w.loadedAt, time.Now().UTC().Truncate(time.Second))
	var flag uint8
	if del {
		flag = 1
	}
	w.deleted = append(w.deleted, flag)
}

func (w *rowWriter) maybeFlush(ctx context.Context) error {
	if len(w.id) >= w.batch {
		return w.flush(ctx)
	}
	return nil
}

func (w *rowWriter) flush(ctx context.Context) error {
	if len(w.id) == 0 {
		return nil
	}
	cols, err := w.columns()
	if err != nil {
		return err
	}
	b, err := w.conn.PrepareBatch(ctx, fmt.Sprintf("INSERT INTO %s.%s (%s)", chstore.Quote(w.db), chstore.Quote(w.tab.Name),
		strings.Join(quoteAll(w.tab.InsertColumns()), ", ")))
	if err != nil {
		return fmt.Errorf("prepare %s: %w", w.tab.Name, err)
	}
	defer b.Abort() //nolint:errcheck // no-op after Send
	for j, col := range cols {
		if err := b.Column(j).Append(col); err != nil {
			return fmt.Errorf("append %s.%s: %w", w.tab.Name, w.tab.InsertColumns()[j], err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("insert %s: %w", w.tab.Name, err)
	}
	w.rows += len(w.id)
	w.id, w.ws, w.title, w.body, w.created, w.updated = w.id[:0], w.ws[:0], w.title[:0], w.body[:0], w.created[:0], w.updated[:0]
	w.amount, w.currency, w.status, w.issued, w.paid = w.amount[:0], w.currency[:0], w.status[:0], w.issued[:0], w.paid[:0]
	w.shard, w.version, w.commitLSN, w.deleted, w.commitTS, w.loadedAt = w.shard[:0], w.version[:0], w.commitLSN[:0], w.deleted[:0], w.commitTS[:0], w.loadedAt[:0]
	return nil
}

// columns are the batched values of every column the table's insert
// names (the loader's DDL: chstore.Table.InsertColumns), in its order.
func (w *rowWriter) columns() ([]any, error) {
	byName := map[string]any{"id": w.id, "workspace_id": w.ws, "_shard": w.shard, "_version": w.version, "_deleted": w.deleted,
		"_commit_lsn": w.commitLSN, "_commit_ts": w.commitTS, "_loaded_at": w.loadedAt}
	if w.table == tDocs {
		byName["title"], byName["body"], byName["created_at"], byName["updated_at"] = w.title, w.body, w.created, w.updated
	} else {
		byName["amount"], byName["currency"], byName["status"], byName["issued_at"], byName["paid_at"] = w.amount, w.currency, w.status, w.issued, w.paid
	}
	return valuesOf(w.tab, byName)
}

// valuesOf is byName's value of each of t's insert columns, in order: a
// column's values, or a row's value. A timestamp's MicrosColumn comes
// from the timestamp (microsValue); a column byName lacks is an error
// naming it.
func valuesOf(t *chstore.Table, byName map[string]any) ([]any, error) {
	names := t.InsertColumns()
	out := make([]any, 0, len(names))
	for _, name := range names {
		v, ok := byName[name]
		if !ok {
			v, ok = microsValue(byName, name)
		}
		if !ok {
			return nil, fmt.Errorf("%s: no generated values for column %s", t.Name, name)
		}
		out = append(out, v)
	}
	return out, nil
}

// microsValue is the value of column name when it is the MicrosColumn of
// a generated timestamp column in byName (chstore keeps the microseconds
// of every timestamp in a column of its own): a column of them for a
// []*time.Time, one for a *time.Time; nil for a NULL timestamp.
func microsValue(byName map[string]any, name string) (any, bool) {
	col, ok := chstore.MicrosOf(name)
	if !ok {
		return nil, false
	}
	switch ts := byName[col].(type) {
	case []*time.Time:
		out := make([]*uint32, len(ts))
		for i, t := range ts {
			out[i] = micros(t)
		}
		return out, true
	case *time.Time:
		return micros(ts), true
	}
	return nil, false
}

func micros(t *time.Time) *uint32 {
	if t == nil {
		return nil
	}
	us := uint32(t.Nanosecond() / 1000)
	return &us
}

func quoteAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = chstore.Quote(n)
	}
	return out
}
