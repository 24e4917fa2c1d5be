package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParseShardSet: --shards reads the shards, DSNs and slots from the
// fleet file; the mistakes around it are refused, each with what to do.
func TestParseShardSet(t *testing.T) {
	dir := t.TempDir()
	fleetFile := filepath.Join(dir, "fleet.json")
	if err := os.WriteFile(fleetFile, []byte(`{"shards": [{"shard": 3, "dsn_env": "MS_D3"}, {"shard": 4, "dsn_env": "MS_D4", "reader_dsn_env": "MS_R4"}, {"shard": 9, "dsn_env": "MS_D9"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MS_D3", "postgres://a@h3/db")
	t.Setenv("MS_D4", "postgres://a@h4/db")
	t.Setenv("MS_R4", "postgres://r@h4/db")
	t.Setenv("MS_D9", "postgres://a@h9/db")
	t.Setenv("TRIBUTARY_PG_DSN", "")
	base := []string{"--tables", "t.json", "--kafka-brokers", "k:9092", "--fleet", fleetFile}
	c, err := parse(append(base, "--shards", "3-4,9"))
	if err != nil {
		t.Fatal(err)
	}
	want := []target{{3, "postgres://a@h3/db", "tributary_shard_3"}, {4, "postgres://r@h4/db", "tributary_shard_4"}, {9, "postgres://a@h9/db", "tributary_shard_9"}}
	if len(c.targets) != len(want) {
		t.Fatalf("targets %+v, want %+v", c.targets, want)
	}
	for i := range want {
		if c.targets[i] != want[i] {
			t.Errorf("target %d = %+v, want %+v", i, c.targets[i], want[i])
		}
	}
	if c, err := parse(append(base, "--shard", "9", "--slot", "mine")); err != nil || len(c.targets) != 1 || c.targets[0].slot != "mine" {
		t.Errorf("--shard 9 --slot mine: %+v, %v; want one target with slot mine, as before", c, err)
	}
	for _, tc := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"--shards", "3", "--shard", "3"}, "", "--shard and --shards exclude each other"},
		{[]string{"--shards", "3-9", "--slot", "s"}, "", `--slot "s" has no {shard}`},
		{[]string{"--shards", "5"}, "", "5 names no shard of"},
		{[]string{"--shards", "3,3"}, "", "shard 3 is named twice"},
		{[]string{"--shards", "all"}, "postgres://x@y/z", "$TRIBUTARY_PG_DSN is one shard's DSN"},
		{[]string{"--shards", "all", "--retry-min", "5s", "--retry-max", "1s"}, "", "--retry-max >= it"},
		{[]string{}, "", "--shard (or $TRIBUTARY_SHARD, 0..8191) or --shards (with --fleet) is required"},
	} {
		t.Setenv("TRIBUTARY_PG_DSN", tc.env)
		_, err := parse(append(append([]string{}, base...), tc.args...))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want it to say %q", tc.args, err, tc.want)
		}
	}
	t.Setenv("TRIBUTARY_PG_DSN", "")
	if _, err := parse([]string{"--tables", "t.json", "--kafka-brokers", "k:9092", "--shards", "0-3"}); err == nil || !strings.Contains(err.Error(), "--shards needs --fleet") {
		t.Errorf("--shards without --fleet: %v", err)
	}
}
