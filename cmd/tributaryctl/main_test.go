package main

import (
	"strings"
	"testing"
)

func TestParseResnapshot(t *testing.T) {
	t.Setenv("TRIBUTARY_PG_DSN", "")
	t.Setenv("TRIBUTARY_FLEET", "")
	t.Setenv("TRIBUTARY_CLICKHOUSE_ADDR", "")
	base := []string{"--kafka-brokers", "k:9092", "--tables", "t.json"}
	cases := []struct {
		args []string
		want string // in the error; "" for none
	}{
		{[]string{"resnapshot", "--shard", "2", "--table", "docs", "--fleet", "f.json"}, ""},
		{[]string{"resnapshot", "--shard", "2", "--status", "--fleet", "f.json"}, ""},
		{[]string{"resnapshot", "--table", "docs", "--fleet", "f.json"}, "--shard is required"},
		{[]string{"resnapshot", "--shard", "2", "--fleet", "f.json"}, "--table is required"},
		{[]string{"resnapshot", "--shard", "2", "--table", "docs"}, "--fleet (or $TRIBUTARY_FLEET) or $TRIBUTARY_PG_DSN is required"},
		{[]string{"resnapshot", "--shard", "2", "--table", "docs", "--fleet", "f.json", "--where", "w = 1", "--clickhouse-addr", "c:9000"}, ""},
		{[]string{"resnapshot", "--shard", "2", "--table", "docs", "--fleet", "f.json", "--where", "w = 1", "--no-wait"}, ""},
		{[]string{"resnapshot", "--shard", "2", "--table", "docs", "--fleet", "f.json", "--sweep", "--clickhouse-addr", "c:9000"}, ""},
		{[]string{"resnapshot", "--shard", "2", "--table", "docs", "--fleet", "f.json", "--where", "w = 1"}, "--clickhouse-addr (or $TRIBUTARY_CLICKHOUSE_ADDR) is required with --where or --sweep"},
		{[]string{"resnapshot", "--shard", "2", "--table", "docs", "--fleet", "f.json", "--sweep"}, "is required with --where or --sweep"},
		{[]string{"resnapshot", "--shard", "2", "--table", "docs", "--fleet", "f.json", "--sweep", "--where", "w = 1", "--clickhouse-addr", "c:9000"}, "--sweep takes none of"},
		{[]string{"dlq", "list", "--where", "x = 1"}, "are resnapshot's"},
		{[]string{"dlq", "list", "--sweep"}, "are resnapshot's"},
		{[]string{"resnapshots"}, `unknown action "resnapshots"`},
	}
	for _, c := range cases {
		cfg, err := parse(append(c.args[:len(c.args):len(c.args)], base...))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: want an error with %q, got %v", c.args, c.want, err)
		case c.want == "" && cfg.Slot != "tributary_shard_2":
			t.Errorf("%v: slot %q, want the reader's default tributary_shard_2", c.args, cfg.Slot)
		}
	}
}
