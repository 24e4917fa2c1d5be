package api

// Exactness: the answers compared with the generated data before timing.

import (
	"context"
	"fmt"
	"github.com/tributary/tributary/internal/httpjson"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"
)

// checkIDs fetches n random documents (deleted ones and misses included)
// and compares them with their final version.
func (d *dataset) checkIDs(ctx context.Context, client *http.Client, base string, n int) error {
	r := rand.New(rand.NewPCG(uint64(d.c.seed), 99))
	for range n {
		i := r.IntN(d.c.docs)
		var doc struct {
			Copies []struct {
				Shard int            `json:"shard"`
				Row   map[string]any `json:"row"`
			} `json:"copies"`
		}
		id := d.id(tDocs, i, d.c.docs)
		code, err := httpjson.Get(ctx, client, fmt.Sprintf("%s/v1/documents/%d", base, id), &doc)
		if err != nil {
			return err
		}
		if d.docDeleted[i] {
			if code != http.StatusNotFound {
				return fmt.Errorf("inexact: deleted document %d (row %d) answered %d", id, i, code)
			}
		} else {
			u, _ := d.updates(tDocs, i)
			if code != http.StatusOK || len(doc.Copies) != 1 {
				return fmt.Errorf("inexact: document %d (row %d) answered %d with %d copies", id, i, code, len(doc.Copies))
			}
			cp := doc.Copies[0]
			if cp.Shard != d.shard(tDocs, i) || cp.Row["title"] != d.title(i, u) || cp.Row["body"] != d.body(i, u) ||
				cp.Row["id"] != strconv.FormatInt(id, 10) {
				return fmt.Errorf("inexact: document %d (row %d): shard %d title %v, want shard %d title %q",
					id, i, cp.Shard, cp.Row["title"], d.shard(tDocs, i), d.title(i, u))
			}
		}
		code, err = httpjson.Get(ctx, client, fmt.Sprintf("%s/v1/documents/%d", base, d.missID(i, d.c.docs)), nil)
		if err != nil {
			return err
		}
		if code != http.StatusNotFound {
			return fmt.Errorf("inexact: missing id %d answered %d", d.missID(i, d.c.docs), code)
		}
	}
	return nil
}

// revenueAnswer is the part of a revenue answer that is checked.
type revenueAnswer struct {
	Rows   []map[string]any `json:"rows"`
	Source string           `json:"source"`
}

// wantSource checks which path answered a revenue report: with
// --preaggregate every report the check asks for is whole days.
func (d *dataset) wantSource(url string, got revenueAnswer) error {
	want := "live"
	if d.c.preagg {
		want = "preaggregate"
	}
	if got.Source != want {
		return fmt.Errorf("%s answered from %q, want %q", url, got.Source, want)
	}
	return nil
}

// expectRevenue sums the truth over [from, to) into buckets.
func (d *dataset) expectRevenue(from, to time.Time, bucket func(time.Time) string) map[string]revenueCell {
	out := map[string]revenueCell{}
	for day := range d.revenue {
		t := d.dayBase.AddDate(0, 0, day)
		if t.Before(from) || !t.Before(to) {
			continue
		}
		for cu, cell := range d.revenue[day] {
			if cell.invoices == 0 {
				continue
			}
			k := bucket(t) + "/" + currencies[cu]
			c := out[k]
			c.gross += cell.gross
			c.refunds += cell.refunds
			c.invoices += cell.invoices
			out[k] = c
		}
	}
	return out
}

func centsText(v int64) string { return fmt.Sprintf("%d.%02d", v/100, v%100) }

// compareRevenue checks an answer's rows against want, to the cent.
func compareRevenue(what string, got revenueAnswer, timeKey string, want map[string]revenueCell) error {
	seen := map[string]bool{}
	for _, row := range got.Rows {
		k := fmt.Sprint(row[timeKey]) + "/" + fmt.Sprint(row["currency"])
		w, ok := want[k]
		if !ok {
			return fmt.Errorf("inexact: %s: unexpected row %v", what, row)
		}
		seen[k] = true
		if row["gross"] != centsText(w.gross) || row["refunds"] != centsText(w.refunds) || row["net"] != centsText(w.gross-w.refunds) ||
			row["invoices"] != float64(w.invoices) {
			return fmt.Errorf("inexact: %s: row %v, want gross %s refunds %s invoices %d", what, row, centsText(w.gross), centsText(w.refunds), w.invoices)
		}
	}
	if len(seen) != len(want) {
		return fmt.Errorf("inexact: %s: %d rows, want %d", what, len(seen), len(want))
	}
	return nil
}

func dayKey(t time.Time) string { return t.Format(time.DateOnly) }
func monthKey(t time.Time) string {
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC).Format(time.DateOnly)
}

// checkRevenue compares every month by day and the year by month.
func (d *dataset) checkRevenue(ctx context.Context, client *http.Client, base string) error {
	for m := range 12 {
		from := dataStart.AddDate(0, m, 0)
		to := from.AddDate(0, 1, 0)
		var got revenueAnswer
		url := fmt.Sprintf("%s/v1/revenue?from=%s&to=%s&group_by=day", base, from.Format(time.DateOnly), to.Format(time.DateOnly))
		if code, err := httpjson.Get(ctx, client, url, &got); err != nil || code != http.StatusOK {
			return fmt.Errorf("%s: %d %v", url, code, err)
		}
		if err := compareRevenue(url, got, "day", d.expectRevenue(from, to, dayKey)); err != nil {
			return err
		}
		if err := d.wantSource(url, got); err != nil {
			return err
		}
	}
	var got revenueAnswer
	url := fmt.Sprintf("%s/v1/revenue?from=%s&to=%s&group_by=month,currency", base, dataStart.Format(time.DateOnly), dataEnd.Format(time.DateOnly))
	if code, err := httpjson.Get(ctx, client, url, &got); err != nil || code != http.StatusOK {
		return fmt.Errorf("%s: %d %v", url, code, err)
	}
	if err := compareRevenue(url, got, "month", d.expectRevenue(dataStart, dataEnd, monthKey)); err != nil {
		return err
	}
	return d.wantSource(url, got)
}
