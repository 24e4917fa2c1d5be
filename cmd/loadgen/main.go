// Command loadgen writes demo traffic to the shards (documents and invoices,
// placed by the ring map) and prints what it did and a few ids to look up.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/tributary/tributary/internal/flagenv"
	"github.com/tributary/tributary/internal/fleet"
	"github.com/tributary/tributary/internal/loadgen"
	"github.com/tributary/tributary/internal/ring"
	"github.com/tributary/tributary/internal/telemetry"
)

const usage = `loadgen — demo traffic on the shards.

The shards are those of the fleet file (--fleet: each shard's number and
the environment variable or file holding its DSN; see docs/configuration.md "Fleet file"),
whatever their numbers; deploy/local/stack.sh writes one and names it in
stack.env. Workspaces are placed by the ring map (--ring-map file, or a
generated map of the fleet's shards with 64 virtual nodes each), which may
only name shards of the fleet.

An operation is one transaction on the shard that owns a random workspace
(a few workspaces are hot). By default it changes one row, as an app would:
a document created (a third of them with a --body-bytes body, TOASTed),
retitled, given a new large body or deleted; an invoice issued, paid or
refunded.

Moves: --move-percent of the operations move a document to a workspace on
another shard with the move saga of docs/design/moves.md (move log document_moves on the
source shard); --half-done-percent of those stop after the copy (live on
both shards, state copied) and --lose-percent skip the copy (on neither
shard, state done). --resume runs the saga's recovery instead of traffic:
it finishes every unfinished move and exits.

Bulk mode: with --rows-per-op N > 1 every operation is one transaction
that changes N rows of documents and invoices on its shard instead:
multi-row inserts (ids from tributary.next_id(), as for single rows;
documents with --bulk-body-bytes bodies) and updates and deletes of rows
written earlier, in the single-row mix — of 100 rows, 25 documents
inserted, 15 retitled, 5 deleted, 30 invoices issued, 20 paid, 5 refunded
(rows an update or delete cannot find yet are inserted instead, so an
operation always changes N rows). Every row is written on the shard that
owns its workspace, invoices only go issued -> paid -> refunded, and no
two transactions in flight touch the same row, so verify still agrees
afterwards. --rate stays operations (transactions) per second: rows
changed per second are --rate x --rows-per-op. Bulk operations make no
moves and no legacy notes (--move-percent defaults to 0 with them).

Example:
  set -a; . .stack/stack.env; set +a; loadgen --rate 200 --duration 20s   # --fleet from $TRIBUTARY_FLEET
  loadgen --rows-per-op 100 --rate 50 --duration 30s   # 5,000 rows/s`

// Config is loadgen's whole configuration.
type Config struct {
	FleetFile string
	// DSNs are the fleet's shards' DSNs by shard number.
	DSNs     map[int]string
	RingFile string
	Resume   bool
	Traffic  loadgen.Config
}

func main() { flagenv.Main("loadgen", parse, run) }

