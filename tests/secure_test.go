package tests

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/api"
	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/query"
	"github.com/tributary/tributary/internal/reader"
	"github.com/tributary/tributary/internal/servertls"
	"github.com/tributary/tributary/internal/verify"
)

// secureStack is what the TLS tests need of the stack: its CA, the
// ClickHouse TLS port and the loader's and the reader's users.
type secureStack struct {
	*Stack
	CAFile                     string
	CHTLSAddr                  string
	LoaderUser, LoaderPassword string
	ReaderUser, ReaderPassword string
}

func loadSecureStack(t *testing.T) *secureStack {
	t.Helper()
	st := loadStack(t)
	s := &secureStack{Stack: st, CAFile: st.Env["TRIBUTARY_STACK_CA_FILE"], CHTLSAddr: st.Env["TRIBUTARY_CLICKHOUSE_TLS_ADDR"],
		LoaderUser: st.Env["TRIBUTARY_CLICKHOUSE_LOADER_USER"], ReaderUser: st.Env["TRIBUTARY_CLICKHOUSE_READER_USER"]}
	if s.CAFile == "" || s.CHTLSAddr == "" || s.LoaderUser == "" || s.ReaderUser == "" {
		t.Fatal("stack.env has no TLS settings: restart the stack with this checkout's deploy/local/stack.sh")
	}
	var err error
	if s.LoaderPassword, err = chstore.Password("", st.Env["TRIBUTARY_CLICKHOUSE_LOADER_PASSWORD_FILE"]); err != nil {
		t.Fatal(err)
	}
	if s.ReaderPassword, err = chstore.Password("", st.Env["TRIBUTARY_CLICKHOUSE_READER_PASSWORD_FILE"]); err != nil {
		t.Fatal(err)
	}
	return s
}

// verifyFullDSN is dsn with sslmode=verify-full against caFile.
func verifyFullDSN(dsn, caFile string) string {
	return strings.Replace(dsn, "sslmode=disable", "sslmode=verify-full&sslrootcert="+caFile, 1)
}

// otherCA writes a CA certificate that signed nothing of the stack's.
func otherCA(t *testing.T) string {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "not the stack's CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "other-ca.crt")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestClickHouseTLSRefusals: over the TLS port, a CA that did not sign the
// server's certificate and a wrong password are refused at once, by the
// loader's open and by the API's lazy one alike, with an error naming the
// address and what failed and never the password; the plain port is not
// mistaken for a TLS one.
func TestClickHouseTLSRefusals(t *testing.T) {
	s := loadSecureStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	good := chstore.TLSOptions{CAFile: s.CAFile}
	conn, err := chstore.Dial(ctx, chstore.DialOptions{Addr: s.CHTLSAddr, Username: s.LoaderUser, Password: s.LoaderPassword, TLS: good})
	if err != nil {
		t.Fatalf("TLS dial with the stack's CA: %v", err)
	}
	conn.Close()

	cases := []struct {
		name string
		o    chstore.DialOptions
		want []string
	}{
		{"wrong CA", chstore.DialOptions{Addr: s.CHTLSAddr, Username: s.LoaderUser, Password: s.LoaderPassword,
			TLS: chstore.TLSOptions{CAFile: otherCA(t)}}, []string{s.CHTLSAddr, "TLS handshake failed", "unknown authority"}},
		{"wrong password", chstore.DialOptions{Addr: s.CHTLSAddr, Username: s.LoaderUser, Password: s.LoaderPassword + "x", TLS: good},
			[]string{s.CHTLSAddr, "the server refused", s.LoaderUser}},
		{"TLS to the plain port", chstore.DialOptions{Addr: s.ClickHouseAddr, Username: s.LoaderUser, Password: s.LoaderPassword, TLS: good},
			[]string{s.ClickHouseAddr, "TLS handshake failed"}},
		{"wrong server name", chstore.DialOptions{Addr: s.CHTLSAddr, Username: s.LoaderUser, Password: s.LoaderPassword,
			TLS: chstore.TLSOptions{CAFile: s.CAFile, ServerName: "clickhouse.example"}}, []string{s.CHTLSAddr, "TLS handshake failed"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			check := func(what string, err error) {
				t.Helper()
				if err == nil {
					t.Fatalf("%s: accepted", what)
				}
				t.Logf("%s: %v", what, err)
				if errors.Is(err, chstore.ErrNotReachable) {
					t.Fatalf("%s: taken for a server not up yet (would be retried): %v", what, err)
				}
				for _, w := range c.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s: error %q does not say %q", what, err, w)
					}
				}
				if strings.Contains(err.Error(), s.LoaderPassword) {
					t.Errorf("%s: error shows the password: %q", what, err)
				}
				if !chstore.Refused(err) {
					t.Errorf("%s: not a refusal, so OpenWait would retry it forever: %v", what, err)
				}
			}
			_, err := chstore.OpenWait(ctx, chstore.Options{Addr: c.o.Addr, Database: "tributary", Username: c.o.Username,
				Password: c.o.Password, TLS: c.o.TLS}, nil)
			check("loader open", err)
			_, err = query.Open(ctx, "tributary", c.o)
			check("API open", err)
		})
	}
}

