// Command api serves Tributary's global view over HTTP/JSON: documents by
// id and by search, rows of any table, duplicate-id anomalies, revenue,
// per-shard freshness, metrics. It reads ClickHouse only and never touches
// a shard.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/tributary/tributary/internal/api"
	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/flagenv"
	"github.com/tributary/tributary/internal/fleet"
	"github.com/tributary/tributary/internal/query"
	"github.com/tributary/tributary/internal/servertls"
	"github.com/tributary/tributary/internal/tables"
	"github.com/tributary/tributary/internal/telemetry"
)

const usage = `api — Tributary's HTTP/JSON API over ClickHouse.

Routes (scope needed when tokens are configured):
  GET /v1/documents/{id}            a document by global id: every live copy with its shard,
                                    and what the id decodes to                 documents:read
  GET /v1/documents?workspace=&title=&from=&to=&limit=&cursor=
                                    search the documents table, newest first   documents:read
  GET /v1/tables/{table}/rows/{id}  any replicated table's row by id           rows:read:{table}
                                    (documents:read: the documents table's)
  GET /v1/anomalies/duplicates, /v1/anomalies/moves, /v1/anomalies/misplaced
                                    anomaly listings                           anomalies:read
                                                                               (or documents:read)
  GET /v1/revenue                   exact revenue report                       revenue:read
  GET /v1/shards                    per-shard freshness                        any token
  GET /                             status page (HTML; sections need their
                                    route's scope; --component-metrics)        any token
  GET /healthz, /readyz, /metrics, /v1/openapi.json                            open
Every read accepts after=S:X/Y (shard S, pg_current_wal_lsn() after the write's
commit; repeatable) and wait= (default 5s, at most 30s): read-your-writes.

Tokens: --tokens-file FILE or $TRIBUTARY_API_TOKENS (never argv), entries
name:token:scope1,scope2 (one per line; ';' also separates entries in the
environment). Scopes: documents:read, revenue:read, anomalies:read,
rows:read:<table> (a configured table), admin. Without tokens the
API is open (and says so at start-up and in /readyz); --require-auth refuses that.
The tokens file is reloaded on SIGHUP and when it changes (--tokens-reload-interval);
a malformed file is refused (logged, tributary_api_token_reloads_total{outcome="refused"})
and the tokens in force stay.

HTTPS: --tls-cert-file and --tls-key-file (PEM) serve HTTPS on --listen instead of
plain HTTP (the default). Both files are reloaded on SIGHUP and when they change
(--tls-reload-interval): renew the certificate by replacing them, no restart; a
replacement that does not load (a key of another certificate, expired) is logged
and counted (tributary_tls_reloads_total{outcome="refused"}), the one in force stays.
--tls-client-ca-file also asks every client for a certificate signed by one of its
authorities: a client without a valid one fails the TLS handshake.

Example:
  TRIBUTARY_CLICKHOUSE_ADDR=127.0.0.1:59000 api --tables deploy/local/tables.json --listen 127.0.0.1:8080
  ... api --tables deploy/local/tables.json --tokens-file tokens --require-auth \
      --tls-cert-file /etc/tributary/api.crt --tls-key-file /etc/tributary/api.key`

// Config is the API's whole configuration.
type Config struct {
	Listen         string
	TablesFile     string
	DocumentsTable string
	ClickHouse     chstore.Conn
	// ClickHouseCluster is the loaders' cluster: /readyz checks its nodes.
	ClickHouseCluster string
	// TLS serves HTTPS when set (servertls); TLSReload is how often its
	// files are checked for a change (0: only on SIGHUP).
	TLS          servertls.Options
	TLSReload    time.Duration
	QueryTimeout time.Duration
	// TokensFile and Tokens (environment only) configure bearer tokens; at
	// most one is set. RequireAuth refuses to start without tokens.
	TokensFile  string
	Tokens      string
	RequireAuth bool
	// FleetFile is the fleet file, read for its shard numbers only.
	FleetFile string
	// TokensReload is how often the tokens file is checked for a change
	// (0: only on SIGHUP).
	TokensReload time.Duration
	// RateLimit is each token's requests/s and burst (0/s: no limit).
	RateLimit api.RateLimit
	// ComponentMetrics are the readers' and loaders' metrics URLs the
	// status page (GET /) reads; RunbookURL is where it links the runbook.
	ComponentMetrics string
	RunbookURL       string
	Logging          telemetry.Logging
}

