package api

// The generated data: every value a pure function of (--seed, table,
// row, version), and the final state of every row (the ground truth).

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/tributary/tributary/internal/ids"
	"github.com/tributary/tributary/internal/tables"
)

// The year of data: [dataStart, dataEnd).
var (
	dataStart = time.Date(2025, 12, 1, 0, 0, 0, 0, time.UTC)
	dataEnd   = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
)

var currencies = []string{"USD", "EUR", "GBP", "JPY", "CHF"}

// Invoice statuses.
const (
	stIssued uint8 = iota
	stPaid
	stRefunded
	stVoid
)

var statusText = []string{"issued", "paid", "refunded", "void"}

// dataset generates the benchmark's rows and knows their final state.
type dataset struct {
	c      config
	layout ids.Snowflake
	corpus string // bodies are slices of it
	// Ground truth, filled by load or truth.
	docDeleted []bool
	docLive    []int // live document rows
	// revenue[day][currency], day counted from dayBase, in cents.
	revenue [][]revenueCell
	dayBase time.Time
	// tcfg is set by Run.
	tcfg *tables.Config
}

type revenueCell struct{ gross, refunds, invoices int64 }

func newAPIData(c config) (*dataset, error) {
	l, err := ids.Preset("seed000")
	if err != nil {
		return nil, err
	}
	d := &dataset{c: c, layout: l, dayBase: dataStart.AddDate(0, 0, -150)}
	words := strings.Fields("the a invoice report quarterly draft final review notes meeting plan budget design spec " +
		"customer order shipping roadmap security audit release summary team product launch metrics data " +
		"analysis proposal contract update changes approved pending archive index table migration shard")
	r := rand.New(rand.NewPCG(uint64(c.seed), 7))
	var b strings.Builder
	for b.Len() < 1<<20 {
		b.WriteString(words[r.IntN(len(words))])
		b.WriteByte(' ')
	}
	d.corpus = b.String()
	return d, nil
}

// h is a keyed hash of (seed, table, row, version, field): every random
// choice about a row, so that any of them can be recomputed alone.
func (d *dataset) h(table byte, i, k int, field byte) uint64 {
	x := uint64(d.c.seed)*0x9E3779B97F4A7C15 ^ uint64(table)<<56 ^ uint64(field)<<48 ^ uint64(k)<<40 ^ uint64(i)
	x ^= x >> 30
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 27
	x *= 0x94D049BB133111EB
	x ^= x >> 31
	return x
}

const (
	tDocs     = 'd'
	tInvoices = 'i'
)

// created is row i's creation time in ms: spread evenly over the year.
func (d *dataset) created(i, n int) int64 {
	span := dataEnd.UnixMilli() - dataStart.UnixMilli()
	return dataStart.UnixMilli() + int64(i)*span/int64(n)
}

func (d *dataset) shard(table byte, i int) int {
	return int(d.h(table, i, 0, 's') % uint64(d.c.shards))
}

func (d *dataset) id(table byte, i, n int) int64 {
	id, err := d.layout.Encode(ids.Parts{UnixMilli: d.created(i, n), Node: int64(d.shard(table, i)), Seq: int64(i & 1023)})
	if err != nil {
		panic(err) // validate() keeps every input in range
	}
	return id
}

// missID is a well-formed id next to row i's that no row has (sequence
// numbers are i mod 1024, one row per millisecond).
func (d *dataset) missID(i, n int) int64 {
	id := d.id(tDocs, i, n)
	if i&1023 == 1023 {
		return id - 1
	}
	return id + 1
}

// workspace: ws mod shards is the shard, as a placement map would give.
func (d *dataset) workspace(table byte, i int) int64 {
	return int64(d.shard(table, i)) + int64(d.c.shards)*int64(1+d.h(table, i, 0, 'w')%1000)
}

// updates is how many updates row i gets; deleted whether a delete follows.
// Of the rows of table, those whose draw u is at least above[0] get 3
// updates, above[1] 2, above[2] 1; deletedPct percent are deleted.
func (d *dataset) updates(table byte, i int) (int, bool) {
	u := d.h(table, i, 0, 'u') % 100
	del := d.h(table, i, 0, 'x') % 100
	above, deletedPct := [3]uint64{95, 85, 60}, uint64(2)
	if table == tDocs {
		above, deletedPct = [3]uint64{97, 90, 70}, 3
	}
	for k, t := range above {
		if u >= t {
			return 3 - k, del < deletedPct
		}
	}
	return 0, del < deletedPct
}

