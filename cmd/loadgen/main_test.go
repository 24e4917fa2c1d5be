package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tributary/tributary/internal/flagenv"
)

// TestParse: bulk mode from flags and the environment, its defaults (no
// moves unless asked for), and every bad setting refused as a usage error.
func TestParse(t *testing.T) {
	dir := t.TempDir()
	fleets := map[string]string{}
	for name, data := range map[string]string{
		"two":    `{"shards": [{"shard": 0, "dsn_env": "TRIBUTARY_SHARD_0_DSN"}, {"shard": 1, "dsn_env": "TRIBUTARY_SHARD_1_DSN"}]}`,
		"three":  `{"shards": [{"shard": 0, "dsn_env": "TRIBUTARY_SHARD_0_DSN"}, {"shard": 1, "dsn_env": "TRIBUTARY_SHARD_1_DSN"}, {"shard": 2, "dsn_env": "TRIBUTARY_SHARD_2_DSN"}]}`,
		"empty":  `{"shards": []}`,
		"sparse": `{"shards": [{"shard": 17, "dsn_env": "TRIBUTARY_SHARD_0_DSN"}, {"shard": 5, "dsn_env": "TRIBUTARY_SHARD_1_DSN"}]}`,
	} {
		fleets[name] = filepath.Join(dir, name+".json")
		if err := os.WriteFile(fleets[name], []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		err  string // "" when valid
		rows int
		move float64
		body int
	}{
		{name: "defaults", rows: 1, move: 0.02, body: 200},
		{name: "bulk", args: []string{"--rows-per-op", "100", "--bulk-body-bytes", "50"}, rows: 100, body: 50},
		{name: "bulk from env", env: map[string]string{"TRIBUTARY_LOADGEN_ROWS_PER_OP": "20"}, rows: 20, body: 200},
		{name: "bulk, moves off explicitly", args: []string{"--rows-per-op", "100", "--move-percent", "0"}, rows: 100, body: 200},
		{name: "bulk with moves", args: []string{"--rows-per-op", "100", "--move-percent", "5"}, err: "makes no moves"},
		{name: "bulk with moves from env", args: []string{"--rows-per-op", "100"},
			env: map[string]string{"TRIBUTARY_LOADGEN_MOVE_PERCENT": "2"}, err: "makes no moves"},
		{name: "bulk with legacy notes", args: []string{"--rows-per-op", "10", "--legacy-percent", "1"}, err: "no legacy notes"},
		{name: "zero rows", args: []string{"--rows-per-op", "0"}, err: "--rows-per-op must be >= 1"},
		{name: "negative bulk body", args: []string{"--rows-per-op", "10", "--bulk-body-bytes", "-1"}, err: "--bulk-body-bytes must be >= 0"},
		{name: "not a number", args: []string{"--rows-per-op", "lots"}, err: "invalid value"},
		{name: "bad env", env: map[string]string{"TRIBUTARY_LOADGEN_ROWS_PER_OP": "x"}, err: "not an integer"},
		{name: "no fleet", env: map[string]string{"TRIBUTARY_FLEET": ""}, err: "--fleet (or $TRIBUTARY_FLEET) is required"},
		{name: "no shards", env: map[string]string{"TRIBUTARY_FLEET": "empty"}, err: "empty.json: shards: no shards listed"},
		{name: "missing DSN", env: map[string]string{"TRIBUTARY_FLEET": "three"}, err: "$TRIBUTARY_SHARD_2_DSN is not set"},
		{name: "sparse fleet", env: map[string]string{"TRIBUTARY_FLEET": "sparse"}, args: []string{"--rows-per-op", "5"}, rows: 5, body: 200},
		{name: "negative duration", args: []string{"--duration", "-1s"}, err: "--duration"},
		{name: "bad resume", args: []string{"--resume", "no"}, err: "use --resume yes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := map[string]string{"TRIBUTARY_FLEET": "two", "TRIBUTARY_SHARD_0_DSN": "postgres://a", "TRIBUTARY_SHARD_1_DSN": "postgres://b",
				"TRIBUTARY_SHARD_2_DSN": "", "TRIBUTARY_LOADGEN_ROWS_PER_OP": "", "TRIBUTARY_LOADGEN_MOVE_PERCENT": ""}
			for k, v := range c.env {
				env[k] = v
			}
			if f := env["TRIBUTARY_FLEET"]; f != "" {
				env["TRIBUTARY_FLEET"] = fleets[f]
			}
			for k, v := range env {
				t.Setenv(k, v)
			}
			cfg, err := parse(c.args)
			if c.err != "" {
				var usage *flagenv.UsageError
				if err == nil || !strings.Contains(err.Error(), c.err) || !errors.As(err, &usage) {
					t.Fatalf("error %v, want a usage error containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tr := cfg.Traffic
			if tr.RowsPerOp != c.rows || tr.MoveShare != c.move || tr.BulkBodyBytes != c.body || len(cfg.DSNs) != 2 {
				t.Fatalf("rows per op %d, move share %v, bulk body %d, %d DSNs; want %d, %v, %d, 2",
					tr.RowsPerOp, tr.MoveShare, tr.BulkBodyBytes, len(cfg.DSNs), c.rows, c.move, c.body)
			}
			if c.name == "sparse fleet" && (cfg.DSNs[17] != "postgres://a" || cfg.DSNs[5] != "postgres://b") {
				t.Fatalf("sparse fleet: DSNs %v, want shard 17 and 5 with their variables' DSNs", cfg.DSNs)
			}
		})
	}
}
