package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary/tributary/internal/chstore"
)

// TestSecureDemo runs `TRIBUTARY_SECURE=1 deploy/local/demo.sh` on the
// stack, as a newcomer would, and checks that every hop is secured: each
// shard's replication connection is TLS; the readers and the loader talk
// to Kafka only on its SASL_SSL port, the loader and the API to ClickHouse
// only on its TLS port; the API answers the tour's curl commands as
// printed (the stack's CA, the token header) and refuses a request
// without a token; and `make verify` passes. The demo is stopped and its
// slots and ClickHouse database dropped afterwards.
func TestSecureDemo(t *testing.T) {
	s := loadSecureStack(t)
	ks := loadKafkaSecureStack(t)
	home := s.Env["TRIBUTARY_HOME"]
	if home == "" {
		t.Fatal("stack.env has no TRIBUTARY_HOME")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), "TRIBUTARY_HOME="+home, "TRIBUTARY_SECURE=1",
			"TRIBUTARY_DEMO_TRAFFIC=5s", "TRIBUTARY_DEMO_RATE=100")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("go", "build", "-o", "bin/", "./cmd/...")
	t.Cleanup(func() { cleanupDemo(t, s.Stack, home) })
	tour := run("deploy/local/demo.sh")

	demo := filepath.Join(home, "demo")
	pids := map[string]int{}
	for _, name := range []string{"loader", "api"} {
		pids[name] = pidOf(t, filepath.Join(demo, name+".pid"))
	}
	readers, _ := filepath.Glob(filepath.Join(demo, "reader*.pid"))
	for _, f := range readers {
		pids[strings.TrimSuffix(filepath.Base(f), ".pid")] = pidOf(t, f)
	}
	if len(readers) == 0 {
		t.Fatalf("no reader pid files in %s", demo)
	}

	// Which ports each process is connected to.
	port := func(addr string) int {
		i := strings.LastIndex(addr, ":")
		p, err := strconv.Atoi(addr[i+1:])
		if err != nil {
			t.Fatalf("address %q: %v", addr, err)
		}
		return p
	}
	kafkaPlain, kafkaSecure := port(s.Env["TRIBUTARY_KAFKA_BROKERS"]), port(ks.Brokers[0])
	chPlain, chSecure := port(s.ClickHouseAddr), port(s.CHTLSAddr)
	for name, pid := range pids {
		ports := remotePorts(t, pid)
		wantKafka := name != "api"
		wantCH := name == "loader" || name == "api"
		for p, what := range map[int]string{kafkaPlain: "Kafka's plaintext port", chPlain: "ClickHouse's plaintext port"} {
			if ports[p] {
				t.Errorf("%s (pid %d) is connected to %s %d", name, pid, what, p)
			}
		}
		if wantKafka && !ports[kafkaSecure] {
			t.Errorf("%s (pid %d) has no connection to Kafka's SASL_SSL port %d (connected to %v)", name, pid, kafkaSecure, ports)
		}
		if wantCH && !ports[chSecure] {
			t.Errorf("%s (pid %d) has no connection to ClickHouse's TLS port %d (connected to %v)", name, pid, chSecure, ports)
		}
	}
	for i, dsn := range s.ShardDSNs {
		var plain, secure int
		err := withConn(ctx, dsn, func(c *pgx.Conn) error {
			return c.QueryRow(ctx, `SELECT count(*) FILTER (WHERE NOT s.ssl), count(*) FILTER (WHERE s.ssl)
				FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
				WHERE a.backend_type = 'walsender' AND a.usename = 'tributary_repl'`).Scan(&plain, &secure)
		})
		if err != nil {
			t.Fatal(err)
		}
		if plain > 0 || secure == 0 {
			t.Errorf("shard %d: %d replication connection(s) in plain text, %d over TLS; want all over TLS", i, plain, secure)
		}
	}

	// The tour's commands, run as printed.
	var ran int
	for _, line := range strings.Split(tour, "\n") {
		cmdline := strings.TrimSpace(line)
		if !strings.HasPrefix(cmdline, "curl -s --cacert") || !strings.Contains(cmdline, "/v1/shards") {
			continue
		}
		// Every shard is listed once its first watermark arrived.
		var got struct {
			Shards []struct {
				Shard int `json:"shard"`
			} `json:"shards"`
		}
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
			if err := json.Unmarshal([]byte(run("bash", "-c", cmdline)), &got); err != nil {
				t.Fatalf("the tour's %q: %v", cmdline, err)
			}
			if len(got.Shards) == len(s.ShardDSNs) || time.Now().After(deadline) {
				break
			}
		}
		if len(got.Shards) != len(s.ShardDSNs) {
			t.Errorf("the tour's %q lists %d shards, want %d", cmdline, len(got.Shards), len(s.ShardDSNs))
		}
		ran++
	}
	if ran == 0 {
		t.Fatalf("the tour prints no curl --cacert command for /v1/shards:\n%s", tour)
	}
	url := regexp.MustCompile(`https://[0-9.]+:[0-9]+`).FindString(tour)
	if url == "" {
		t.Fatalf("the tour names no https URL:\n%s", tour)
	}
	if out := run("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert", s.CAFile, url+"/v1/shards"); out != "401" {
		t.Errorf("GET %s/v1/shards without a token: status %s, want 401", url, out)
	}
	if out := run("make", "verify"); !strings.Contains(out, "verify: PASS") {
		t.Errorf("make verify after the secure demo did not pass:\n%s", out)
	}
}

// pidOf reads a pid file.
func pidOf(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return pid
}

// remotePorts is the set of remote TCP ports pid's sockets are connected
// to: its socket inodes (/proc/pid/fd) looked up in /proc/net/tcp{,6}.
func remotePorts(t *testing.T, pid int) map[int]bool {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("process %d: %v", pid, err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	ports := map[int]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || !inodes[fields[9]] {
				continue
			}
			rem := fields[2]
			p, err := strconv.ParseInt(rem[strings.LastIndex(rem, ":")+1:], 16, 32)
			if err == nil && p != 0 {
				ports[int(p)] = true
			}
		}
		f.Close()
	}
	return ports
}

// cleanupDemo stops the demo and drops what it made that would otherwise
// hold WAL on the shards (its slots) or data in ClickHouse (its database).
func cleanupDemo(t *testing.T, st *Stack, home string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "deploy/local/demo.sh", "stop")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "TRIBUTARY_HOME="+home)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("demo.sh stop: %v\n%s", err, out)
	}
	for i, dsn := range st.ShardDSNs {
		err := withConn(ctx, dsn, func(c *pgx.Conn) error {
			_, err := c.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
				WHERE slot_name LIKE 'tributary\_shard\_%' AND NOT active`)
			return err
		})
		if err != nil {
			t.Errorf("drop the demo's slot on shard %d: %v", i, err)
		}
	}
	conn, err := chstore.Dial(ctx, chstore.DialOptions{Addr: st.ClickHouseAddr})
	if err == nil {
		err = conn.Exec(ctx, "DROP DATABASE IF EXISTS tributary")
		conn.Close()
	}
	if err != nil {
		t.Errorf("drop the demo's ClickHouse database: %v", err)
	}
}

// withConn runs f on a connection to dsn.
func withConn(ctx context.Context, dsn string, f func(*pgx.Conn) error) error {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	return f(c)
}
