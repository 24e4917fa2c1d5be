// Command chaos runs the chaos soak (internal/chaos) against a local stack
// that is up with real Kafka, and exits 1 on a failed verdict.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/tributary/tributary/internal/chaos"
	"github.com/tributary/tributary/internal/flagenv"
)

const usage = `chaos — the chaos soak: the demo fleet under traffic and faults, then a verdict.

Starts one cdc-reader per shard of the stack's fleet, the loader, the API
and loadgen traffic (single-row operations with saga moves, some left
half-done, and bulk transactions), then for --duration injects one fault
at a time, drawn at random from a seeded schedule: kill -9 of a reader, the
loader, the API, Kafka or ClickHouse; an immediate-mode crash of a
PostgreSQL shard; SIGSTOP/SIGCONT hangs of Kafka or ClickHouse. The fleet's
processes are restarted by the soak's supervisor, the stack's services by
deploy/local/stack.sh up. After each fault it waits until every shard is
fresh again. Then the traffic stops, the fleet converges, cmd/verify runs,
and one verdict is printed; exit 1 when it fails.

Needs: deploy/local/stack.sh up with TRIBUTARY_KAFKA=real (or both) and
make build; the demo itself must not run on the same stack.
Example: make chaos CHAOS_DURATION=5m`

func main() {
	flagenv.Main("chaos", parse, run)
}

func parse(args []string) (chaos.Config, error) {
	var c chaos.Config
	var seed int
	fs := flagenv.New("chaos", usage)
	fs.String(&c.Home, "home", "TRIBUTARY_HOME", "", "the stack's home (its stack.env)")
	fs.String(&c.Repo, "repo", "TRIBUTARY_REPO", ".", "the checkout: bin/ and deploy/local/")
	fs.Duration(&c.Duration, "duration", "TRIBUTARY_CHAOS_DURATION", chaos.DefaultDuration, "how long faults are injected")
	fs.Int(&seed, "seed", "TRIBUTARY_CHAOS_SEED", 0, "fault schedule seed (0: from the clock; printed either way)")
	fs.Int(&c.MinFaults, "min-faults", "TRIBUTARY_CHAOS_MIN_FAULTS", 0, "fewest faults for a pass (0: one per 36 s of --duration, at least 10)")
	fs.Int(&c.Rate, "rate", "TRIBUTARY_CHAOS_RATE", chaos.DefaultRate, "loadgen operations/s over all shards")
	fs.Int(&c.BulkRate, "bulk-rate", "TRIBUTARY_CHAOS_BULK_RATE", chaos.DefaultBulkRate, "bulk transactions/s (0: none)")
	fs.Int(&c.BulkRows, "bulk-rows", "TRIBUTARY_CHAOS_BULK_ROWS", chaos.DefaultBulkRows, "rows per bulk transaction")
	fs.Duration(&c.Converge, "converge", "TRIBUTARY_CHAOS_CONVERGE", chaos.DefaultConverge, "longest wait to be fresh after a fault and at the end")
	fs.Int(&c.VerifyAPISample, "verify-api-sample", "TRIBUTARY_CHAOS_VERIFY_API_SAMPLE", chaos.DefaultVerifyAPISample, "ids per table and shard the verifier looks up through the API one by one (its --api-sample, 0: every id; all of them are checked in ClickHouse either way)")
	fs.String(&c.Out, "out", "TRIBUTARY_CHAOS_OUT", "", "log directory (default <home>/chaos)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.Seed = int64(seed)
	var err error
	if c.Repo, err = filepath.Abs(c.Repo); err != nil {
		return c, err
	}
	return c, c.Validate()
}

func run(ctx context.Context, c chaos.Config) error {
	v, err := chaos.Run(ctx, c, os.Stdout)
	if err != nil {
		return err
	}
	return report(os.Stdout, v)
}

// report prints the verdict and returns an error when it failed, which
// flagenv.Main turns into exit status 1 (what make chaos and CI see).
func report(w io.Writer, v *chaos.Verdict) error {
	v.Print(w)
	if !v.Passed() {
		return fmt.Errorf("failed verdict (seed %d)", v.Seed)
	}
	return nil
}
