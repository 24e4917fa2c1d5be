// Command api serves Tributary's global view over HTTP/JSON: documents by
// id, per-shard freshness, metrics. It reads ClickHouse only and never
// touches a shard.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/tributary/tributary/internal/api"
	"github.com/tributary/tributary/internal/flagenv"
	"github.com/tributary/tributary/internal/query"
	"github.com/tributary/tributary/internal/tables"
	"github.com/tributary/tributary/internal/telemetry"
)

const usage = `api — Tributary's HTTP/JSON API over ClickHouse.

Routes:
  GET /v1/documents/{id}           a document by global id (every live copy, with its shard)
  GET /v1/tables/{table}/rows/{id} any replicated table's row by id
  GET /v1/shards                   per-shard freshness (watermark LSN and commit time)
  GET /healthz, /readyz, /metrics

Example:
  TRIBUTARY_CLICKHOUSE_ADDR=127.0.0.1:59000 api --tables deploy/local/tables.json --listen 127.0.0.1:8080`

// Config is the API's whole configuration.
type Config struct {
	Listen         string
	TablesFile     string
	DocumentsTable string
	ClickHouseAddr string
	ClickHouseDB   string
	ClickHouseUser string
	ClickHousePass string
	QueryTimeout   time.Duration
	LogFormat      string
	LogLevel       string
}

func parse(args []string) (*Config, error) {
	var c Config
	fs := flagenv.New("api", usage)
	fs.String(&c.Listen, "listen", "TRIBUTARY_API_LISTEN", "127.0.0.1:8080", "HTTP listen address")
	fs.String(&c.TablesFile, "tables", "TRIBUTARY_TABLES", "", "table config JSON file (required)")
	fs.String(&c.DocumentsTable, "documents-table", "TRIBUTARY_DOCUMENTS_TABLE", "documents", "table served by /v1/documents/{id}")
	fs.String(&c.ClickHouseAddr, "clickhouse-addr", "TRIBUTARY_CLICKHOUSE_ADDR", "", "ClickHouse native protocol host:port (required)")
	fs.String(&c.ClickHouseDB, "clickhouse-db", "TRIBUTARY_CLICKHOUSE_DB", "tributary", "ClickHouse database")
	fs.String(&c.ClickHouseUser, "clickhouse-user", "TRIBUTARY_CLICKHOUSE_USER", "default", "ClickHouse user")
	fs.Secret(&c.ClickHousePass, "TRIBUTARY_CLICKHOUSE_PASSWORD")
	fs.Duration(&c.QueryTimeout, "query-timeout", "TRIBUTARY_API_QUERY_TIMEOUT", 10*time.Second, "timeout of every request")
	fs.String(&c.LogFormat, "log-format", "TRIBUTARY_LOG_FORMAT", "text", "log format: text or json")
	fs.String(&c.LogLevel, "log-level", "TRIBUTARY_LOG_LEVEL", "info", "log level: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return &c, c.Validate()
}

// Validate reports every missing or invalid setting at once.
func (c *Config) Validate() error {
	var errs []error
	if c.TablesFile == "" {
		errs = append(errs, errors.New("--tables (or $TRIBUTARY_TABLES) is required"))
	}
	if c.ClickHouseAddr == "" {
		errs = append(errs, errors.New("--clickhouse-addr (or $TRIBUTARY_CLICKHOUSE_ADDR) is required"))
	}
	if c.QueryTimeout <= 0 {
		errs = append(errs, errors.New("--query-timeout must be > 0"))
	}
	return errors.Join(errs...)
}

func main() {
	cfg, err := parse(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "api: %v\n(run with --help for all settings)\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "api: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg *Config) error {
	log, err := telemetry.Logger(cfg.LogFormat, cfg.LogLevel)
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
	q, err := query.Open(ctx, cfg.ClickHouseAddr, cfg.ClickHouseDB, cfg.ClickHouseUser, cfg.ClickHousePass)
	if err != nil {
		return err
	}
	defer q.Close()
	reg := telemetry.NewRegistry()
	srv := api.New(api.Config{Tables: tcfg, DocumentsTable: cfg.DocumentsTable, QueryTimeout: cfg.QueryTimeout}, q, log, reg)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", telemetry.Handler(reg))
	mux.Handle("/", srv)

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: cfg.QueryTimeout + 5*time.Second, IdleTimeout: 2 * time.Minute}
	log.Info("api listening", slog.String("addr", ln.Addr().String()))
	g, gctx := errgroup.WithContext(ctx)
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