func parse(args []string) (*Config, error) {
	var c Config
	fs := flagenv.New("api", usage)
	fs.String(&c.Listen, "listen", "TRIBUTARY_API_LISTEN", "127.0.0.1:8080", "HTTP listen address (HTTPS with --tls-cert-file)")
	fs.String(&c.TLS.CertFile, "tls-cert-file", "TRIBUTARY_API_TLS_CERT_FILE", "",
		"PEM certificate (chain) to serve HTTPS with, with --tls-key-file; reloaded when it changes (empty: plain HTTP)")
	fs.String(&c.TLS.KeyFile, "tls-key-file", "TRIBUTARY_API_TLS_KEY_FILE", "", "PEM private key of --tls-cert-file")
	fs.String(&c.TLS.ClientCAFile, "tls-client-ca-file", "TRIBUTARY_API_TLS_CLIENT_CA_FILE", "",
		"PEM authorities that sign client certificates: every client must show a valid one (empty: none asked for)")
	fs.Duration(&c.TLSReload, "tls-reload-interval", "TRIBUTARY_API_TLS_RELOAD_INTERVAL", servertls.DefaultReloadInterval,
		"how often the TLS files are checked for a change and reloaded (0: only on SIGHUP; files that do not load keep the ones in force)")
	fs.String(&c.TablesFile, "tables", "TRIBUTARY_TABLES", "", "table config JSON file (required)")
	fs.String(&c.DocumentsTable, "documents-table", "TRIBUTARY_DOCUMENTS_TABLE", "documents", "table served by /v1/documents/{id} and searched by /v1/documents")
	chstore.AddFlags(fs, &c.ClickHouse, chstore.ConnUsage{Addr: chstore.ReplicasUsage})
	fs.String(&c.ClickHouseCluster, "clickhouse-cluster", "TRIBUTARY_CLICKHOUSE_CLUSTER", "",
		"the ClickHouse cluster the loaders spread the tables over (their --clickhouse-cluster): /readyz then checks every node of it and says degraded, naming it, while one does not answer or is behind (empty: one server)")
	chstore.AddNodeAddrsFlag(fs, &c.ClickHouse.NodeAddrs)
	fs.Duration(&c.QueryTimeout, "query-timeout", "TRIBUTARY_API_QUERY_TIMEOUT", 10*time.Second, "timeout of every request (an after= wait included)")
	fs.String(&c.TokensFile, "tokens-file", "TRIBUTARY_API_TOKENS_FILE", "", "bearer tokens file, lines name:token:scope1,scope2 (no tokens: the API is open)")
	fs.Secret(&c.Tokens, "TRIBUTARY_API_TOKENS")
	rate := 0
	fs.Int(&rate, "token-rate", "TRIBUTARY_API_TOKEN_RATE", 0,
		"requests per second each token may make, answered 429 with Retry-After beyond (0: no limit)")
	fs.Int(&c.RateLimit.Burst, "token-burst", "TRIBUTARY_API_TOKEN_BURST", 20, "requests a token may make at once under --token-rate")
	fs.Duration(&c.TokensReload, "tokens-reload-interval", "TRIBUTARY_API_TOKENS_RELOAD_INTERVAL", 5*time.Second,
		"how often the tokens file is checked for a change and reloaded (0: only on SIGHUP; a malformed file keeps the tokens in force)")
	requireAuth := false
	if v, ok := os.LookupEnv("TRIBUTARY_API_REQUIRE_AUTH"); ok && v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("bad environment: $TRIBUTARY_API_REQUIRE_AUTH=%q: not a boolean", v)
		}
		requireAuth = b
	}
	fs.BoolVar(&c.RequireAuth, "require-auth", requireAuth, "refuse to start without tokens [$TRIBUTARY_API_REQUIRE_AUTH]")
	fs.String(&c.ComponentMetrics, "component-metrics", "TRIBUTARY_API_COMPONENT_METRICS", "",
		"comma-separated metrics URLs of the cdc-readers and loaders, for the status page at / (none: the page says so)")
	fs.String(&c.FleetFile, "fleet", "TRIBUTARY_FLEET", "",
		"fleet file, for its shard numbers only (the API never connects to a shard): after= naming another shard is a 400, and a shard still in its initial copy is waited for (none: the shards are those with watermarks)")
	fs.String(&c.RunbookURL, "runbook-url", "TRIBUTARY_API_RUNBOOK_URL", api.DefaultRunbookURL, "where the status page links the runbook's sections (docs/runbook.md)")
	c.Logging.AddFlags(fs, "info")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	c.RateLimit.PerSecond = float64(rate)
	if err := c.Validate(); err != nil {
		return &c, err
	}
	return &c, c.ClickHouse.ReadPassword()
}

