package tests

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary/tributary/internal/testcert"
)

// pemBodyLines are the base64 lines of a PEM block: what of a key would
// show if it were logged.
func pemBodyLines(b []byte) []string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" && !strings.HasPrefix(l, "-----") {
			out = append(out, l)
		}
	}
	return out
}

// TestSecretsNotInLogsOrArgv runs readers → Kafka → loader → ClickHouse →
// API as processes with every secret the stack uses: the replication
// role's PostgreSQL password (in the reader's DSN, over verify-full TLS),
// the ClickHouse loader's password (environment) and reader's password
// (file), the Kafka SCRAM password (the reader's from the environment, the
// loader's from a file, over Kafka's SASL_SSL listener), API tokens
// (environment), the API's TLS key; it drives traffic,
// authorized and refused requests (a wrong token, a missing scope, a
// client without a certificate) and a clean shutdown, at debug level. No
// secret appears in any process's output, nor in its argv as ps shows it.
func TestSecretsNotInLogsOrArgv(t *testing.T) {
	s := loadSecureStack(t)
	ks := loadKafkaSecureStack(t)
	bin := buildBinaries(t, "cdc-reader", "loader", "api")
	p := setupPipelineOn(t, s.Stack, []int{0}, ks.Brokers, true, "docs_",
		`{"topic_prefix":"e2e_%[1]s.","tables":[{"name":%[2]q,"id_column":"id","id_layout":"seed000","shard_key":"workspace_id"}]}`, docsDDL)
	p.kafkaSec = ks.Security
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// As the stack does for its own tables (docs/configuration.md "PostgreSQL role"):
	// the replication role reads the table and owns the publication.
	pub := "e2e_" + p.suffix
	table := pgx.Identifier{p.table()}.Sanitize()
	p.exec(ctx, 0, "GRANT SELECT ON "+table+" TO tributary_repl")
	p.exec(ctx, 0, "CREATE PUBLICATION "+pub+" FOR TABLE "+table)
	p.exec(ctx, 0, "ALTER PUBLICATION "+pub+" OWNER TO tributary_repl")

	dir := t.TempDir()
	tablesFile := filepath.Join(dir, "tables.json")
	if err := os.WriteFile(tablesFile, []byte(fmt.Sprintf(`{"topic_prefix":"e2e_%[1]s.","tables":[{"name":%[2]q,"id_column":"id","id_layout":"seed000","shard_key":"workspace_id"}]}`,
		p.suffix, p.table())), 0o644); err != nil {
		t.Fatal(err)
	}
	replDSN := verifyFullDSN(s.ReplDSNs[0], s.CAFile)
	u, err := url.Parse(replDSN)
	if err != nil {
		t.Fatal(err)
	}
	pgPassword, _ := u.User.Password()
	ca := testcert.NewCA(t, "secrets test CA")
	server := ca.Server(t, "api")
	certFile, keyFile := filepath.Join(dir, "api.crt"), filepath.Join(dir, "api.key")
	server.Write(t, certFile, keyFile)
	clientCAFile := filepath.Join(dir, "clients.pem")
	if err := os.WriteFile(clientCAFile, ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	tokens := map[string]string{"support": randomToken(), "ops": randomToken()}
	wrongToken := randomToken()

	secrets := map[string]string{"PostgreSQL password of tributary_repl": pgPassword,
		"ClickHouse loader password": s.LoaderPassword, "ClickHouse reader password": s.ReaderPassword,
		"Kafka SASL password": ks.Password,
		"token support":       tokens["support"], "token ops": tokens["ops"], "a wrong token presented": wrongToken}
	for i, l := range pemBodyLines(server.KeyPEM) {
		secrets[fmt.Sprintf("the API's TLS key, line %d", i+1)] = l
	}
	for what, v := range secrets {
		if len(v) < 8 {
			t.Fatalf("%s is %d characters: too short to look for", what, len(v))
		}
	}

	kafka := []string{"--kafka-brokers", strings.Join(ks.Brokers, ","), "--kafka-ca-file", ks.Security.CAFile,
		"--kafka-sasl-user", ks.Security.SASLUser}
	debug := []string{"--log-level", "debug"}
	procs := []*proc{
		startProc(t, filepath.Join(bin, "cdc-reader"), dir, "cdc-reader", []string{"TRIBUTARY_PG_DSN=" + replDSN,
			"TRIBUTARY_KAFKA_SASL_PASSWORD=" + ks.Password},
			append(append(debug, kafka...), "--tables", tablesFile, "--shard", "0", "--slot", fmt.Sprintf("e2e_%s_0", p.suffix),
				"--publication", pub, "--state-topic", "e2e_"+p.suffix+".state", "--metrics-addr", "127.0.0.1:0")...),
		startProc(t, filepath.Join(bin, "loader"), dir, "loader", []string{
			"TRIBUTARY_CLICKHOUSE_ADDR=" + s.CHTLSAddr, "TRIBUTARY_CLICKHOUSE_CA_FILE=" + s.CAFile,
			"TRIBUTARY_CLICKHOUSE_USER=" + s.LoaderUser, "TRIBUTARY_CLICKHOUSE_PASSWORD=" + s.LoaderPassword},
			append(append(debug, kafka...), "--kafka-sasl-password-file", ks.Security.SASLPasswordFile,
				"--tables", tablesFile, "--group", "e2e_"+p.suffix, "--dlq-topic", "e2e_"+p.suffix+".dlq",
				"--clickhouse-db", p.chDB, "--metrics-addr", "127.0.0.1:0", "--batch-wait", "50ms")...),
		startProc(t, filepath.Join(bin, "api"), dir, "api", []string{
			"TRIBUTARY_CLICKHOUSE_ADDR=" + s.CHTLSAddr, "TRIBUTARY_CLICKHOUSE_CA_FILE=" + s.CAFile,
			"TRIBUTARY_CLICKHOUSE_USER=" + s.ReaderUser, "TRIBUTARY_CLICKHOUSE_PASSWORD_FILE=" + s.Env["TRIBUTARY_CLICKHOUSE_READER_PASSWORD_FILE"],
			"TRIBUTARY_API_TOKENS=support:" + tokens["support"] + ":documents:read;ops:" + tokens["ops"] + ":admin"},
			append(debug, "--tables", tablesFile, "--documents-table", p.table(), "--clickhouse-db", p.chDB, "--listen", "127.0.0.1:0", "--require-auth",
				"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-client-ca-file", clientCAFile, "--query-timeout", "40s")...),
	}
	api := procs[2]
	addr := api.waitLog(ctx, t, regexp.MustCompile(`msg="api listening" addr=(\S+) scheme=https`))[1]
	base := "https://" + addr

	// What ps shows of each process, while they run.
	pids := make([]string, len(procs))
	for i, pr := range procs {
		pids[i] = strconv.Itoa(pr.cmd.Process.Pid)
	}
	ps, err := exec.CommandContext(ctx, "ps", "-ww", "-o", "pid=,args=", "-p", strings.Join(pids, ",")).CombinedOutput()
	if err != nil {
		t.Fatalf("ps: %v\n%s", err, ps)
	}
	if n := len(strings.Split(strings.TrimSpace(string(ps)), "\n")); n != len(procs) {
		t.Fatalf("ps shows %d of the %d processes:\n%s", n, len(procs), ps)
	}

	clientCert := ca.Client(t, "client").Pair(t)
	c := httpsClient(testcert.Pool(ca), &clientCert)
	var lastID int64
	var lastLSN fmt.Stringer
	for i := range 20 {
		id, lsn := p.writeDoc(ctx, 0, "INSERT INTO "+table+" (workspace_id, title) VALUES ($1, 'secret test') RETURNING id", i%4)
		lastID, lastLSN = id, lsn
	}
	for _, r := range []struct {
		path, token string
		status      int
	}{
		{fmt.Sprintf("/v1/documents/%d?after=0:%s&wait=30s", lastID, lastLSN), tokens["support"], http.StatusOK},
		{"/v1/shards", tokens["ops"], http.StatusOK},
		{"/v1/revenue?from=2026-01-01&to=2026-02-01", tokens["support"], http.StatusForbidden},
		{"/v1/shards", wrongToken, http.StatusUnauthorized},
		{"/v1/shards?token=" + wrongToken, "", http.StatusUnauthorized},
	} {
		a, err := call(ctx, c, base+r.path, r.token)
		if err != nil {
			t.Fatal(err)
		}
		if a.status != r.status {
			t.Errorf("GET %s: %d %s; want %d", r.path, a.status, a.body, r.status)
		}
	}
	if _, err := call(ctx, httpsClient(testcert.Pool(ca), nil), base+"/healthz", ""); err == nil {
		t.Error("a client without a certificate got an answer")
	}
	api.waitLog(ctx, t, regexp.MustCompile(`TLS handshake error`))
	for _, pr := range procs {
		pr.stop(t)
	}

	for _, pr := range procs {
		out := pr.output(t)
		if !strings.Contains(out, "level=INFO") {
			t.Errorf("%s logged nothing: nothing to check", pr.name)
		}
		t.Logf("%s: %d lines of output checked", pr.name, strings.Count(out, "\n"))
		for what, v := range secrets {
			if strings.Contains(out, v) {
				t.Errorf("%s's output shows the %s:\n%s", pr.name, what, linesWith(out, v))
			}
		}
	}
	for what, v := range secrets {
		if strings.Contains(string(ps), v) {
			t.Errorf("ps shows the %s in a command line:\n%s", what, linesWith(string(ps), v))
		}
	}
	if err := p.failed(); err != nil {
		t.Fatal(err)
	}
}

// linesWith is the lines of text that contain v, v masked: the test's
// own output must not spread the secret either.
func linesWith(text, v string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, v) {
			out = append(out, strings.ReplaceAll(l, v, "<the secret>"))
		}
	}
	return strings.Join(out, "\n")
}
