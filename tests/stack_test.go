// Package tests holds end-to-end tests that run against the real local stack
// (PostgreSQL shards, Apache Kafka, ClickHouse) brought up by
// deploy/local/stack.sh. The stack describes itself in $TRIBUTARY_HOME/stack.env;
// `make test` exports TRIBUTARY_STACK_ENV pointing at it and sets
// TRIBUTARY_REQUIRE_STACK=1 so that a missing stack fails instead of skipping.
package tests

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Stack is what the integration tests know about the running local stack.
type Stack struct {
	Env map[string]string
	// ShardDSNs are superuser DSNs, one per shard, indexed by shard number.
	ShardDSNs []string
	// ReplDSNs are DSNs of the least-privilege replication role.
	ReplDSNs       []string
	ClickHouseAddr string
	// ClickHouseCluster is the cluster of a stack started with
	// TRIBUTARY_CLICKHOUSE=cluster ("" for one server): the pipelines of
	// the tests then run in cluster mode (make test-cluster).
	ClickHouseCluster string
	KafkaBrokers      []string
	// EmbeddedKafkaBrokers is set when the embedded (kfake) broker runs too.
	EmbeddedKafkaBrokers []string
}

// loadStack reads the stack description, or skips (fails when
// TRIBUTARY_REQUIRE_STACK=1) if there is none.
func loadStack(t testing.TB) *Stack {
	t.Helper()
	path := os.Getenv("TRIBUTARY_STACK_ENV")
	if path == "" {
		if home := os.Getenv("TRIBUTARY_HOME"); home != "" {
			path = home + "/stack.env"
		} else {
			path = "../.stack/stack.env"
		}
	}
	env, err := readEnvFile(path)
	if err != nil {
		if os.Getenv("TRIBUTARY_REQUIRE_STACK") == "1" {
			t.Fatalf("local stack required but not readable: %v (run deploy/local/stack.sh up)", err)
		}
		t.Skipf("no local stack (%v); run `make test` to bring one up", err)
	}
	s := &Stack{Env: env}
	n, err := strconv.Atoi(env["TRIBUTARY_SHARDS"])
	if err != nil || n < 1 {
		t.Fatalf("stack.env: bad TRIBUTARY_SHARDS %q", env["TRIBUTARY_SHARDS"])
	}
	for i := 0; i < n; i++ {
		s.ShardDSNs = append(s.ShardDSNs, env[fmt.Sprintf("TRIBUTARY_SHARD_%d_DSN", i)])
		s.ReplDSNs = append(s.ReplDSNs, env[fmt.Sprintf("TRIBUTARY_SHARD_%d_REPL_DSN", i)])
	}
	s.ClickHouseAddr = env["TRIBUTARY_CLICKHOUSE_ADDR"]
	s.ClickHouseCluster = env["TRIBUTARY_CLICKHOUSE_CLUSTER"]
	if b := env["TRIBUTARY_KAFKA_BROKERS"]; b != "" {
		s.KafkaBrokers = strings.Split(b, ",")
	}
	if b := env["TRIBUTARY_EMBEDDED_KAFKA_BROKERS"]; b != "" {
		s.EmbeddedKafkaBrokers = strings.Split(b, ",")
	}
	return s
}

func readEnvFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("%s: malformed line %q", path, line)
		}
		env[k] = strings.Trim(v, `"'`)
	}
	return env, sc.Err()
}