// versionTime is when version k of row i was written (ms): updates follow
// hours apart. The delete is version updates+1.
func (d *dataset) versionTime(table byte, i, k, n int) int64 {
	return d.created(i, n) + int64(k)*3_600_000 + int64(d.h(table, i, k, 't')%3_600_000)*int64(min(k, 1))
}

// version is the row version (an LSN stand-in): increasing with the
// change's time, distinct for distinct changes.
func (d *dataset) version(table byte, i, k, n int) uint64 {
	return uint64(d.versionTime(table, i, k, n)-dataStart.UnixMilli()+1)<<12 | uint64(i&1023)<<2 | uint64(k&3)
}

func (d *dataset) title(i, k int) string {
	return fmt.Sprintf("Document %d rev %d", i, k)
}

func (d *dataset) body(i, k int) string {
	l := d.c.bodyBytes/2 + int(d.h(tDocs, i, k, 'l')%uint64(d.c.bodyBytes+1))
	off := int(d.h(tDocs, i, k, 'o') % uint64(len(d.corpus)-l))
	return d.corpus[off : off+l]
}

// invoice is one version of an invoice.
type invoice struct {
	cents    int64
	currency int
	status   uint8
	issuedAt int64 // unix seconds
}

// invoiceAt returns version k of invoice i (k <= updates).
func (d *dataset) invoiceAt(i, k, n int) invoice {
	cu := d.h(tInvoices, i, 0, 'c') % 100
	v := invoice{cents: 100 + int64(d.h(tInvoices, i, 0, 'a')%999_900), issuedAt: d.created(i, n) / 1000}
	switch {
	case cu < 50:
		v.currency = 0
	case cu < 75:
		v.currency = 1
	case cu < 85:
		v.currency = 2
	case cu < 93:
		v.currency = 3
	default:
		v.currency = 4
	}
	if d.h(tInvoices, i, 0, 'p')%100 < 30 {
		v.status = stIssued
	} else {
		v.status = stPaid
	}
	for j := 1; j <= k; j++ {
		r := d.h(tInvoices, i, j, 'r') % 100
		switch v.status {
		case stIssued:
			if r < 80 {
				v.status = stPaid
			} else {
				v.status = stVoid
			}
		case stPaid:
			if r < 60 {
				v.status = stRefunded
			}
		}
		if d.h(tInvoices, i, j, 'a')%10 == 0 {
			v.cents = 100 + int64(d.h(tInvoices, i, j, 'b')%999_900) // a corrected amount
		}
		if m := d.h(tInvoices, i, j, 'm') % 100; m < 2 {
			days := int64(1 + d.h(tInvoices, i, j, 'n')%40)
			if m == 0 {
				days = -days
			}
			v.issuedAt += days * 86400 // a corrected issue date
		}
	}
	return v
}

// truth computes the final state of every row.
func (d *dataset) truth() {
	d.docDeleted = make([]bool, d.c.docs)
	d.docLive = d.docLive[:0]
	for i := range d.c.docs {
		_, del := d.updates(tDocs, i)
		d.docDeleted[i] = del
		if !del {
			d.docLive = append(d.docLive, i)
		}
	}
	days := int(dataEnd.Sub(d.dayBase).Hours()/24) + 151 // issued_at moves by at most 3·40 days
	d.revenue = make([][]revenueCell, days)
	for j := range d.revenue {
		d.revenue[j] = make([]revenueCell, len(currencies))
	}
	for i := range d.c.invoices {
		u, del := d.updates(tInvoices, i)
		if del {
			continue
		}
		v := d.invoiceAt(i, u, d.c.invoices)
		if v.status != stPaid && v.status != stRefunded {
			continue
		}
		day := int((v.issuedAt - d.dayBase.Unix()) / 86400)
		cell := &d.revenue[day][v.currency]
		cell.gross += v.cents
		cell.invoices++
		if v.status == stRefunded {
			cell.refunds += v.cents
		}
	}
}
