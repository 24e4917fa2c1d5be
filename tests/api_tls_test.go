package tests

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary/tributary/internal/testcert"
)

// proc is a Tributary binary the test runs as a process, its output
// (stdout and stderr) in a log file.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan error
}

// buildBinaries builds the named cmd/ binaries into a temporary directory.
func buildBinaries(t *testing.T, names ...string) string {
	t.Helper()
	bin := t.TempDir()
	args := []string{"build", "-o", bin + "/"}
	for _, n := range names {
		args = append(args, "../cmd/"+n)
	}
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startProc runs exe with args and env (and of the test's own environment
// only PATH and HOME: every setting is explicit), logging into
// logDir/name.log; it is stopped (SIGTERM, then killed) at cleanup.
func startProc(t *testing.T, exe, logDir, name string, env []string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait(); f.Close() }()
	t.Cleanup(func() { p.stop(t) })
	return p
}

// stop ends the process (SIGTERM, killed after 20 s) and waits for it.
func (p *proc) stop(t *testing.T) {
	if p.cmd.ProcessState != nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // it may be gone
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Logf("%s: not stopped by SIGTERM after 20 s, killed", p.name)
		p.cmd.Process.Kill() //nolint:errcheck // it may be gone
		<-p.done
	}
}

// output is everything the process wrote so far.
func (p *proc) output(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(p.log)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitLog waits until the process's output matches re and returns the
// first match's submatches; it fails if the process exits first.
func (p *proc) waitLog(ctx context.Context, t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	for {
		if m := re.FindStringSubmatch(p.output(t)); m != nil {
			return m
		}
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("%s exited (%v) before logging %s:\n%s", p.name, err, re, p.output(t))
		case <-ctx.Done():
			t.Fatalf("%s did not log %s: %v\n%s", p.name, re, ctx.Err(), p.output(t))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// randomToken is a bearer token of 48 hex digits.
func randomToken() string {
	b := make([]byte, 24)
	rand.Read(b) //nolint:errcheck // never fails
	return hex.EncodeToString(b)
}

// httpsClient trusts roots and shows cert (if any); every request is a new
// connection, so a reloaded server certificate is seen at once.
func httpsClient(roots *x509.CertPool, cert *tls.Certificate) *http.Client {
	cfg := &tls.Config{RootCAs: roots}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
}

// answer is one response: status, headers, body, and the server
// certificate's serial number.
type answer struct {
	status int
	header http.Header
	body   string
	serial string
}

func call(ctx context.Context, c *http.Client, url, token string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return answer{}, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header, body: string(b)}
	if resp.TLS != nil && len(resp.TLS.PeerCertificates) > 0 {
		a.serial = resp.TLS.PeerCertificates[0].SerialNumber.String()
	}
	return a, err
}

// twoTablesJSON is a table config of the pipeline's documents table and a
// second table, inv_<suffix>, of the same shape.
const twoTablesJSON = `{"topic_prefix":"e2e_%[1]s.","tables":[
	{"name":%[2]q,"id_column":"id","id_layout":"seed000","shard_key":"workspace_id"},
	{"name":"inv_%[1]s","id_column":"id","id_layout":"seed000","shard_key":"workspace_id"}]}`

// TestAPIOverHTTPS runs the api binary over HTTPS with client certificates
// and tokens against the stack's ClickHouse (TLS, the read-only user), fed
// by a reader and a loader: the stack's server certificate is served and
// then swapped for another without a restart (a bad replacement keeps the
// one in force); clients without a valid certificate are refused at the
// handshake; a documents:read token reads documents but not the other
// table, whose rows:read token reads it; a reloaded tokens file takes
// effect (a new token in, a removed one out) and a malformed one is refused
// naming its line, the tokens in force staying; a token over its rate gets
// 429 with Retry-After; the access log names the tokens and client
// certificate and shows no token.
func TestAPIOverHTTPS(t *testing.T) {
	s := loadSecureStack(t)
	bin := buildBinaries(t, "api")
	p := setupPipelineOn(t, s.Stack, []int{0}, nil, true, "docs_", twoTablesJSON, docsDDL)
	inv := "inv_" + p.suffix
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p.exec(ctx, 0, fmt.Sprintf(docsDDL, inv))
	runCtx, stop := context.WithCancel(ctx)
	t.Cleanup(func() {
		stop()
		p.wg.Wait()
		p.exec(context.Background(), 0, "DROP TABLE IF EXISTS "+pgx.Identifier{inv}.Sanitize())
	})
	p.startReader(runCtx, 0)
	p.startLoader(runCtx, "l1")

	dir := t.TempDir()
	tablesFile := filepath.Join(dir, "tables.json")
	if err := os.WriteFile(tablesFile, []byte(fmt.Sprintf(twoTablesJSON, p.suffix, p.table())), 0o644); err != nil {
		t.Fatal(err)
	}
	// The stack's server certificate (127.0.0.1) is what the API serves first.
	stackTLS := filepath.Dir(s.CAFile)
	certFile, keyFile := filepath.Join(dir, "api.crt"), filepath.Join(dir, "api.key")
	for src, dst := range map[string]string{filepath.Join(stackTLS, "server.crt"): certFile, filepath.Join(stackTLS, "server.key"): keyFile} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatalf("the stack's server certificate: %v", err)
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	stackCA, err := os.ReadFile(s.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(stackCA)
	rotated := testcert.NewCA(t, "rotated server CA")
	roots.AddCert(rotated.Cert)
	clients, stranger := testcert.NewCA(t, "API clients CA"), testcert.NewCA(t, "stranger CA")
	clientCAFile := filepath.Join(dir, "clients-ca.pem")
	if err := os.WriteFile(clientCAFile, clients.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	appCert := clients.Client(t, "support-app").Pair(t)
	c := httpsClient(roots, &appCert)

	tok := map[string]string{"support": randomToken(), "finance": randomToken(), "hammer": randomToken(), "newcomer": randomToken()}
	tokensFile := filepath.Join(dir, "tokens")
	writeTokensFile := func(lines ...string) {
		t.Helper()
		if err := os.WriteFile(tokensFile, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeTokensFile("support:"+tok["support"]+":documents:read", "finance:"+tok["finance"]+":rows:read:"+inv,
		"hammer:"+tok["hammer"]+":documents:read")

	api := startProc(t, filepath.Join(bin, "api"), dir, "api", []string{
		"TRIBUTARY_CLICKHOUSE_ADDR=" + s.CHTLSAddr, "TRIBUTARY_CLICKHOUSE_CA_FILE=" + s.CAFile,
		"TRIBUTARY_CLICKHOUSE_USER=" + s.ReaderUser, "TRIBUTARY_CLICKHOUSE_PASSWORD_FILE=" + s.Env["TRIBUTARY_CLICKHOUSE_READER_PASSWORD_FILE"],
		"TRIBUTARY_API_TOKENS_FILE=" + tokensFile,
	}, "--tables", tablesFile, "--documents-table", p.table(), "--clickhouse-db", p.chDB, "--listen", "127.0.0.1:0",
		"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-client-ca-file", clientCAFile,
		"--tls-reload-interval", "100ms", "--tokens-reload-interval", "100ms", "--require-auth",
		"--token-rate", "1", "--token-burst", "4", "--query-timeout", "40s")
	addr := api.waitLog(ctx, t, regexp.MustCompile(`msg="api listening" addr=(\S+) scheme=https client_certificates=true`))[1]
	base := "https://" + addr

	// Plain HTTP is not served on the HTTPS port.
	if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP answered 200 on the HTTPS listener")
		}
	}

	// Clients without a valid certificate never get to HTTP.
	expiredCert := clients.Issue(t, "support-app", true, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)).Pair(t)
	strangerCert := stranger.Client(t, "support-app").Pair(t)
	for name, cl := range map[string]*http.Client{"no certificate": httpsClient(roots, nil),
		"an expired certificate": httpsClient(roots, &expiredCert), "a certificate of another CA": httpsClient(roots, &strangerCert)} {
		if a, err := call(ctx, cl, base+"/healthz", ""); err == nil {
			t.Errorf("a client with %s got an answer: %d %s", name, a.status, a.body)
		} else {
			t.Logf("a client with %s: %v", name, err)
		}
	}
	api.waitLog(ctx, t, regexp.MustCompile(`TLS handshake error from 127\.0\.0\.1:\d+: .*expired`))

	first, err := call(ctx, c, base+"/healthz", "")
	if err != nil || first.status != http.StatusOK {
		t.Fatalf("healthz over HTTPS with a client certificate: %+v, %v", first, err)
	}
	if a, err := call(ctx, c, base+"/v1/shards", ""); err != nil || a.status != http.StatusUnauthorized ||
		!strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("/v1/shards without a token: %+v, %v; want 401 with WWW-Authenticate: Bearer", a, err)
	}

	// Scopes end to end: a document and a row of the other table, each
	// read after its write.
	docID, docLSN := p.writeDoc(ctx, 0, fmt.Sprintf("INSERT INTO %s (workspace_id, title) VALUES (3, 'tls doc') RETURNING id",
		pgx.Identifier{p.table()}.Sanitize()))
	invID, invLSN := p.writeDoc(ctx, 0, fmt.Sprintf("INSERT INTO %s (workspace_id, title) VALUES (3, 'tls invoice') RETURNING id",
		pgx.Identifier{inv}.Sanitize()))
	expect := func(what, path, token string, status int, contains string) {
		t.Helper()
		a, err := call(ctx, c, base+path, token)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if a.status != status || !strings.Contains(a.body, contains) {
			t.Errorf("%s: GET %s: %d %s; want %d with %q", what, path, a.status, a.body, status, contains)
		}
	}
	expect("documents:read reads a document", fmt.Sprintf("/v1/documents/%d?after=0:%s&wait=30s", docID, docLSN), tok["support"],
		http.StatusOK, "tls doc")
	expect("rows:read:<inv> reads its table", fmt.Sprintf("/v1/tables/%s/rows/%d?after=0:%s&wait=30s", inv, invID, invLSN), tok["finance"],
		http.StatusOK, "tls invoice")
	expect("documents:read cannot read the other table", fmt.Sprintf("/v1/tables/%s/rows/%d", inv, invID), tok["support"],
		http.StatusForbidden, "rows:read:"+inv)
	expect("rows:read:<inv> cannot read documents", fmt.Sprintf("/v1/documents/%d", docID), tok["finance"],
		http.StatusForbidden, "documents:read")
	expect("an unknown token", "/v1/shards", randomToken(), http.StatusUnauthorized, "not valid")

	// A token over its rate: 429 with Retry-After (4 at once, 1/s).
	limited := false
	for i := 0; i < 200 && !limited; i++ {
		a, err := call(ctx, c, base+"/v1/shards", tok["hammer"])
		if err != nil {
			t.Fatal(err)
		}
		switch a.status {
		case http.StatusOK:
		case http.StatusTooManyRequests:
			limited = true
			if ra := a.header.Get("Retry-After"); ra == "" || ra == "0" || !strings.Contains(a.body, "rate_limited") {
				t.Errorf("429 with Retry-After %q and body %s; want a positive Retry-After and rate_limited", ra, a.body)
			}
		default:
			t.Fatalf("hammer: %d %s", a.status, a.body)
		}
	}
	if !limited {
		t.Error("200 requests of a token limited to 1/s (burst 4) were never refused")
	}

	// A reloaded tokens file: newcomer in, finance out, without a restart.
	writeTokensFile("support:"+tok["support"]+":documents:read", "newcomer:"+tok["newcomer"]+":"+"rows:read:"+inv)
	for {
		a, err := call(ctx, c, base+"/v1/shards", tok["newcomer"])
		if err != nil {
			t.Fatal(err)
		}
		if a.status == http.StatusOK {
			break
		}
		if a.status != http.StatusUnauthorized || ctx.Err() != nil {
			t.Fatalf("newcomer before the reload: %d %s", a.status, a.body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	expect("a token removed from the file", "/v1/shards", tok["finance"], http.StatusUnauthorized, "not valid")
	expect("the reloaded token's scope", fmt.Sprintf("/v1/tables/%s/rows/%d", inv, invID), tok["newcomer"], http.StatusOK, "tls invoice")

	// A malformed file is refused, naming its line and not the token on
	// it, and the tokens in force stay.
	tok["malformed"] = randomToken()
	writeTokensFile("support:"+tok["support"]+":documents:read", "newcomer:"+tok["newcomer"]+":"+"rows:read:"+inv,
		"intruder "+tok["malformed"]+" admin")
	api.waitLog(ctx, t, regexp.MustCompile(`tokens reload refused; the tokens in force stay.*`+regexp.QuoteMeta(tokensFile)+`.*line 3`))
	expect("a token in force after a malformed reload", fmt.Sprintf("/v1/tables/%s/rows/%d", inv, invID), tok["newcomer"],
		http.StatusOK, "tls invoice")
	expect("the malformed line's token", "/v1/shards", tok["malformed"], http.StatusUnauthorized, "not valid")

	// The server certificate swapped for one of another CA, no restart.
	next := rotated.Server(t, "api rotated")
	next.Write(t, certFile, keyFile)
	swapped := first
	for swapped.serial == first.serial && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		if swapped, err = call(ctx, c, base+"/healthz", ""); err != nil && ctx.Err() == nil {
			t.Fatal(err)
		}
	}
	if want := next.Pair(t).Leaf.SerialNumber.String(); swapped.serial != want {
		t.Fatalf("after the swap the server shows certificate %s, want the new one %s", swapped.serial, want)
	}
	// An expired replacement is refused and the one in force stays.
	rotated.Issue(t, "api expired", false, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)).Write(t, certFile, keyFile)
	api.waitLog(ctx, t, regexp.MustCompile(`TLS reload refused; the certificate in force stays.*expired on`))
	if a, err := call(ctx, c, base+"/healthz", ""); err != nil || a.serial != swapped.serial {
		t.Errorf("after an expired replacement: %+v, %v; want the swapped certificate %s still", a, err, swapped.serial)
	}

	out := api.output(t)
	for _, name := range []string{"support", "finance", "hammer", "newcomer"} {
		if !strings.Contains(out, "token="+name) {
			t.Errorf("the access log never names token %s", name)
		}
	}
	if !strings.Contains(out, `client_cert="CN=support-app"`) {
		t.Error("the access log does not name the client certificate")
	}
	for name, v := range tok {
		if strings.Contains(out, v) {
			t.Errorf("the API's log shows the token of %s", name)
		}
	}
	if err := p.failed(); err != nil {
		t.Fatal(err)
	}
}

// TestAPIRefusesBadTLSAndTokensAtStart: the api binary, given an expired
// certificate, a key of another certificate, a client CA file without a
// certificate, or a tokens file with a malformed line, exits at start with
// status 1, naming the file and what is wrong and showing no key or token;
// a certificate without its key is a usage error (status 2). Nothing here
// reaches ClickHouse.
func TestAPIRefusesBadTLSAndTokensAtStart(t *testing.T) {
	bin := buildBinaries(t, "api")
	dir := t.TempDir()
	ca := testcert.NewCA(t, "ops CA")
	good, other := ca.Server(t, "api"), ca.Server(t, "other")
	expired := ca.Issue(t, "api", false, time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour))
	f := func(name string, b []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	goodCert, goodKey, otherKey := f("api.crt", good.CertPEM), f("api.key", good.KeyPEM), f("other.key", other.KeyPEM)
	expiredCert, expiredKey := f("expired.crt", expired.CertPEM), f("expired.key", expired.KeyPEM)
	notCA := f("not-a-ca.pem", []byte("# a CA bundle should be here\n"))
	token := randomToken()
	tokens := f("tokens", []byte("ops:"+randomToken()+":admin\nsupport "+token+" documents:read\n"))
	secrets := []string{token, strings.Split(string(good.KeyPEM), "\n")[1], strings.Split(string(other.KeyPEM), "\n")[1],
		strings.Split(string(expired.KeyPEM), "\n")[1]}
	cases := []struct {
		name   string
		args   []string
		status int
		want   []string
	}{
		{"expired certificate", []string{"--tls-cert-file", expiredCert, "--tls-key-file", expiredKey}, 1,
			[]string{expiredCert, "expired on", `"CN=api"`}},
		{"key of another certificate", []string{"--tls-cert-file", goodCert, "--tls-key-file", otherKey}, 1,
			[]string{goodCert, otherKey, "private key does not match public key"}},
		{"client CA without certificates", []string{"--tls-cert-file", goodCert, "--tls-key-file", goodKey, "--tls-client-ca-file", notCA}, 1,
			[]string{notCA, "no PEM certificate"}},
		{"malformed token line", []string{"--tokens-file", tokens}, 1, []string{tokens, "line 2", "want name:token:scope1,scope2"}},
		{"certificate without key", []string{"--tls-cert-file", goodCert}, 2, []string{"--tls-cert-file and --tls-key-file go together"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(bin, "api"), append([]string{"--tables", "../deploy/local/tables.json",
				"--clickhouse-addr", "127.0.0.1:1", "--listen", "127.0.0.1:0"}, c.args...)...)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != c.status {
				t.Fatalf("want exit status %d, got %v\n%s", c.status, err, out)
			}
			for _, w := range c.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output does not say %q:\n%s", w, out)
				}
			}
			for _, sec := range secrets {
				if strings.Contains(string(out), sec) {
					t.Errorf("output shows a secret (%.8s...):\n%s", sec, out)
				}
			}
		})
	}
}