// parse reads the settings; every error it returns is a usage error.
func parse(args []string) (*Config, error) {
	var (
		c                                 Config
		ratePerS, workspaces, bodyBytes   int
		workers, rowsPerOp, bulkBody      int
		movePct, halfPct, losePct, legacy int
		duration                          time.Duration
		resume                            string
	)
	fs := flagenv.New("loadgen", usage)
	fs.Int(&ratePerS, "rate", "TRIBUTARY_LOADGEN_RATE", 200, "operations (transactions) per second over all shards")
	fs.Duration(&duration, "duration", "TRIBUTARY_LOADGEN_DURATION", 20*time.Second, "how long to run (0: until interrupted)")
	fs.Int(&workspaces, "workspaces", "TRIBUTARY_LOADGEN_WORKSPACES", 50, "number of workspaces")
	fs.Int(&bodyBytes, "body-bytes", "TRIBUTARY_LOADGEN_BODY_BYTES", 8192, "size of large document bodies (TOASTed above ~2 kB)")
	fs.Int(&workers, "workers", "TRIBUTARY_LOADGEN_WORKERS", 8, "concurrent writers")
	fs.String(&c.FleetFile, "fleet", "TRIBUTARY_FLEET", "", "fleet file: the shards by number and where each one's DSN comes from (required)")
	fs.String(&c.RingFile, "ring-map", "TRIBUTARY_RING_MAP", "", "ring map JSON file (default: generated for all shards)")
	fs.Int(&movePct, "move-percent", "TRIBUTARY_LOADGEN_MOVE_PERCENT", 2, "percent of operations that move a document to another shard (saga; 0 with --rows-per-op > 1)")
	fs.Int(&halfPct, "half-done-percent", "TRIBUTARY_LOADGEN_HALF_DONE_PERCENT", 10, "percent of moves stopped half-way (copied, source kept)")
	fs.Int(&losePct, "lose-percent", "TRIBUTARY_LOADGEN_LOSE_PERCENT", 0, "percent of moves that skip the copy (document on neither shard)")
	fs.Int(&legacy, "legacy-percent", "TRIBUTARY_LOADGEN_LEGACY_PERCENT", 0, "percent of operations on legacy_notes (per-shard serial ids, colliding across shards)")
	fs.Int(&rowsPerOp, "rows-per-op", "TRIBUTARY_LOADGEN_ROWS_PER_OP", 1, "rows changed by each operation (one transaction); > 1: bulk mode (see above)")
	fs.Int(&bulkBody, "bulk-body-bytes", "TRIBUTARY_LOADGEN_BULK_BODY_BYTES", 200, "bulk mode: body size of an inserted document (TOASTed above ~2 kB)")
	fs.String(&resume, "resume", "TRIBUTARY_LOADGEN_RESUME", "", "\"yes\": finish every unfinished move (the saga's recovery) and exit")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	// Moves are on by default for single-row traffic only: in bulk mode a
	// move share is an error only when it was asked for.
	moveSet := false
	fs.Visit(func(f *flag.Flag) { moveSet = moveSet || f.Name == "move-percent" })
	if v, ok := os.LookupEnv("TRIBUTARY_LOADGEN_MOVE_PERCENT"); ok && v != "" {
		moveSet = true
	}
	if rowsPerOp > 1 && !moveSet {
		movePct = 0
	}
	var errs []error
	if ratePerS < 1 || workers < 1 || workspaces < 1 || rowsPerOp < 1 {
		errs = append(errs, errors.New("--rate, --workers, --workspaces and --rows-per-op must be >= 1"))
	}
	if bodyBytes < 0 || bulkBody < 0 {
		errs = append(errs, errors.New("--body-bytes and --bulk-body-bytes must be >= 0"))
	}
	if duration < 0 {
		errs = append(errs, errors.New("--duration must be >= 0 (0: until interrupted)"))
	}
	if movePct < 0 || legacy < 0 || movePct+legacy > 100 || halfPct < 0 || losePct < 0 || halfPct+losePct > 100 {
		errs = append(errs, errors.New("--move-percent and --legacy-percent must be >= 0 with a sum <= 100, --half-done-percent and --lose-percent >= 0 with a sum <= 100"))
	}
	if rowsPerOp > 1 && (movePct > 0 || legacy > 0) {
		errs = append(errs, fmt.Errorf("--rows-per-op %d (bulk mode) makes no moves and no legacy notes: --move-percent and --legacy-percent must be 0", rowsPerOp))
	}
	if resume != "" && resume != "yes" {
		errs = append(errs, fmt.Errorf("--resume %q: use --resume yes", resume))
	}
	if c.FleetFile == "" {
		errs = append(errs, errors.New("--fleet (or $TRIBUTARY_FLEET) is required: the fleet file listing the shards (the local stack's is $TRIBUTARY_HOME/fleet.json)"))
	} else if f, err := fleet.Load(c.FleetFile); err != nil {
		errs = append(errs, err)
	} else if eps, err := f.Resolve(os.Getenv); err != nil {
		errs = append(errs, err)
	} else {
		c.DSNs = map[int]string{}
		for _, e := range eps {
			c.DSNs[e.Number] = e.DSN
		}
	}
	c.Resume = resume == "yes"
	c.Traffic = loadgen.Config{Rate: float64(ratePerS), Duration: duration, Workspaces: workspaces,
		BodyBytes: bodyBytes, Workers: workers, MoveShare: float64(movePct) / 100,
		HalfDoneShare: float64(halfPct) / 100, LoseShare: float64(losePct) / 100, LegacyShare: float64(legacy) / 100,
		RowsPerOp: rowsPerOp, BulkBodyBytes: bulkBody}
	if len(errs) == 0 {
		if err := c.Traffic.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, &flagenv.UsageError{Err: errors.Join(errs...)}
	}
	return &c, nil
}

func run(ctx context.Context, c *Config) error {
	log, _ := telemetry.Logger("text", "info")
	var m *ring.Map
	var err error
	if c.RingFile != "" {
		m, err = ring.Load(c.RingFile)
	} else {
		m, err = loadgen.DefaultRing(slices.Sorted(maps.Keys(c.DSNs)))
	}
	if err != nil {
		return err
	}
	cfg := c.Traffic
	cfg.DSNs, cfg.Ring = c.DSNs, m
	g, err := loadgen.New(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer g.Close()
	if c.Resume {
		n, err := g.Resume(ctx)
		fmt.Printf("loadgen: resumed and finished %d unfinished moves\n", n)
		return err
	}
	start := time.Now()
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				s := time.Since(start).Seconds()
				log.Info("progress", slog.Int64("ops", g.Stats.Ops.Load()), slog.Int64("errors", g.Stats.Errors.Load()),
					slog.Float64("ops_per_s", float64(g.Stats.Ops.Load())/s), slog.Float64("rows_per_s", float64(g.Stats.Rows.Load())/s))
			}
		}
	}()
	err = g.Run(ctx)
	close(done)
	s := &g.Stats
	took := time.Since(start)
	fmt.Printf("loadgen: %d ops in %s (%d errors), %d rows changed (%.0f/s): documents +%d ~%d -%d, invoices issued %d paid %d refunded %d, moves done %d half-done %d lost %d, legacy notes %d\n",
		s.Ops.Load(), took.Round(time.Millisecond), s.Errors.Load(), s.Rows.Load(), float64(s.Rows.Load())/took.Seconds(),
		s.DocsCreated.Load(), s.DocsEdited.Load(), s.DocsDel.Load(), s.InvIssued.Load(), s.InvPaid.Load(), s.InvRefunded.Load(),
		s.MovesDone.Load(), s.MovesHalfDone.Load(), s.MovesLost.Load(), s.LegacyNotes.Load())
	samples := g.Samples()
	for i := len(samples) - 1; i >= 0 && i >= len(samples)-3; i-- {
		w := samples[i]
		fmt.Printf("sample: %s id %d on shard %d, WAL after commit %s\n", w.Table, w.ID, w.Shard, w.LSN)
	}
	return err
}
