package tests

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tributary/tributary/internal/kafkaconn"
	"github.com/tributary/tributary/internal/verify"
)

// kafkaSecureStack is what the Kafka TLS/SASL tests need of a stack
// started with TRIBUTARY_SECURE=1: the SASL_SSL brokers, the client
// settings for them, and the password (to check no output shows it).
type kafkaSecureStack struct {
	*Stack
	Brokers  []string
	Security kafkaconn.Security
	Password string
}

func loadKafkaSecureStack(t *testing.T) *kafkaSecureStack {
	t.Helper()
	st := loadStack(t)
	brokers := st.Env["TRIBUTARY_KAFKA_SASL_SSL_BROKERS"]
	if brokers == "" {
		t.Skip("the stack has no Kafka SASL_SSL listener: restart it with TRIBUTARY_SECURE=1 deploy/local/stack.sh up (after stack.sh down)")
	}
	s := &kafkaSecureStack{Stack: st, Brokers: strings.Split(brokers, ","), Security: kafkaconn.Security{
		CAFile: st.Env["TRIBUTARY_STACK_CA_FILE"], SASLUser: st.Env["TRIBUTARY_KAFKA_SASL_SSL_USER"],
		SASLPasswordFile: st.Env["TRIBUTARY_KAFKA_SASL_SSL_PASSWORD_FILE"],
	}}
	if errs := s.Security.Validate(); len(errs) > 0 {
		t.Fatalf("stack.env's Kafka SASL_SSL settings: %v", errors.Join(errs...))
	}
	b, err := os.ReadFile(s.Security.SASLPasswordFile)
	if err != nil {
		t.Fatal(err)
	}
	s.Password = strings.TrimSpace(string(b))
	return s
}

// TestKafkaSASLSSLPipeline: readers produce to Kafka's SASL_SSL listener
// (TLS verified against the stack's CA, SCRAM-SHA-512), the loader consumes
// from it, and ClickHouse and the API then equal the shards exactly.
func TestKafkaSASLSSLPipeline(t *testing.T) {
	s := loadKafkaSecureStack(t)
	p := setupPipelineOn(t, s.Stack, []int{0, 1}, s.Brokers, true, "docs_",
		`{"topic_prefix":"e2e_%[1]s.","tables":[{"name":%[2]q,"id_column":"id","id_layout":"seed000","shard_key":"workspace_id"}]}`,
		docsDDL)
	p.kafkaSec = s.Security
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	for _, sh := range p.shards {
		p.startReader(runCtx, sh)
	}
	p.startMeteredLoader(runCtx, "l1")

	var ids []int64
	for i := range 300 {
		sh := p.shards[i%len(p.shards)]
		ids = append(ids, p.insert(ctx, sh, int64(i%7), "secure", "body"))
	}
	for i, id := range ids[:60] {
		sh := p.shards[i%len(p.shards)]
		if i%3 == 0 {
			p.exec(ctx, sh, "DELETE FROM "+p.table()+" WHERE id = $1", id)
		} else {
			p.exec(ctx, sh, "UPDATE "+p.table()+" SET title = 'updated', amount = 12.34 WHERE id = $1", id)
		}
	}
	rep := p.runVerifyWith(ctx, func(*verify.Config) {})
	if !rep.Passed {
		t.Fatalf("verify through Kafka SASL_SSL failed: %+v", rep.Differences)
	}
	if err := p.failed(); err != nil {
		t.Fatal(err)
	}
	// The listener the pipeline used refuses a plaintext client: the
	// records above went through TLS and SCRAM, not around them.
	plain, err := kafkaconn.Security{}.NewClient(p.brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
	defer pcancel()
	if err := kafkaconn.Check(pctx, plain, p.brokers, kafkaconn.Security{}); err == nil {
		t.Fatalf("a plaintext client without SASL was answered by the SASL_SSL listener %v", p.brokers)
	}
}

// TestKafkaSASLSSLRefusedAtStart: cdc-reader, loader and tributaryctl,
// pointed at the SASL_SSL listener with a wrong password or with a CA that
// did not sign the brokers' certificate, exit non-zero at start with a
// message that names the broker and what failed, and never the password.
func TestKafkaSASLSSLRefusedAtStart(t *testing.T) {
	s := loadKafkaSecureStack(t)
	bin := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", bin+"/", "../cmd/cdc-reader", "../cmd/loader", "../cmd/tributaryctl").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	wrongPassword := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(wrongPassword, []byte(s.Password+"-wrong\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badCA := otherCA(t)
	tablesFile := "../deploy/local/tables.json"
	commands := map[string][]string{
		// The DSN is never used: the reader checks Kafka before the shard.
		"cdc-reader":   {"--shard", "0", "--tables", tablesFile, "--metrics-addr", ""},
		"loader":       {"--tables", tablesFile, "--clickhouse-addr", s.ClickHouseAddr, "--metrics-addr", ""},
		"tributaryctl": {"dlq", "list", "--tables", tablesFile},
	}
	cases := []struct {
		name, ca, passwordFile, want string
	}{
		{"wrong password", s.Security.CAFile, wrongPassword, "SASL authentication failed (wrong password, or no such user on the brokers)"},
		{"wrong CA", badCA, s.Security.SASLPasswordFile, "not signed by an authority we trust"},
	}
	for name, args := range commands {
		for _, c := range cases {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				// tributaryctl's action comes before its flags.
				full := append(append([]string{}, args...), "--kafka-brokers", strings.Join(s.Brokers, ","),
					"--kafka-ca-file", c.ca, "--kafka-sasl-user", s.Security.SASLUser, "--kafka-sasl-password-file", c.passwordFile)
				cmd := exec.CommandContext(ctx, filepath.Join(bin, name), full...)
				cmd.Env = append(os.Environ(), "TRIBUTARY_KAFKA_SASL_PASSWORD=", "TRIBUTARY_CLICKHOUSE_PASSWORD=",
					"TRIBUTARY_PG_DSN="+s.ShardDSNs[0])
				out, err := cmd.CombinedOutput()
				var exit *exec.ExitError
				if !errors.As(err, &exit) || exit.ExitCode() != 1 {
					t.Fatalf("want exit status 1, got %v\n%s", err, out)
				}
				for _, w := range []string{s.Brokers[0], "user " + s.Security.SASLUser, c.want} {
					if !strings.Contains(string(out), w) {
						t.Errorf("output does not say %q:\n%s", w, out)
					}
				}
				if strings.Contains(string(out), s.Password) {
					t.Errorf("output shows the password:\n%s", out)
				}
			})
		}
	}
}