// TestClickHouseReaderUserCannotWrite: the stack's reader user (the API's
// and the verifier's) may read but every write and DDL through its
// connection is refused, even with the client asking for readonly = 0.
func TestClickHouseReaderUserCannotWrite(t *testing.T) {
	s := loadSecureStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := "sec_" + randSuffix()
	admin, err := chstore.Open(ctx, chstore.Options{Addr: s.ClickHouseAddr, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Conn().Exec(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+db) //nolint:errcheck // cleanup
	if err := admin.Conn().Exec(ctx, "CREATE TABLE "+db+".t (a UInt8) ENGINE = MergeTree ORDER BY a"); err != nil {
		t.Fatal(err)
	}
	conn, err := chstore.Dial(ctx, chstore.DialOptions{Addr: s.CHTLSAddr, Username: s.ReaderUser, Password: s.ReaderPassword,
		TLS: chstore.TLSOptions{CAFile: s.CAFile}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM "+db+".t").Scan(&n); err != nil {
		t.Fatalf("the reader user cannot read: %v", err)
	}
	for _, stmt := range []string{
		"INSERT INTO " + db + ".t SELECT 1",
		"ALTER TABLE " + db + ".t ADD COLUMN b UInt8",
		"ALTER TABLE " + db + ".t DELETE WHERE a = 1",
		"CREATE TABLE " + db + ".u (a UInt8) ENGINE = Memory",
		"DROP TABLE " + db + ".t",
		"OPTIMIZE TABLE " + db + ".t FINAL",
	} {
		err := conn.Exec(ctx, stmt)
		var exc *clickhouse.Exception
		if !errors.As(err, &exc) || exc.Code != 164 { // READONLY
			t.Errorf("%s: want refused in readonly mode (code 164), got %v", stmt, err)
		}
	}
	err = conn.Exec(clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"readonly": 0})), "INSERT INTO "+db+".t SELECT 1")
	if err == nil {
		t.Error("readonly = 0 from the client let the reader user write")
	}
	if err := admin.Conn().QueryRow(ctx, "SELECT count() FROM "+db+".t").Scan(&n); err != nil || n != 0 {
		t.Errorf("table has %d rows after the refused writes (err %v), want 0", n, err)
	}
}

