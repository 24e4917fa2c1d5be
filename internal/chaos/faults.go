package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Fault kinds. Every kind is drawn with the same weight.
const (
	KillReader     = "kill-reader"
	KillLoader     = "kill-loader"
	KillAPI        = "kill-api"
	KillKafka      = "kill-kafka"
	KillClickHouse = "kill-clickhouse"
	CrashPostgres  = "crash-postgres" // pg_ctl stop -m immediate: no shutdown checkpoint
	HangKafka      = "hang-kafka"     // SIGSTOP, a few seconds, SIGCONT
	HangClickHouse = "hang-clickhouse"
)

// Kinds lists every fault kind, in the verdict's order.
var Kinds = []string{KillReader, KillLoader, KillAPI, KillKafka, KillClickHouse, CrashPostgres, HangKafka, HangClickHouse}

// fault is one injected fault: what, on which target, when, and what
// recovering from it took.
type fault struct {
	kind, target string
	hold         time.Duration // a hang's length (SIGSTOP to SIGCONT)
	at           time.Time     // injected
	recovered    time.Duration // from at until the component ran again (restart returned, SIGCONT sent)
	fresh        time.Duration // from at until every shard's watermark passed its WAL position after recovery; 0: never
	err          error         // recovery failed
}

// component is what the fault takes down. One fault at a time per
// component: the next fault of a component still recovering is drawn
// again, for another.
func (f *fault) component() string {
	switch f.kind {
	case KillReader:
		return "reader " + f.target
	case CrashPostgres:
		return "postgres " + f.target
	}
	return f.target
}

// injector injects faults into the fleet and the stack and recovers from
// them. Its random source and deck are used by draw only (one goroutine); inject
// runs on many at once, for faults of different components.
type injector struct {
	st    *stack
	fleet *fleetProcs
	rng   *rand.Rand
	deck  []string // kinds not dealt yet (draw)
	log   *os.File // stack.sh output
}

// draw picks the next fault, of a component that busy does not name; nil
// when every component is busy. Kinds are dealt from a shuffled deck, the
// whole deck before a new one, so a soak of len(Kinds) faults or more has
// every kind (drawn freely, a 5-minute soak's 10 faults held no kill of
// Kafka or ClickHouse). A kind whose component is busy stays in the deck
// for a later draw; only when every kind left in it is busy does the
// fault come from outside the deck.
func (in *injector) draw(busy func(component string) bool) *fault {
	if len(in.deck) == 0 {
		in.deck = slices.Clone(Kinds)
		in.rng.Shuffle(len(in.deck), func(i, j int) { in.deck[i], in.deck[j] = in.deck[j], in.deck[i] })
	}
	for i, kind := range in.deck {
		if f := in.free(kind, busy); f != nil {
			in.deck = slices.Delete(in.deck, i, i+1)
			return f
		}
	}
	for _, i := range in.rng.Perm(len(Kinds)) {
		if f := in.free(Kinds[i], busy); f != nil {
			return f
		}
	}
	return nil
}

// free is a fault of kind on a target that busy does not name (a shard
// kind tries several shards), or nil.
func (in *injector) free(kind string, busy func(component string) bool) *fault {
	for range 4 * len(in.st.shards) {
		f := &fault{kind: kind}
		switch f.kind {
		case KillReader, CrashPostgres:
			f.target = "shard " + strconv.Itoa(in.st.shards[in.rng.IntN(len(in.st.shards))].Number)
		case KillLoader:
			f.target = "loader"
		case KillAPI:
			f.target = "api"
		case KillKafka, HangKafka:
			f.target = "kafka"
		case KillClickHouse, HangClickHouse:
			f.target = "clickhouse"
		}
		if f.kind == HangKafka || f.kind == HangClickHouse {
			f.hold = time.Duration(3000+in.rng.IntN(9000)) * time.Millisecond
		}
		if !busy(f.component()) {
			return f
		}
	}
	return nil
}

