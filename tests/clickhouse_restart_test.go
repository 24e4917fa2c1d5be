package tests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestClickHouseKilledMidLoad: ClickHouse is SIGKILLed while the loader is
// writing and brought back by the stack script; the loader retries without
// committing, and the table converges to exactly the shards.
func TestClickHouseKilledMidLoad(t *testing.T) {
	p := newPipeline(t, []int{0, 1}, nil)
	home := p.stack.Env["TRIBUTARY_HOME"]
	if home == "" {
		t.Fatal("stack.env has no TRIBUTARY_HOME")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tbl := p.table()

	wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
	defer wcancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(p.shards))
	for _, s := range p.shards {
		wg.Add(1)
		go func(shard int) {
			defer wg.Done()
			if err := churn(wctx, p.stack.ShardDSNs[shard], tbl, shard); err != nil && wctx.Err() == nil {
				errs <- err
			}
		}(s)
	}

	time.Sleep(4 * time.Second) // mid-load
	b, err := os.ReadFile(filepath.Join(home, "clickhouse", "clickhouse-server.pid"))
	if err != nil {
		t.Fatalf("ClickHouse pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("ClickHouse pid %q: %v", b, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill ClickHouse: %v", err)
	}
	t.Logf("ClickHouse (pid %d) killed", pid)
	time.Sleep(3 * time.Second) // the loader meets a dead server for a while
	up := exec.CommandContext(ctx, "../deploy/local/stack.sh", "up")
	up.Env = append(os.Environ(), "TRIBUTARY_HOME="+home, "TRIBUTARY_KAFKA="+p.stack.Env["TRIBUTARY_KAFKA_KIND"],
		"TRIBUTARY_SHARDS="+p.stack.Env["TRIBUTARY_SHARDS"])
	if out, err := up.CombinedOutput(); err != nil {
		t.Fatalf("stack.sh up after killing ClickHouse: %v\n%s", err, out)
	}
	t.Log("ClickHouse restarted")
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("workload: %v", err)
	}

	deadline := time.Now().Add(90 * time.Second)
	diff := "not compared"
	for time.Now().Before(deadline) {
		if err := p.failed(); err != nil {
			t.Fatalf("component failed: %v", err)
		}
		if diff = p.compare(ctx, tbl); diff == "" {
			return
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("after a ClickHouse restart the table differs from the shards:\n%s", diff)
}
