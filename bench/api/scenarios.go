package api

// The timed scenarios: requests from concurrent clients, open or closed
// loop, and their latencies.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/tributary/tributary/bench/internal/benchwork"
	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/httpjson"
)

// request returns a scenario's next URL for a client's random source and
// the status it must answer.
func (d *dataset) request(name, base string) func(r *rand.Rand) (string, int) {
	switch name {
	case "by-id":
		return func(r *rand.Rand) (string, int) {
			i := d.docLive[r.IntN(len(d.docLive))]
			return fmt.Sprintf("%s/v1/documents/%d", base, d.id(tDocs, i, d.c.docs)), http.StatusOK
		}
	case "by-id-miss":
		return func(r *rand.Rand) (string, int) {
			return fmt.Sprintf("%s/v1/documents/%d", base, d.missID(r.IntN(d.c.docs), d.c.docs)), http.StatusNotFound
		}
	case "revenue-month":
		return func(r *rand.Rand) (string, int) {
			from := dataStart.AddDate(0, r.IntN(12), 0)
			return fmt.Sprintf("%s/v1/revenue?from=%s&to=%s&group_by=day", base, from.Format(time.DateOnly),
				from.AddDate(0, 1, 0).Format(time.DateOnly)), http.StatusOK
		}
	case "revenue-year":
		return func(*rand.Rand) (string, int) {
			return fmt.Sprintf("%s/v1/revenue?from=%s&to=%s&group_by=month,currency", base, dataStart.Format(time.DateOnly),
				dataEnd.Format(time.DateOnly)), http.StatusOK
		}
	}
	return nil
}

// scenarioResult is one scenario's numbers.
type scenarioResult struct {
	Name     string  `json:"name"`
	Via      string  `json:"via"`
	Clients  int     `json:"clients"`
	Requests int     `json:"requests"`
	Errors   int     `json:"errors"`
	RPS      float64 `json:"requests_per_second"`
	P50      float64 `json:"p50_ms"`
	P90      float64 `json:"p90_ms"`
	P99      float64 `json:"p99_ms"`
	Max      float64 `json:"max_ms"`
	Load1    float64 `json:"load1_after"`
	FirstErr string  `json:"first_error,omitempty"`
}