// Validate reports every missing or invalid setting at once.
func (c *Config) Validate() error {
	var errs []error
	errs = append(errs, c.Logging.Validate())
	errs = append(errs, flagenv.Required(c.TablesFile, "tables", "TRIBUTARY_TABLES", ""))
	errs = append(errs, c.ClickHouse.Validate()...)
	errs = append(errs, c.ClickHouse.ValidateCluster(c.ClickHouseCluster))
	errs = append(errs, c.TLS.Validate("--tls")...)
	if c.TLSReload < 0 {
		errs = append(errs, errors.New("--tls-reload-interval must be >= 0"))
	}
	if c.QueryTimeout <= 0 {
		errs = append(errs, errors.New("--query-timeout must be > 0"))
	}
	if c.RateLimit.PerSecond < 0 || c.RateLimit.Burst < 1 {
		errs = append(errs, errors.New("--token-rate must be >= 0 and --token-burst >= 1"))
	}
	if c.TokensReload < 0 {
		errs = append(errs, errors.New("--tokens-reload-interval must be >= 0"))
	}
	switch {
	case c.TokensFile != "" && c.Tokens != "":
		errs = append(errs, errors.New("set --tokens-file ($TRIBUTARY_API_TOKENS_FILE) or $TRIBUTARY_API_TOKENS, not both"))
	case c.RequireAuth && c.TokensFile == "" && c.Tokens == "":
		errs = append(errs, errors.New("--require-auth: no tokens configured (--tokens-file, $TRIBUTARY_API_TOKENS_FILE or $TRIBUTARY_API_TOKENS)"))
	}
	if _, err := c.componentMetrics(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// componentMetrics is --component-metrics as a list of http(s) URLs.
func (c *Config) componentMetrics() ([]string, error) {
	var out []string
	for i, item := range strings.Split(c.ComponentMetrics, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		u, err := url.Parse(item)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("--component-metrics: entry %d (%q) is not an http(s) URL such as http://127.0.0.1:9101/metrics", i+1, item)
		}
		out = append(out, item)
	}
	return out, nil
}

func main() { flagenv.Main("api", parse, run) }

func run(ctx context.Context, cfg *Config) error {
	log, err := cfg.Logging.Logger(os.Stderr)
	if err != nil {
		return err
	}
	tcfg, err := tables.Load(cfg.TablesFile)
	if err != nil {
		return err
	}
	if _, ok := tcfg.ByName(cfg.DocumentsTable); !ok {
		return fmt.Errorf("--documents-table %q is not in %s", cfg.DocumentsTable, cfg.TablesFile)
	}
	tokens, err := loadTokens(cfg, log)
	if err != nil {
		return err
	}
	var shards []int
	if cfg.FleetFile != "" {
		fl, err := fleet.Load(cfg.FleetFile)
		if err != nil {
			return err
		}
		shards = fl.Numbers()
	}
	checkTokens := func(t *api.Tokens) error {
		return t.CheckTables(func(table string) bool { _, ok := tcfg.ByName(table); return ok })
	}
	if tokens != nil {
		if err := checkTokens(tokens); err != nil {
			return fmt.Errorf("%s: %w", tokenSource(cfg), err)
		}
	}
	reg := telemetry.NewRegistry()
	var certs *servertls.Server
	if cfg.TLS.On() {
		// Before ClickHouse: bad files are the operator's to fix now.
		if certs, err = servertls.New(cfg.TLS, log, reg); err != nil {
			return err
		}
	}
	q, err := query.Open(ctx, cfg.ClickHouse.Database, cfg.ClickHouse.DialOptions())
	switch {
	case errors.Is(err, chstore.ErrNotReachable):
		// Serve anyway: /readyz says 503 until ClickHouse answers.
		log.Warn("ClickHouse not reachable yet; serving, not ready", slog.Any("err", err))
	case err != nil:
		return err
	}
	defer q.Close()
	q.WithCluster(cfg.ClickHouseCluster, chstore.DialOptions{Username: cfg.ClickHouse.User, Password: cfg.ClickHouse.Password, TLS: cfg.ClickHouse.TLS,
		NodeAddrs: cfg.ClickHouse.NodeAddrs})
	metrics, _ := cfg.componentMetrics() // checked by Validate
	srv := api.New(api.Config{Tables: tcfg, DocumentsTable: cfg.DocumentsTable, QueryTimeout: cfg.QueryTimeout, Tokens: tokens,
		ComponentMetrics: metrics, RunbookURL: cfg.RunbookURL, Shards: shards, RateLimit: cfg.RateLimit}, q, log, reg)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", telemetry.Handler(reg))
	mux.Handle("/", srv)

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: cfg.QueryTimeout + 5*time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10,
		// Refused TLS handshakes (a client without a valid certificate) are
		// logged here, with the client's address and why.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	scheme := "http"
	g, gctx := errgroup.WithContext(ctx)
	if certs != nil {
		ln, scheme = tls.NewListener(ln, certs.Config()), "https"
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		g.Go(func() error { return certs.Run(gctx, cfg.TLSReload, hup) })
	}
	log.Info("api listening", slog.String("addr", ln.Addr().String()), slog.String("scheme", scheme),
		slog.Bool("client_certificates", cfg.TLS.ClientCAFile != ""))
	if cfg.TokensFile != "" {
		// SIGHUP and changes of the file reload it; $TRIBUTARY_API_TOKENS
		// cannot change under a running process.
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		reloader := api.NewTokenReloader(cfg.TokensFile, tokens, checkTokens, log, reg)
		g.Go(func() error { return reloader.Run(gctx, cfg.TokensReload, hup) })
	}
	g.Go(func() error {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		return hs.Shutdown(sctx)
	})
	return g.Wait()
}

// tokenSource names where the tokens come from, for messages.
func tokenSource(cfg *Config) string {
	if cfg.TokensFile != "" {
		return "tokens file " + cfg.TokensFile
	}
	return "$TRIBUTARY_API_TOKENS"
}

// loadTokens reads the configured tokens; nil (an open API, loudly
// logged) when none are configured.
func loadTokens(cfg *Config, log *slog.Logger) (*api.Tokens, error) {
	switch {
	case cfg.TokensFile != "":
		if w := api.TokenFileWarning(cfg.TokensFile); w != "" {
			log.Warn("tokens file readable by others", slog.String("file", cfg.TokensFile), slog.String("problem", w))
		}
		t, err := api.LoadTokens(cfg.TokensFile)
		if err != nil {
			return nil, err
		}
		log.Info("bearer authentication on", slog.String("source", cfg.TokensFile), slog.Any("tokens", t.Names()))
		return t, nil
	case cfg.Tokens != "":
		t, err := api.ParseTokens(cfg.Tokens, true)
		if err != nil {
			return nil, fmt.Errorf("$TRIBUTARY_API_TOKENS: %w", err)
		}
		log.Info("bearer authentication on", slog.String("source", "$TRIBUTARY_API_TOKENS"), slog.Any("tokens", t.Names()))
		return t, nil
	}
	log.Warn("AUTHENTICATION IS OFF: every route is open to anyone who can reach the listener; " +
		"configure tokens (--tokens-file, $TRIBUTARY_API_TOKENS) and --require-auth outside a laptop demo")
	return nil, nil
}
