// Command bench measures Tributary's stages and prints numbers (never a
// pass/fail threshold). Subcommands:
//
//	bench loader   Kafka -> ClickHouse through the loader, dedupe on
//	bench reader   one shard -> Kafka through the reader, next to pg_recvlogical
//	bench api      documents by id and revenue through the HTTP API, under concurrent load
//	bench latency  commit on a shard -> visible through the API (a running pipeline)
//	bench sustain  the rate the whole pipeline sustains without a growing backlog (a running pipeline)
//
// Run against the local stack: set -a; . .stack/stack.env; set +a; go run ./cmd/bench loader
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/tributary/tributary/internal/flagenv"
)

func main() {
	const usage = "usage: bench loader|reader|api|latency|sustain [flags]   (bench <name> --help for flags)"
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	if os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		fmt.Println(usage)
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "loader":
		err = benchLoader(ctx, os.Args[2:])
	case "reader":
		err = benchReader(ctx, os.Args[2:])
	case "api":
		err = benchAPI(ctx, os.Args[2:])
	case "latency":
		err = benchLatency(ctx, os.Args[2:])
	case "sustain":
		err = benchSustain(ctx, os.Args[2:])
	default:
		err = fmt.Errorf("unknown benchmark %q", os.Args[1])
	}
	// --help was asked for: the flags were printed, and that is success.
	if errors.Is(err, errUsage) || errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		if _, ok := errors.AsType[*flagenv.UsageError](err); ok {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// errUsage is what a benchmark returns when --help printed its flags.
var errUsage = errors.New("usage")