// runLoad runs fn from clients goroutines for warmup+duration and returns
// the latencies of the measured part.
func runLoad(ctx context.Context, clients int, rate float64, warmup, duration time.Duration, seed uint64,
	fn func(ctx context.Context, r *rand.Rand) error) (lat []time.Duration, errs int, firstErr error, wall time.Duration) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	measureFrom, end := start.Add(warmup), start.Add(warmup+duration)
	// With a rate, request i is due at start + i/rate whoever is free to
	// send it (open loop, as wrk2): a request that waits for a free client
	// counts its wait, so a slow answer cannot hide the ones it delayed
	// (coordinated omission). Without one, each client sends its next
	// request when it has its answer (closed loop).
	var slot atomic.Int64
	due := func() time.Time {
		if rate <= 0 {
			return time.Now()
		}
		at := start.Add(time.Duration(float64(slot.Add(1)-1) / rate * float64(time.Second)))
		time.Sleep(time.Until(at))
		return at
	}
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(c)))
			var mine []time.Duration
			var mineErrs int
			var mineFirst error
			for {
				t0 := due()
				if !t0.Before(end) || ctx.Err() != nil {
					break
				}
				err := fn(ctx, r)
				t1 := time.Now()
				if t0.Before(measureFrom) {
					continue
				}
				if err != nil {
					mineErrs++
					if mineFirst == nil {
						mineFirst = err
					}
					continue
				}
				mine = append(mine, t1.Sub(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			errs += mineErrs
			if firstErr == nil {
				firstErr = mineFirst
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return lat, errs, firstErr, time.Since(measureFrom)
}

func summarize(name, via string, clients int, lat []time.Duration, errs int, firstErr error, wall time.Duration) scenarioResult {
	slices.Sort(lat)
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		i := int(p * float64(len(lat)))
		i = min(i, len(lat)-1)
		return float64(lat[i].Microseconds()) / 1000
	}
	r := scenarioResult{Name: name, Via: via, Clients: clients, Requests: len(lat), Errors: errs, RPS: float64(len(lat)) / wall.Seconds(),
		P50: pct(0.50), P90: pct(0.90), P99: pct(0.99), Load1: benchwork.LoadAvg1()}
	if len(lat) > 0 {
		r.Max = float64(lat[len(lat)-1].Microseconds()) / 1000
	}
	if firstErr != nil {
		r.FirstErr = firstErr.Error()
	}
	return r
}

func runScenario(ctx context.Context, c config, name string, next func(*rand.Rand) (string, int), client *http.Client) (scenarioResult, error) {
	paced := ""
	if c.rate > 0 {
		paced = fmt.Sprintf(" at %.0f req/s (open loop)", c.rate)
	}
	fmt.Printf("scenario %s: %d clients%s, %s (+%s warm-up), load average before %.2f\n", name, c.clients, paced, c.duration, c.warmup, benchwork.LoadAvg1())
	lat, errs, first, wall := runLoad(ctx, c.clients, c.rate, c.warmup, c.duration, uint64(c.seed), func(ctx context.Context, r *rand.Rand) error {
		url, want := next(r)
		code, err := httpjson.Get(ctx, client, url, nil)
		if err != nil {
			return err
		}
		if code != want {
			return fmt.Errorf("%s answered %d, want %d", url, code, want)
		}
		return nil
	})
	if ctx.Err() != nil {
		return scenarioResult{}, ctx.Err()
	}
	r := summarize(name, "http", c.clients, lat, errs, first, wall)
	r.print()
	return r, nil
}

// runSelect1 is the floor the HTTP scenarios stand beside, measured in the
// same run: SELECT 1 over a connection pool like the API's (query.Open's)
// to the server it reads from, as closed (or open) a loop as theirs.
func runSelect1(ctx context.Context, c config) (scenarioResult, error) {
	conn, err := chstore.Dial(ctx, chstore.DialOptions{Addr: c.chAddr, MaxOpenConns: 32, ReadOnly: true})
	if err != nil {
		return scenarioResult{}, err
	}
	defer conn.Close()
	fmt.Printf("scenario select-1: %d clients, %s (+%s warm-up), load average before %.2f\n", c.clients, c.duration, c.warmup, benchwork.LoadAvg1())
	lat, errs, first, wall := runLoad(ctx, c.clients, c.rate, c.warmup, c.duration, uint64(c.seed), func(ctx context.Context, _ *rand.Rand) error {
		var one uint8
		return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
	})
	if ctx.Err() != nil {
		return scenarioResult{}, ctx.Err()
	}
	r := summarize("select-1", "clickhouse", c.clients, lat, errs, first, wall)
	r.print()
	return r, nil
}

// print writes the result as one line as soon as it is known (a shared
// ClickHouse may be restarted by someone's test before the table is printed).
func (r scenarioResult) print() {
	fmt.Printf("  -> %s via %s, %d clients: %d requests, %d errors, %.1f req/s, p50 %.2f p90 %.2f p99 %.2f max %.2f ms, load1 %.2f\n",
		r.Name, r.Via, r.Clients, r.Requests, r.Errors, r.RPS, r.P50, r.P90, r.P99, r.Max, r.Load1)
}

func printResults(rs []scenarioResult) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tvia\tclients\trequests\terrors\treq/s\tp50 ms\tp90 ms\tp99 ms\tmax ms\tload1\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.1f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", r.Name, r.Via, r.Clients, r.Requests, r.Errors, r.RPS, r.P50, r.P90, r.P99, r.Max, r.Load1)
	}
	tw.Flush()
	for _, r := range rs {
		if r.FirstErr != "" {
			fmt.Printf("%s: first error: %s\n", r.Name, r.FirstErr)
		}
	}
}
