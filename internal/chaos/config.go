// Package chaos is the chaos soak: the demo fleet (one reader per shard,
// the loader, the API) on the local stack's real Kafka under mixed
// traffic, with a random fault schedule over every component, then
// convergence, the verifier and one verdict. cmd/chaos runs it; `make
// chaos` (30 minutes) and `.ci/run` (5 minutes) call that.
//
// Faults come on a schedule, one every ~36 s for the default count: inject,
// recover (the supervisor restarts a killed process; deploy/local/stack.sh
// up restarts a killed service, as an operator would), then wait until
// every shard's watermark passes the shard's WAL position taken after
// recovery (the time to fresh). Recoveries and the waits for fresh run
// beside the schedule, so a slow restart does not thin it out; a
// component still recovering gets no second fault (another is drawn). The
// seed of the schedule is printed, so a run can be repeated.
package chaos

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Config is the soak's whole configuration.
type Config struct {
	Repo      string        // the checkout: bin/, deploy/local/
	Home      string        // TRIBUTARY_HOME of a stack that is up with real Kafka
	Duration  time.Duration // how long faults are injected
	Seed      int64         // fault schedule seed; 0: from the clock
	MinFaults int           // the verdict fails below this many faults; 0: one per 36 s of Duration, at least 10
	Rate      int           // loadgen operations/s (single-row transactions)
	BulkRate  int           // bulk transactions/s of BulkRows rows each
	BulkRows  int
	Converge  time.Duration // longest wait for fresh after a fault, and for convergence at the end
	Out       string        // directory for the logs; default $Home/chaos
	// VerifyAPISample is the verifier's --api-sample: ids per table and
	// shard looked up through the API one by one (every id is checked in
	// ClickHouse in bulk either way). The verifier's default, 1,000, took
	// 13 minutes through a loaded API after a one-minute soak.
	VerifyAPISample int
}

// Defaults of the flags.
const (
	DefaultDuration = 30 * time.Minute
	DefaultRate     = 100
	DefaultBulkRate = 1
	DefaultBulkRows = 100
	DefaultConverge = 5 * time.Minute
	// DefaultVerifyAPISample is VerifyAPISample's default.
	DefaultVerifyAPISample = 100
)

// Validate checks the configuration before anything starts.
func (c *Config) Validate() error {
	var errs []error
	if c.Home == "" {
		errs = append(errs, errors.New("--home (TRIBUTARY_HOME) is required"))
	} else if _, err := os.Stat(filepath.Join(c.Home, "stack.env")); err != nil {
		errs = append(errs, fmt.Errorf("no stack under %s (%w): run deploy/local/stack.sh up with TRIBUTARY_KAFKA=real first", c.Home, err))
	}
	for _, b := range []string{"cdc-reader", "loader", "api", "loadgen", "verify"} {
		if _, err := os.Stat(filepath.Join(c.Repo, "bin", b)); err != nil {
			errs = append(errs, fmt.Errorf("missing %s: run make build", filepath.Join(c.Repo, "bin", b)))
		}
	}
	if c.Duration < time.Minute {
		errs = append(errs, fmt.Errorf("--duration %s: at least 1m", c.Duration))
	}
	if c.Rate < 1 || c.BulkRate < 0 || c.BulkRows < 1 {
		errs = append(errs, fmt.Errorf("--rate %d, --bulk-rate %d, --bulk-rows %d: rate and rows at least 1, bulk rate at least 0", c.Rate, c.BulkRate, c.BulkRows))
	}
	if c.VerifyAPISample < 0 {
		errs = append(errs, fmt.Errorf("--verify-api-sample %d: at least 0", c.VerifyAPISample))
	}
	if c.MinFaults < 0 || c.Converge <= 0 {
		errs = append(errs, fmt.Errorf("--min-faults %d must be >= 0 and --converge %s > 0", c.MinFaults, c.Converge))
	}
	return errors.Join(errs...)
}

// minFaults is the fault count the verdict requires.
func (c *Config) minFaults() int {
	if c.MinFaults > 0 {
		return c.MinFaults
	}
	return max(10, int(c.Duration/(36*time.Second)))
}