// TestPostgresTLSWrongCA: a reader and the verifier with sslmode=verify-full
// and a CA that did not sign the shard's certificate are refused at start,
// naming the shard, and the DSN's password is not in the error.
func TestPostgresTLSWrongCA(t *testing.T) {
	s := loadSecureStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	shard := 1 % len(s.ReplDSNs)
	dsn := verifyFullDSN(s.ReplDSNs[shard], otherCA(t))
	password := strings.SplitN(strings.SplitN(strings.TrimPrefix(dsn, "postgres://"), "@", 2)[0], ":", 2)[1]
	check := func(what string, err error, name string) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: a wrong CA was accepted", what)
		}
		t.Logf("%s: %v", what, err)
		for _, w := range []string{name, "unknown authority"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", what, err, w)
			}
		}
		if strings.Contains(err.Error(), password) {
			t.Errorf("%s: error shows the password: %q", what, err)
		}
	}
	cfg := reader.Config{Shard: shard, DSN: dsn, Slot: "sec_" + randSuffix(), Publication: "sec_" + randSuffix(),
		Brokers: s.KafkaBrokers, Partitions: 1, StateTopic: "sec.state"}
	err := reader.New(cfg, slog.New(slog.NewTextHandler(testWriter{t}, nil)), prometheus.NewRegistry()).Run(ctx)
	check("reader", err, fmt.Sprintf("shard %d", shard))

	p := setupPipeline(t, []int{shard}, nil, true)
	rep, err := verify.Run(ctx, verify.Config{
		Shards: []verify.Shard{{ID: shard, DSN: dsn}}, Tables: p.tables, APIURL: p.api.URL,
		ClickHouse: verify.ClickHouse{Addr: s.ClickHouseAddr, Database: p.chDB}, Wait: time.Second,
		Concurrency: 1, ShardTimeout: 10 * time.Second, Log: p.log,
	})
	if rep != nil && rep.Passed {
		t.Fatal("verify passed with a wrong CA")
	}
	check("verify", err, fmt.Sprintf("shard %d", shard))
}

