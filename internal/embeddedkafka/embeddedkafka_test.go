package embeddedkafka

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestConfigValidate(t *testing.T) {
	good := Config{Listen: "127.0.0.1:0", Partitions: 4}
	tests := []struct {
		name string
		mod  func(*Config)
		ok   bool
	}{
		{"defaults", func(*Config) {}, true},
		{"topics", func(c *Config) { c.Topics = []string{"a", "b.c"} }, true},
		{"no port", func(c *Config) { c.Listen = "127.0.0.1" }, false},
		{"no host", func(c *Config) { c.Listen = ":9092" }, false},
		{"unspecified v4", func(c *Config) { c.Listen = "0.0.0.0:9092" }, false},
		{"unspecified v6", func(c *Config) { c.Listen = "[::]:9092" }, false},
		{"bad port", func(c *Config) { c.Listen = "127.0.0.1:70000" }, false},
		{"zero partitions", func(c *Config) { c.Partitions = 0 }, false},
		{"empty topic", func(c *Config) { c.Topics = []string{""} }, false},
		{"topic with comma", func(c *Config) { c.Topics = []string{"a,b"} }, false},
		{"log level", func(c *Config) { c.LogLevel = "loud" }, false},
		{"TLS", func(c *Config) { c.TLSCertFile, c.TLSKeyFile = "c.pem", "k.pem" }, true},
		{"cert without key", func(c *Config) { c.TLSCertFile = "c.pem" }, false},
		{"client CA without TLS", func(c *Config) { c.ClientCAFile = "ca.pem" }, false},
		{"SASL", func(c *Config) { c.SASLUser, c.SASLPassword = "u", "p" }, true},
		{"SASL user without password", func(c *Config) { c.SASLUser = "u" }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good
			tt.mod(&c)
			if err := c.Validate(); (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

// TestRestartKeepsState produces to an auto-created topic, restarts the
// broker on the same data directory and port, and reads the record back
// together with the committed offset of a group.
func TestRestartKeepsState(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := Config{Listen: "127.0.0.1:" + freePort(t), DataDir: t.TempDir(), Partitions: 3, LogLevel: "none"}

	b, err := Start(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	if b.Addr() != cfg.Listen {
		t.Fatalf("Addr() = %q, want %q", b.Addr(), cfg.Listen)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"one", "two"} {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Key: []byte("k"), Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	cl.Close()
	// Consume one record and commit it, so that the group resumes after it.
	got := consume(ctx, t, b.Addr(), 1)
	if got[0] != "one" {
		t.Fatalf("first consume = %q, want one", got)
	}
	b.Close()

	b, err = Start(cfg, logger)
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	defer b.Close()
	if got := consume(ctx, t, b.Addr(), 1); got[0] != "two" {
		t.Fatalf("after restart the group read %q, want two", got)
	}
}

// consume reads n records of topic t as group g and commits them.
func consume(ctx context.Context, t *testing.T, addr string, n int) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("t"), kgo.ConsumerGroup("g"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []string
	var recs []*kgo.Record
	for len(out) < n {
		fs := cl.PollRecords(ctx, n-len(out))
		if err := ctx.Err(); err != nil {
			t.Fatalf("consume: %v (got %q)", err, out)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Errorf("fetch: %v", err) })
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, string(r.Value))
			recs = append(recs, r)
		})
	}
	if err := cl.CommitRecords(ctx, recs...); err != nil {
		t.Fatalf("commit: %v", err)
	}
	return out
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, p, _ := net.SplitHostPort(l.Addr().String())
	return p
}
