// Command loadgen writes demo traffic to the shards (documents and invoices,
// placed by the ring map) and prints what it did and a few ids to look up.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/tributary/tributary/internal/flagenv"
	"github.com/tributary/tributary/internal/loadgen"
	"github.com/tributary/tributary/internal/ring"
	"github.com/tributary/tributary/internal/telemetry"
)

const usage = `loadgen — demo traffic on the shards.

Shard DSNs come from the environment, as deploy/local/stack.sh writes them:
TRIBUTARY_SHARDS=N and TRIBUTARY_SHARD_<i>_DSN for i in 0..N-1. Workspaces
are placed by the ring map (--ring file, or a generated map of N shards with
64 virtual nodes each).

Moves: --move-percent of the operations move a document to a workspace on
another shard with the saga of seed 000 (move log document_moves on the
source shard); --half-done-percent of those stop after the copy (live on
both shards, state copied) and --lose-percent skip the copy (on neither
shard, state done). --resume runs the saga's recovery instead of traffic:
it finishes every unfinished move and exits.

Example:
  set -a; . .stack/stack.env; set +a; loadgen --rate 200 --duration 20s`

func main() {
	var (
		ratePerS   int
		duration   time.Duration
		workspaces int
		bodyBytes  int
		workers    int
		ringFile   string
		movePct    int
		halfPct    int
		losePct    int
		legacyPct  int
		resume     string
	)
	fs := flagenv.New("loadgen", usage)
	fs.Int(&ratePerS, "rate", "TRIBUTARY_LOADGEN_RATE", 200, "operations per second over all shards")
	fs.Duration(&duration, "duration", "TRIBUTARY_LOADGEN_DURATION", 20*time.Second, "how long to run (0: until interrupted)")
	fs.Int(&workspaces, "workspaces", "TRIBUTARY_LOADGEN_WORKSPACES", 50, "number of workspaces")
	fs.Int(&bodyBytes, "body-bytes", "TRIBUTARY_LOADGEN_BODY_BYTES", 8192, "size of large document bodies (TOASTed above ~2 kB)")
	fs.Int(&workers, "workers", "TRIBUTARY_LOADGEN_WORKERS", 8, "concurrent writers")
	fs.String(&ringFile, "ring", "TRIBUTARY_RING", "", "ring map JSON file (default: generated for all shards)")
	fs.Int(&movePct, "move-percent", "TRIBUTARY_LOADGEN_MOVE_PERCENT", 2, "percent of operations that move a document to another shard (saga)")
	fs.Int(&halfPct, "half-done-percent", "TRIBUTARY_LOADGEN_HALF_DONE_PERCENT", 10, "percent of moves stopped half-way (copied, source kept)")
	fs.Int(&losePct, "lose-percent", "TRIBUTARY_LOADGEN_LOSE_PERCENT", 0, "percent of moves that skip the copy (document on neither shard)")
	fs.Int(&legacyPct, "legacy-percent", "TRIBUTARY_LOADGEN_LEGACY_PERCENT", 0, "percent of operations on legacy_notes (per-shard serial ids, colliding across shards)")
	fs.String(&resume, "resume", "TRIBUTARY_LOADGEN_RESUME", "", "\"yes\": finish every unfinished move (the saga's recovery) and exit")
	err := fs.Parse(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	var dsns []string
	if err == nil {
		n, aerr := strconv.Atoi(os.Getenv("TRIBUTARY_SHARDS"))
		if aerr != nil || n < 1 {
			err = errors.New("$TRIBUTARY_SHARDS must be the number of shards (source .stack/stack.env)")
		}
		for i := 0; err == nil && i < n; i++ {
			d := os.Getenv(fmt.Sprintf("TRIBUTARY_SHARD_%d_DSN", i))
			if d == "" {
				err = fmt.Errorf("$TRIBUTARY_SHARD_%d_DSN is not set", i)
			}
			dsns = append(dsns, d)
		}
	}
	if err == nil && (ratePerS < 1 || workers < 1 || workspaces < 1 || bodyBytes < 0) {
		err = errors.New("--rate, --workers and --workspaces must be >= 1")
	}
	if err == nil && (movePct < 0 || legacyPct < 0 || movePct+legacyPct > 100 || halfPct < 0 || losePct < 0 || halfPct+losePct > 100) {
		err = errors.New("--move-percent and --legacy-percent must be >= 0 with a sum <= 100, --half-done-percent and --lose-percent >= 0 with a sum <= 100")
	}
	if err == nil && resume != "" && resume != "yes" {
		err = fmt.Errorf("--resume %q: use --resume yes", resume)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "loadgen: %v\n(run with --help for all settings)\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, dsns, ringFile, loadgen.Config{Rate: float64(ratePerS), Duration: duration,
		Workspaces: workspaces, BodyBytes: bodyBytes, Workers: workers, MoveShare: float64(movePct) / 100,
		HalfDoneShare: float64(halfPct) / 100, LoseShare: float64(losePct) / 100, LegacyShare: float64(legacyPct) / 100}, resume == "yes"); err != nil {
		fmt.Fprintf(os.Stderr, "loadgen: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dsns []string, ringFile string, cfg loadgen.Config, resume bool) error {
	log, _ := telemetry.Logger("text", "info")
	var m *ring.Map
	var err error
	if ringFile != "" {
		m, err = ring.Load(ringFile)
	} else {
		shards := make([]ring.Shard, len(dsns))
		for i := range shards {
			shards[i] = ring.Shard{ID: i}
		}
		m, err = ring.New(1, shards, 64)
	}
	if err != nil {
		return err
	}
	cfg.DSNs, cfg.Ring = dsns, m
	g, err := loadgen.New(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer g.Close()
	if resume {
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
				log.Info("progress", slog.Int64("ops", g.Stats.Ops.Load()), slog.Int64("errors", g.Stats.Errors.Load()),
					slog.Float64("ops_per_s", float64(g.Stats.Ops.Load())/time.Since(start).Seconds()))
			}
		}
	}()
	err = g.Run(ctx)
	close(done)
	s := &g.Stats
	fmt.Printf("loadgen: %d ops in %s (%d errors): documents +%d ~%d -%d, invoices issued %d paid %d refunded %d, moves done %d half-done %d lost %d, legacy notes %d\n",
		s.Ops.Load(), time.Since(start).Round(time.Millisecond), s.Errors.Load(), s.DocsCreated.Load(), s.DocsEdited.Load(),
		s.DocsDel.Load(), s.InvIssued.Load(), s.InvPaid.Load(), s.InvRefunded.Load(),
		s.MovesDone.Load(), s.MovesHalfDone.Load(), s.MovesLost.Load(), s.LegacyNotes.Load())
	samples := g.Samples()
	for i := len(samples) - 1; i >= 0 && i >= len(samples)-3; i-- {
		w := samples[i]
		fmt.Printf("sample: %s id %d on shard %d, WAL after commit %s\n", w.Table, w.ID, w.Shard, w.LSN)
	}
	return err
}