// TestSecurePipeline runs readers → Kafka → loader → ClickHouse → API with
// TLS and authentication on the PostgreSQL, Kafka and ClickHouse hops: the
// readers with sslmode=verify-full, readers and loader through Kafka's
// SASL_SSL listener (TLS verified against the stack's CA, SCRAM-SHA-512),
// the loader as the loader user over ClickHouse's TLS port, the API and
// the verifier as the read-only reader user over TLS, and the API serving
// HTTPS (the product's reloading TLS server, the stack's certificate) to
// bearer tokens with per-route scopes. (Reloads, client certificates and
// rate limits of the API: TestAPIOverHTTPS.)
// Every read of the API answers as it does in plain text, a request
// without its scope is refused, and the API's connection cannot write.
func TestSecurePipeline(t *testing.T) {
	s := loadSecureStack(t)
	ks := loadKafkaSecureStack(t)
	for i := range s.ShardDSNs {
		s.ShardDSNs[i] = verifyFullDSN(s.ShardDSNs[i], s.CAFile)
	}
	p := setupPipelineOn(t, s.Stack, []int{0, 1}, ks.Brokers, true, "orders_", `{"topic_prefix":"e2e_%[1]s.",
		"tables":[{"name":%[2]q,"id_column":"id","id_layout":"seed000","shard_key":"account_id",
		  "search":{"time_column":"placed_at","workspace_column":"account_id"}}],
		"revenue":{"table":%[2]q,"amount_column":"total","currency_column":"currency_code","time_column":"placed_at",
		  "status_column":"state","workspace_column":"account_id","count_statuses":["paid"],"refund_statuses":["refunded"],
		  "refunded_amount_column":"refunded"}}`, revOrdersDDL)
	p.kafkaSec = ks.Security
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	tlsOpts := chstore.TLSOptions{CAFile: s.CAFile}

	// The loader writes as the loader user over TLS.
	plain := p.store
	var err error
	p.store, err = chstore.Open(ctx, chstore.Options{Addr: s.CHTLSAddr, Database: p.chDB,
		Username: s.LoaderUser, Password: s.LoaderPassword, TLS: tlsOpts})
	if err != nil {
		t.Fatalf("loader store over TLS: %v", err)
	}
	plain.Close()
	// The API reads as the reader user over TLS.
	q, err := query.Open(ctx, p.chDB, chstore.DialOptions{Addr: s.CHTLSAddr, Username: s.ReaderUser,
		Password: s.ReaderPassword, TLS: tlsOpts})
	if err != nil {
		t.Fatalf("API over TLS: %v", err)
	}
	defer q.Close()
	p.api.Close()
	opsToken, supportToken, verifyToken := randomToken(), randomToken(), randomToken()
	tokens, err := api.ParseTokens("ops:"+opsToken+":documents:read,revenue:read,anomalies:read\n"+
		"support:"+supportToken+":documents:read\n"+
		"verify:"+verifyToken+":rows:read:"+p.table()+",revenue:read\n", false)
	if err != nil {
		t.Fatal(err)
	}
	stackTLS := filepath.Dir(s.CAFile)
	certs, err := servertls.New(servertls.Options{CertFile: filepath.Join(stackTLS, "server.crt"),
		KeyFile: filepath.Join(stackTLS, "server.key")}, p.log, prometheus.NewRegistry())
	if err != nil {
		t.Fatalf("the API's TLS: %v", err)
	}
	p.api = httptest.NewUnstartedServer(api.New(api.Config{Tables: p.tables, DocumentsTable: p.table(),
		QueryTimeout: 10 * time.Second, Tokens: tokens}, q, p.log, prometheus.NewRegistry()))
	p.api.Listener = tls.NewListener(p.api.Listener, certs.Config())
	p.api.Start()
	p.api.URL = "https://" + p.api.Listener.Addr().String()
	roots := x509.NewCertPool()
	if pem, err := os.ReadFile(s.CAFile); err != nil || !roots.AppendCertsFromPEM(pem) {
		t.Fatalf("the stack's CA %s: %v", s.CAFile, err)
	}
	p.apiClient = bearerClient(roots, opsToken)

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	for _, sh := range p.shards {
		p.startReader(runCtx, sh)
	}
	p.startMeteredLoader(runCtx, "l1")

	rng := mrand.New(mrand.NewPCG(2026, 12))
	ids := map[int][]int64{}
	for _, sh := range p.shards {
		ids[sh] = p.insertRevenueOrders(ctx, sh, revGenOrders(rng, 200))
	}
	p.waitRevenueFresh(ctx, p.revenueWALPositions(ctx))
	p.compareRevenue(ctx, p.tables.Revenue, revFrom, revTo, []string{"day"}, nil, nil, nil)

	id := ids[1][7]
	status, doc := p.getDoc(ctx, id)
	if status != http.StatusOK || len(doc.Copies) != 1 || doc.Copies[0].Shard != 1 {
		t.Fatalf("GET document %d: status %d, answer %+v; want one copy on shard 1", id, status, doc)
	}
	for _, path := range []string{"/v1/documents?limit=5", "/v1/shards", "/v1/anomalies/duplicates", "/v1/anomalies/misplaced"} {
		status, body := getBody(ctx, t, p.apiClient, p.api.URL+path)
		if status != http.StatusOK {
			t.Errorf("GET %s: status %d: %s", path, status, body)
			continue
		}
		var v map[string]any
		if err := json.Unmarshal(body, &v); err != nil {
			t.Errorf("GET %s: not JSON: %v", path, err)
		}
		if docs, _ := v["documents"].([]any); path == "/v1/documents?limit=5" && len(docs) == 0 {
			t.Errorf("GET %s: no document in %s", path, body)
		}
		if shards, _ := v["shards"].([]any); path == "/v1/shards" && len(shards) == 0 {
			t.Errorf("GET %s: no shard in %s", path, body)
		}
	}

	// Without a token, with a token lacking the route's scope, and in plain
	// HTTP, the API refuses.
	revenuePath := "/v1/revenue?from=" + revFrom.Format("2006-01-02") + "&to=" + revTo.Format("2006-01-02") + "&group_by=day"
	for _, c := range []struct {
		what   string
		client *http.Client
		want   int
	}{
		{"no token", httpsClient(roots, nil), http.StatusUnauthorized},
		{"the support token (documents:read only)", bearerClient(roots, supportToken), http.StatusForbidden},
		{"the ops token", p.apiClient, http.StatusOK},
	} {
		if status, body := getBody(ctx, t, c.client, p.api.URL+revenuePath); status != c.want {
			t.Errorf("GET /v1/revenue with %s: status %d, want %d: %s", c.what, status, c.want, body)
		}
	}
	plainURL := strings.Replace(p.api.URL, "https://", "http://", 1) + "/v1/shards"
	if status, body := getBody(ctx, t, http.DefaultClient, plainURL); status == http.StatusOK {
		t.Errorf("GET %s in plain HTTP answered 200: %s", plainURL, body)
	}

	rep := p.runVerifyWith(ctx, func(c *verify.Config) {
		c.ClickHouse = verify.ClickHouse{Addr: s.CHTLSAddr, Database: p.chDB, User: s.ReaderUser, Password: s.ReaderPassword, TLS: tlsOpts}
		c.APIToken, c.APICAFile = verifyToken, s.CAFile
	})
	if !rep.Passed {
		t.Fatalf("verify over TLS failed: %+v", rep.Differences)
	}
	if err := p.failed(); err != nil {
		t.Fatal(err)
	}

	// The API's own connection is refused any write.
	conn, err := chstore.Dial(ctx, chstore.DialOptions{Addr: s.CHTLSAddr, Username: s.ReaderUser, Password: s.ReaderPassword, TLS: tlsOpts})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.Exec(ctx, fmt.Sprintf("ALTER TABLE `%s`.`%s` DELETE WHERE 1", p.chDB, p.table())); err == nil {
		t.Error("the API's user could ALTER a replicated table")
	}
}

