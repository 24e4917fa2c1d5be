package main

import (
	"errors"
	"flag"
	"slices"
	"strings"
	"testing"

	"github.com/tributary/tributary/internal/flagenv"
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
		// The reader sweeps after a --where: tributaryctl needs no ClickHouse for it.
		{[]string{"resnapshot", "--shard", "2", "--table", "docs", "--fleet", "f.json", "--where", "w = 1"}, ""},
		{[]string{"resnapshot", "--shard", "2", "--table", "docs", "--fleet", "f.json", "--sweep"}, "--clickhouse-addr (or $TRIBUTARY_CLICKHOUSE_ADDR) is required with --sweep"},
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

// TestActionFlags: each action takes its own flags and no other, and
// refuses another action's flag by naming the actions it belongs to.
func TestActionFlags(t *testing.T) {
	kafka := []string{"kafka-brokers", "kafka-ca-file", "kafka-cert-file", "kafka-key-file", "kafka-sasl-mechanism",
		"kafka-sasl-password-file", "kafka-sasl-user", "kafka-server-name", "kafka-tls", "log-format", "log-level", "tables"}
	clickhouse := []string{"clickhouse-addr", "clickhouse-ca-file", "clickhouse-cert-file", "clickhouse-db", "clickhouse-key-file",
		"clickhouse-password-file", "clickhouse-server-name", "clickhouse-tls", "clickhouse-user"}
	with := func(groups ...[]string) []string {
		var out []string
		for _, g := range groups {
			out = append(out, g...)
		}
		slices.Sort(out)
		return out
	}
	want := map[string][]string{
		"status":     with([]string{"api", "json", "log-format", "log-level"}),
		"pause":      with(kafka, clickhouse, []string{"table", "reason"}),
		"resume":     with(kafka, clickhouse, []string{"table", "reason"}),
		"dlq list":   with(kafka, []string{"dlq-topic", "reason", "table", "json"}),
		"dlq replay": with(kafka, []string{"dlq-topic", "reason", "table", "yes"}),
		"resnapshot": with(kafka, clickhouse, []string{"shard", "table", "where", "status", "no-wait", "sweep", "progress-interval", "json", "fleet", "slot", "state-topic"}),
		"teardown":   with(kafka, clickhouse, []string{"clickhouse-cluster", "clickhouse-node-addrs", "fleet", "slot", "state-topic", "publication", "group", "dlq-topic", "yes"}),
	}
	if len(actions) != len(want) {
		t.Errorf("%d actions, want %d", len(actions), len(want))
	}
	for _, a := range actions {
		fs := flagenv.New(a.name, a.usage)
		a.flags(fs, &Config{})
		var got []string
		fs.VisitAll(func(f *flag.Flag) { got = append(got, f.Name) })
		slices.Sort(got)
		if !slices.Equal(got, want[a.name]) {
			t.Errorf("%s takes %v, want %v", a.name, got, want[a.name])
		}
		var help strings.Builder
		fs.SetOutput(&help)
		fs.Usage()
		if !strings.HasPrefix(help.String(), "tributaryctl "+a.name) {
			t.Errorf("%s --help does not start with its synopsis:\n%s", a.name, help.String())
		}
	}

	t.Setenv("TRIBUTARY_PG_DSN", "")
	base := []string{"--kafka-brokers", "k:9092", "--tables", "t.json"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "--yes"}, "status does not take --yes: it is among the flags that are dlq replay's and teardown's"},
		{[]string{"dlq", "replay", "--json"}, "dlq replay does not take --json"},
		{[]string{"pause", "--table", "t", "--clickhouse-addr", "c:9000", "--fleet=f.json"}, "pause does not take --fleet: it is among the flags that are resnapshot's and teardown's"},
		{[]string{"teardown", "--no-wait"}, "teardown does not take --no-wait: it is among the flags that are resnapshot's"},
		{[]string{"dlq", "list", "--no-such-flag"}, "flag provided but not defined: -no-such-flag"},
		{[]string{"dlq"}, `want "dlq list" or "dlq replay"`},
		{[]string{"--table", "t"}, "--table before the action"},
		{[]string{}, "no action"},
	} {
		_, err := parse(append(c.args[:len(c.args):len(c.args)], base...))
		if len(c.args) < 2 {
			_, err = parse(c.args)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: want an error with %q, got %v", c.args, c.want, err)
		}
		if _, ok := errors.AsType[*flagenv.UsageError](err); !ok {
			t.Errorf("%v: %v is not a usage error (exit status 2)", c.args, err)
		}
	}
	// A bool flag's value and another flag's value are not flags.
	if _, err := parse(append([]string{"dlq", "replay", "--yes", "--reason", "--json-ish"}, base...)); err != nil {
		t.Errorf("dlq replay --yes --reason --json-ish: %v", err)
	}
}
