package verify

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tributary/tributary/internal/tables"
)

// TestShardsFromFleet: the shards of a fleet file, whatever their numbers,
// with the DSNs of the variables it names; a variable not set is named.
func TestShardsFromFleet(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, fleet string
		env         map[string]string
		want        []Shard
		err         string
	}{
		{name: "two shards", fleet: `{"shards": [{"shard": 0, "dsn_env": "TRIBUTARY_SHARD_0_DSN"}, {"shard": 1, "dsn_env": "TRIBUTARY_SHARD_1_DSN"}]}`,
			env:  map[string]string{"TRIBUTARY_SHARD_0_DSN": "postgres://a", "TRIBUTARY_SHARD_1_DSN": "postgres://b"},
			want: []Shard{{0, "postgres://a"}, {1, "postgres://b"}}},
		{name: "sparse", fleet: `{"shards": [{"shard": 17, "dsn_env": "C"}, {"shard": 1, "dsn_env": "A"}, {"shard": 5, "dsn_env": "B"}]}`,
			env:  map[string]string{"A": "postgres://a", "B": "postgres://b", "C": "postgres://c"},
			want: []Shard{{1, "postgres://a"}, {5, "postgres://b"}, {17, "postgres://c"}}},
		{name: "no file", err: "fleet file: open"},
		{name: "no shards", fleet: `{"shards": []}`, err: "no shards listed"},
		{name: "a DSN missing", fleet: `{"shards": [{"shard": 0, "dsn_env": "TRIBUTARY_SHARD_0_DSN"}, {"shard": 1, "dsn_env": "TRIBUTARY_SHARD_1_DSN"}]}`,
			env: map[string]string{"TRIBUTARY_SHARD_0_DSN": "postgres://a"}, err: "TRIBUTARY_SHARD_1_DSN is not set"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".json")
			if c.fleet != "" {
				if err := os.WriteFile(path, []byte(c.fleet), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := ShardsFromFleet(path, func(k string) string { return c.env[k] })
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want one naming %s", err, c.err)
				}
				return
			}
			if err != nil || len(got) != len(c.want) {
				t.Fatalf("got %v, %v", got, err)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Errorf("shard %d = %+v, want %+v", i, got[i], c.want[i])
				}
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tcfg, err := tables.Parse([]byte(`{"tables":[{"name":"documents","id_column":"id","id_layout":"seed000"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	good := func() Config {
		return Config{Shards: []Shard{{0, "postgres://a"}}, Tables: tcfg, APIURL: "http://127.0.0.1:8080",
			ClickHouse: ClickHouse{Addr: "127.0.0.1:9000", Database: "tributary"},
			Wait:       time.Second, Concurrency: 1, ShardTimeout: time.Second}
	}
	c := good()
	if err := c.Validate(); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	for _, b := range []struct {
		name   string
		mutate func(*Config)
		err    string
	}{
		{"no shards", func(c *Config) { c.Shards = nil }, "no shards"},
		{"shard twice", func(c *Config) { c.Shards = append(c.Shards, Shard{0, "postgres://b"}) }, "twice"},
		{"empty DSN", func(c *Config) { c.Shards[0].DSN = "" }, "empty DSN"},
		{"no tables", func(c *Config) { c.Tables = nil }, "no tables"},
		{"bad URL", func(c *Config) { c.APIURL = "127.0.0.1:8080" }, "not an http(s) URL"},
		{"no ClickHouse", func(c *Config) { c.ClickHouse.Addr = "" }, "ClickHouse address"},
		{"negative sample", func(c *Config) { c.Sample = -1 }, "sample"},
		{"negative API sample", func(c *Config) { c.APISample = -1 }, "API sample"},
		{"no concurrency", func(c *Config) { c.Concurrency = 0 }, "concurrency"},
		{"no timeout", func(c *Config) { c.ShardTimeout = 0 }, "timeout"},
	} {
		t.Run(b.name, func(t *testing.T) {
			c := good()
			b.mutate(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), b.err) {
				t.Fatalf("err = %v, want one mentioning %q", err, b.err)
			}
		})
	}
}