// getBody GETs url with c; a request that got no HTTP answer at all (a
// refused handshake) is status 0.
func getBody(ctx context.Context, t *testing.T, c *http.Client, url string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := c.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	return resp.StatusCode, b
}

// TestClickHouseTLSCommandsRefuseAtStart: the loader, the API and the
// verifier, given the stack's TLS port with a CA that did not sign its
// certificate, or a wrong password from --clickhouse-password-file, exit at
// start (status 1; the verifier's "could not verify" is 2) with a message naming the address and what failed, and never
// print the password.
func TestClickHouseTLSCommandsRefuseAtStart(t *testing.T) {
	s := loadSecureStack(t)
	bin := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", bin+"/", "../cmd/loader", "../cmd/api", "../cmd/verify").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	wrongPassword := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(wrongPassword, []byte(s.LoaderPassword+"-wrong\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rightPassword := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(rightPassword, []byte(s.LoaderPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badCA := otherCA(t)
	commands := map[string][]string{
		"loader": {"--kafka-brokers", strings.Join(s.KafkaBrokers, ","), "--tables", "../deploy/local/tables.json", "--metrics-addr", ""},
		"api":    {"--tables", "../deploy/local/tables.json", "--listen", "127.0.0.1:0"},
		"verify": {"--tables", "../deploy/local/tables.json", "--fleet", s.Env["TRIBUTARY_FLEET"]},
	}
	cases := []struct {
		name, ca, passwordFile string
		want                   string
	}{
		{"wrong CA", badCA, rightPassword, "TLS handshake failed"},
		{"wrong password", s.CAFile, wrongPassword, "the server refused"},
	}
	for name, args := range commands {
		for _, c := range cases {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				cmd := exec.CommandContext(ctx, filepath.Join(bin, name), append(args, "--clickhouse-addr", s.CHTLSAddr,
					"--clickhouse-user", s.LoaderUser, "--clickhouse-password-file", c.passwordFile, "--clickhouse-ca-file", c.ca)...)
				cmd.Env = append(os.Environ(), "TRIBUTARY_CLICKHOUSE_PASSWORD=")
				for k, v := range s.Env {
					if strings.HasPrefix(k, "TRIBUTARY_SHARD_") {
						cmd.Env = append(cmd.Env, k+"="+v)
					}
				}
				out, err := cmd.CombinedOutput()
				var exit *exec.ExitError
				want := 1
				if name == "verify" {
					want = 2
				}
				if !errors.As(err, &exit) || exit.ExitCode() != want {
					t.Fatalf("want exit status %d, got %v\n%s", want, err, out)
				}
				for _, w := range []string{s.CHTLSAddr, c.want} {
					if !strings.Contains(string(out), w) {
						t.Errorf("output does not say %q:\n%s", w, out)
					}
				}
				if strings.Contains(string(out), s.LoaderPassword) {
					t.Errorf("output shows the password:\n%s", out)
				}
			})
		}
	}
}

// bearerClient is an HTTPS client trusting roots that sends token as a
// bearer token with every request.
func bearerClient(roots *x509.CertPool, token string) *http.Client {
	c := httpsClient(roots, nil)
	c.Transport = bearer{token: token, next: c.Transport}
	return c
}

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}
