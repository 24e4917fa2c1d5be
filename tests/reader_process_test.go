package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// readerProcess starts a supervised cdc-reader for shard of p with the
// given tables configuration (JSON) and extra flags; the supervisor
// restarts it whenever it exits, like a service manager. Its log is the
// returned file; the caller stops it (and prints the log on failure with
// dumpLogOnFailure).
func readerProcess(t *testing.T, p *pipeline, shard int, tablesJSON string, extra ...string) (*supervised, string) {
	t.Helper()
	bin := binaries(t)
	dir := t.TempDir()
	tablesFile := filepath.Join(dir, "tables.json")
	if err := os.WriteFile(tablesFile, []byte(tablesJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "reader.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	args := []string{bin + "/cdc-reader", "--shard", strconv.Itoa(shard), "--tables", tablesFile,
		"--kafka-brokers", strings.Join(p.brokers, ","), "--slot", fmt.Sprintf("e2e_%s_%d", p.suffix, shard),
		"--publication", "e2e_" + p.suffix, "--state-topic", "e2e_" + p.suffix + ".state", "--metrics-addr", "",
		"--status-interval", "200ms", "--watermark-interval", "200ms", "--heartbeat-interval", "1s", "--log-level", "info",
		"--clickhouse-addr", p.stack.ClickHouseAddr, "--clickhouse-db", p.chDB}
	rd := &supervised{name: "reader", log: logf, done: make(chan struct{}), args: append(args, extra...),
		env: []string{"TRIBUTARY_PG_DSN=" + p.stack.ShardDSNs[shard]}}
	go rd.run()
	return rd, logf.Name()
}

// stopReaderProcess stops rd and, if the test failed, logs its log.
func stopReaderProcess(t *testing.T, rd *supervised, log string) {
	rd.stop()
	if t.Failed() {
		b, _ := os.ReadFile(log)
		t.Logf("reader log:\n%s", b)
	}
}

// starts is how many times the supervisor started the process.
func (s *supervised) startCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts
}
