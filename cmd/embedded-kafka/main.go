// Command embedded-kafka runs a single-broker Kafka-protocol server (franz-go's
// kfake) persisted to a directory: the zero-install broker for one-machine runs
// and the demo. deploy/local/stack.sh builds and starts it. Integration tests
// run against real Apache Kafka instead.
//
// Every flag has an environment fallback (TRIBUTARY_EMBEDDED_KAFKA_<FLAG>,
// upper case, dashes as underscores); a flag given on the command line wins.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/tributary/tributary/internal/embeddedkafka"
)

const envPrefix = "TRIBUTARY_EMBEDDED_KAFKA_"

func main() {
	cfg, err := parseConfig(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "embedded-kafka: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "embedded-kafka: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg embeddedkafka.Config) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	return embeddedkafka.Run(ctx, cfg, logger)
}

// parseConfig reads flags over environment fallbacks and validates them.
func parseConfig(args []string) (embeddedkafka.Config, error) {
	fs := flag.NewFlagSet("embedded-kafka", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: embedded-kafka [flags]

Runs a one-broker Kafka-protocol server (franz-go's kfake) until SIGINT or
SIGTERM, then saves its state and exits. Topics are created on first use with
--partitions partitions. With --data-dir, topics, records and committed offsets
survive a clean restart. For demos and one-machine runs; tests use real Kafka.

Flags (environment fallback in brackets):
`)
		fs.PrintDefaults()
	}
	var cfg embeddedkafka.Config
	var topics string
	fs.StringVar(&cfg.Listen, "listen", env("LISTEN", "127.0.0.1:59192"),
		"host:port to listen on and advertise; must be dialable by clients ["+envPrefix+"LISTEN]")
	fs.StringVar(&cfg.DataDir, "data-dir", env("DATA_DIR", ""),
		"directory that persists the broker's state; empty keeps it in memory ["+envPrefix+"DATA_DIR]")
	partitions, err := strconv.Atoi(env("PARTITIONS", "4"))
	if err != nil {
		return cfg, fmt.Errorf("%sPARTITIONS: %w", envPrefix, err)
	}
	fs.IntVar(&cfg.Partitions, "partitions", partitions,
		"partitions of auto-created and seeded topics ["+envPrefix+"PARTITIONS]")
	fs.StringVar(&topics, "topics", env("TOPICS", ""),
		"comma-separated topics to create when the data directory is new ["+envPrefix+"TOPICS]")
	fs.BoolVar(&cfg.SyncWrites, "sync", env("SYNC", "") == "true",
		"fsync every produced batch before acknowledging it ["+envPrefix+"SYNC=true]")
	fs.StringVar(&cfg.ClusterID, "cluster-id", env("CLUSTER_ID", "tributary-embedded"),
		"cluster id reported to clients ["+envPrefix+"CLUSTER_ID]")
	fs.StringVar(&cfg.LogLevel, "log-level", env("LOG_LEVEL", "warn"),
		"kfake's logging: none, error, warn, info, debug ["+envPrefix+"LOG_LEVEL]")
	fs.StringVar(&cfg.TLSCertFile, "tls-cert-file", env("TLS_CERT_FILE", ""),
		"PEM certificate of the listener: with --tls-key-file, every connection is TLS ["+envPrefix+"TLS_CERT_FILE]")
	fs.StringVar(&cfg.TLSKeyFile, "tls-key-file", env("TLS_KEY_FILE", ""),
		"PEM private key of --tls-cert-file ["+envPrefix+"TLS_KEY_FILE]")
	fs.StringVar(&cfg.ClientCAFile, "tls-client-ca-file", env("TLS_CLIENT_CA_FILE", ""),
		"PEM authority whose client certificates are required (empty: none asked for) ["+envPrefix+"TLS_CLIENT_CA_FILE]")
	fs.StringVar(&cfg.SASLUser, "sasl-user", env("SASL_USER", ""),
		"SCRAM-SHA-512 user every connection must authenticate as (empty: no SASL); its password from $"+envPrefix+"SASL_PASSWORD or --sasl-password-file ["+envPrefix+"SASL_USER]")
	var passwordFile string
	fs.StringVar(&passwordFile, "sasl-password-file", env("SASL_PASSWORD_FILE", ""),
		"file holding --sasl-user's password (one line) ["+envPrefix+"SASL_PASSWORD_FILE]")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	// The password is never a flag: argv is visible to every user.
	cfg.SASLPassword = env("SASL_PASSWORD", "")
	if passwordFile != "" {
		if cfg.SASLPassword != "" {
			return cfg, fmt.Errorf("both $%sSASL_PASSWORD and --sasl-password-file are set: use one", envPrefix)
		}
		b, err := os.ReadFile(passwordFile)
		if err != nil {
			return cfg, fmt.Errorf("--sasl-password-file: %w", err)
		}
		cfg.SASLPassword = strings.TrimRight(string(b), "\r\n")
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q (see --help)", fs.Args())
	}
	for _, t := range strings.Split(topics, ",") {
		if t = strings.TrimSpace(t); t != "" {
			cfg.Topics = append(cfg.Topics, t)
		}
	}
	return cfg, cfg.Validate()
}

func env(name, def string) string {
	if v, ok := os.LookupEnv(envPrefix + name); ok {
		return v
	}
	return def
}