// inject injects f and recovers from it, returning once the component
// runs again (f.recovered, f.err).
func (in *injector) inject(ctx context.Context, f *fault) {
	f.at = time.Now()
	shard := func() int {
		n, _ := strconv.Atoi(strings.TrimPrefix(f.target, "shard "))
		return n
	}
	switch f.kind {
	case KillReader:
		in.fleet.readers[shard()].kill()
	case KillLoader:
		in.fleet.loader.kill()
	case KillAPI:
		in.fleet.api.kill()
	case KillKafka:
		f.err = in.killService(ctx, in.st.kafkaPidFile())
	case KillClickHouse:
		f.err = in.killService(ctx, in.st.clickhousePidFile())
	case CrashPostgres:
		f.err = in.crashPostgres(ctx, shard())
	case HangKafka:
		f.err = in.hang(ctx, in.st.kafkaPidFile(), f.hold)
	case HangClickHouse:
		f.err = in.hang(ctx, in.st.clickhousePidFile(), f.hold)
	}
	f.recovered = time.Since(f.at)
}

// killService SIGKILLs the service of a pid file and brings it back with
// stack.sh up, as an operator would.
func (in *injector) killService(ctx context.Context, pidFile string) error {
	pid, err := readPid(pidFile)
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %d: %w", pid, err)
	}
	// Until the kernel has torn it down its port still answers, and
	// stack.sh up would take the port for someone else's.
	if err := waitGone(ctx, pid); err != nil {
		return err
	}
	return in.stackUp(ctx)
}

// waitGone waits until pid has exited: gone, or a zombie none of whose
// threads still runs. A multi-threaded process's leader turns zombie
// while its other threads are still exiting, and its sockets close only
// with the last of them: a JVM killed under load kept its port for
// seconds after, and stack.sh up then refused the port as taken.
func waitGone(ctx context.Context, pid int) error {
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return nil
		}
		s := string(b)
		if f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(f) > 0 && f[0] == "Z" {
			if tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid)); err != nil || len(tasks) <= 1 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pid %d still running after SIGKILL: %w", pid, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// crashPostgres stops a shard in immediate mode (a crash: recovery runs on
// the next start) and brings it back with stack.sh up.
func (in *injector) crashPostgres(ctx context.Context, shard int) error {
	out, err := exec.CommandContext(ctx, "runuser", "-u", "postgres", "--",
		"/usr/lib/postgresql/15/bin/pg_ctl", "-D", in.st.pgDir(shard), "-m", "immediate", "-w", "stop").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl stop -m immediate shard %d: %w: %s", shard, err, out)
	}
	return in.stackUp(ctx)
}

// hang SIGSTOPs a service for hold (3-12 s), then SIGCONTs it.
func (in *injector) hang(ctx context.Context, pidFile string, hold time.Duration) error {
	pid, err := readPid(pidFile)
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("stop %d: %w", pid, err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(hold):
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		return fmt.Errorf("continue %d: %w", pid, err)
	}
	return nil
}

// stackUp runs deploy/local/stack.sh up for the stack's home and Kafka
// kind, patiently (each service may take up to 5 minutes on a loaded
// machine), and once more if that failed, as an operator would.
func (in *injector) stackUp(ctx context.Context) error {
	var err error
	for range 2 {
		cmd := exec.CommandContext(ctx, in.st.repo+"/deploy/local/stack.sh", "up")
		cmd.Env = append(os.Environ(), "TRIBUTARY_HOME="+in.st.home, "TRIBUTARY_KAFKA="+in.st.env["TRIBUTARY_KAFKA_KIND"],
			"TRIBUTARY_WAIT_TIMEOUT=300")
		cmd.Stdout, cmd.Stderr = in.log, in.log
		if err = cmd.Run(); err == nil || ctx.Err() != nil {
			break
		}
		fmt.Fprintf(in.log, "chaos: stack.sh up failed (%v); once more\n", err)
	}
	if err != nil {
		return fmt.Errorf("stack.sh up: %w (log %s)", err, in.log.Name())
	}
	return nil
}

func readPid(file string) (int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, fmt.Errorf("pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pid file %s: no pid in %q", file, b)
	}
	return pid, nil
}
