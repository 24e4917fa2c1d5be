// Command bench measures Tributary's stages and prints numbers (never a
// pass/fail threshold). Each subcommand is a package of this tree:
//
//	bench loader   Kafka -> ClickHouse through the loader, dedupe on (bench/loader)
//	bench reader   one shard -> Kafka through the reader, next to pg_recvlogical (bench/reader)
//	bench api      documents by id and revenue through the HTTP API, under concurrent load (bench/api)
//	bench latency  commit on a shard -> visible through the API (a running pipeline; bench/latency)
//	bench sustain  the rate the whole pipeline sustains without a growing backlog (a running pipeline; bench/sustain)
//	bench peers    our reader next to Debezium on the same shard and Kafka (bench/peers; run it with bench/peers/run.sh)
//
// What they share (the /proc readings, the committed reader workload,
// profiles, metric scrapes, the fleet's shards) is bench/internal/benchwork.
// Run against the local stack: set -a; . .stack/stack.env; set +a; go run ./bench loader
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/tributary/tributary/bench/api"
	"github.com/tributary/tributary/bench/latency"
	"github.com/tributary/tributary/bench/loader"
	"github.com/tributary/tributary/bench/peers"
	"github.com/tributary/tributary/bench/reader"
	"github.com/tributary/tributary/bench/sustain"
	"github.com/tributary/tributary/internal/flagenv"
)

// subcommands are the benchmarks by name; each parses its own flags.
var subcommands = map[string]func(ctx context.Context, args []string) error{
	"loader":  loader.Run,
	"reader":  reader.Run,
	"api":     api.Run,
	"latency": latency.Run,
	"sustain": sustain.Run,
	"peers":   peers.Run,
}

func main() {
	const usage = "usage: bench loader|reader|api|latency|sustain|peers [flags]   (bench <name> --help for flags)"
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	if os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		fmt.Println(usage)
		return
	}
	run, ok := subcommands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "bench: unknown benchmark %q\n%s\n", os.Args[1], usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[2:])
	// --help was asked for: the flags were printed, and that is success.
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench %s: %v\n", os.Args[1], err)
		if _, ok := errors.AsType[*flagenv.UsageError](err); ok {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
