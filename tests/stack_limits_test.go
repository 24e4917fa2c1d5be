package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestStackLimits: stack.sh refuses a shard count beyond the shards'
// window of 200 ports, an offset that would put shard ports among
// another stack's services, a Kafka broker session it cannot keep and a
// clone setting that is not 0 or 1, naming the variable and its bounds,
// before it starts anything (docs/deploy.md, "A fleet on one machine").
func TestStackLimits(t *testing.T) {
	cases := []struct {
		name string
		env  []string
		want string
	}{
		{"too many shards", []string{"TRIBUTARY_SHARDS=201", "TRIBUTARY_PORT_OFFSET=0"}, "TRIBUTARY_SHARDS must be 1..200"},
		{"no shards", []string{"TRIBUTARY_SHARDS=0", "TRIBUTARY_PORT_OFFSET=0"}, "TRIBUTARY_SHARDS must be 1..200"},
		{"offset past the shards' room", []string{"TRIBUTARY_SHARDS=4", "TRIBUTARY_PORT_OFFSET=2600"}, "TRIBUTARY_PORT_OFFSET must be a multiple of 200 in 0..2400"},
		{"offset not a multiple of 200", []string{"TRIBUTARY_SHARDS=4", "TRIBUTARY_PORT_OFFSET=300"}, "TRIBUTARY_PORT_OFFSET must be a multiple of 200 in 0..2400"},
		{"broker session shorter than two heartbeats", []string{"TRIBUTARY_SHARDS=4", "TRIBUTARY_KAFKA_BROKER_SESSION_MS=900"}, "TRIBUTARY_KAFKA_BROKER_SESSION_MS must be a number of milliseconds, at least 1000"},
		{"broker session not a number", []string{"TRIBUTARY_SHARDS=4", "TRIBUTARY_KAFKA_BROKER_SESSION_MS=30s"}, "TRIBUTARY_KAFKA_BROKER_SESSION_MS must be a number of milliseconds, at least 1000"},
		{"clone neither 0 nor 1", []string{"TRIBUTARY_SHARDS=4", "TRIBUTARY_PG_CLONE=yes"}, "TRIBUTARY_PG_CLONE must be 0 or 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			home := filepath.Join(t.TempDir(), "home")
			cmd := exec.Command("../deploy/local/stack.sh", "up")
			cmd.Env = append(envWithoutStack(), append(c.env, "TRIBUTARY_HOME="+home)...)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("stack.sh up with %v succeeded, want a refusal:\n%s", c.env, out)
			}
			if !strings.Contains(string(out), c.want) {
				t.Errorf("stack.sh up with %v said:\n%s\nwant %q", c.env, out, c.want)
			}
			if strings.Contains(string(out), "started") {
				t.Errorf("stack.sh up with %v started something before refusing:\n%s", c.env, out)
			}
		})
	}
}

// envWithoutStack is the test's environment without the TRIBUTARY_ variables of
// the stack the suite runs against.
func envWithoutStack() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TRIBUTARY_") {
			out = append(out, kv)
		}
	}
	return out
}
