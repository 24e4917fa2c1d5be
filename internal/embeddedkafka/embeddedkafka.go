// Package embeddedkafka runs an in-process, single-broker Kafka-protocol
// server (franz-go's kfake) persisted to a directory. It is the zero-install
// broker for one-machine runs and the demo; integration tests use real Apache
// Kafka (see deploy/local/stack.sh), because kfake is a reimplementation and
// agreeing with it proves less than agreeing with Kafka.
//
// Topics are created on first use (metadata requests that allow auto
// creation, as franz-go and kcat send) with Config.Partitions partitions;
// Config.Topics are created when the data directory is new. State, committed
// offsets included, survives a restart on the same DataDir when the broker
// was stopped cleanly (Broker.Close); without SyncWrites, batches written in
// the last moments before a crash may be lost, as with Kafka's defaults.
//
// Security, as far as kfake goes: TLS with a certificate and key
// (Config.TLSCertFile), client certificates required when Config.ClientCAFile
// is set, and SASL SCRAM-SHA-512 for one user (Config.SASLUser). kfake has
// one listener per broker, so TLS and SASL apply to every connection (no
// plaintext listener beside them), and on a wrong password it closes the
// connection instead of answering SASL_AUTHENTICATION_FAILED, so a client
// sees "no answer" rather than a refusal (internal/kafkaconn says both).
package embeddedkafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Config describes one embedded broker.
type Config struct {
	// Listen is the host:port to listen on. The broker advertises exactly
	// this address to clients, so the host must be one they can dial (not
	// 0.0.0.0 or ::). Port 0 picks a free port.
	Listen string
	// DataDir persists the broker's state; empty keeps it in memory.
	DataDir string
	// Partitions is the partition count of auto-created and seeded topics.
	Partitions int
	// Topics are created at start when DataDir holds no earlier state.
	Topics []string
	// SyncWrites fsyncs every produced batch before acknowledging it.
	SyncWrites bool
	// ClusterID is reported in metadata responses of a new data directory.
	ClusterID string
	// LogLevel is the level of kfake's own logging: none, error, warn,
	// info or debug.
	LogLevel string
	// TLSCertFile and TLSKeyFile (PEM) turn TLS on; both or neither.
	TLSCertFile, TLSKeyFile string
	// ClientCAFile (PEM), with TLS, requires clients to show a
	// certificate this authority signed.
	ClientCAFile string
	// SASLUser, with SASLPassword, turns SASL SCRAM-SHA-512 on: every
	// connection must authenticate as this user.
	SASLUser, SASLPassword string
}

// Validate reports the first problem with the configuration.
func (c Config) Validate() error {
	host, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", c.Listen, err)
	}
	if host == "" {
		return fmt.Errorf("listen address %q: a host is required (clients are told to dial it)", c.Listen)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("listen address %q: the broker advertises its listen address, so it cannot be unspecified; use a dialable address such as 127.0.0.1", c.Listen)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("listen address %q: bad port", c.Listen)
	}
	if c.Partitions < 1 {
		return fmt.Errorf("partitions must be at least 1, got %d", c.Partitions)
	}
	for _, t := range c.Topics {
		if t == "" || strings.ContainsAny(t, " ,") {
			return fmt.Errorf("bad topic name %q", t)
		}
	}
	if _, err := parseLogLevel(c.LogLevel); err != nil {
		return err
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return errors.New("the TLS certificate and key files go together: set both or neither")
	}
	if c.ClientCAFile != "" && c.TLSCertFile == "" {
		return errors.New("a client CA file needs TLS: set the TLS certificate and key files too")
	}
	if (c.SASLUser == "") != (c.SASLPassword == "") {
		return errors.New("the SASL user and its password go together: set both or neither")
	}
	return nil
}

// tlsConfig is the listener's TLS, or nil without a certificate.
func (c Config) tlsConfig() (*tls.Config, error) {
	if c.TLSCertFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s / key %s: %w", c.TLSCertFile, c.TLSKeyFile, err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if c.ClientCAFile != "" {
		pem, err := os.ReadFile(c.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("client CA file: %w", err)
		}
		tc.ClientCAs = x509.NewCertPool()
		if !tc.ClientCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("client CA file %s: no PEM certificate in it", c.ClientCAFile)
		}
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// Broker is a running embedded broker.
type Broker struct {
	cluster *kfake.Cluster
	addr    string
}

// Start validates cfg and starts a broker that serves until Close.
func Start(cfg Config, logger *slog.Logger) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	level, _ := parseLogLevel(cfg.LogLevel)
	host, portStr, _ := net.SplitHostPort(cfg.Listen)
	port, _ := strconv.Atoi(portStr)

	opts := []kfake.Opt{
		// One port means one broker, which is both controller and the
		// leader of every partition.
		kfake.Ports(port),
		// kfake always asks for 127.0.0.1:<port>; listen on the configured
		// host instead, keeping the port it asked for.
		kfake.ListenFn(func(network, address string) (net.Listener, error) {
			_, p, err := net.SplitHostPort(address)
			if err != nil {
				return nil, err
			}
			return net.Listen(network, net.JoinHostPort(host, p))
		}),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(cfg.Partitions),
		kfake.WithLogger(slogAdapter{logger: logger, level: level}),
	}
	if len(cfg.Topics) > 0 {
		opts = append(opts, kfake.SeedTopics(int32(cfg.Partitions), cfg.Topics...))
	}
	if cfg.ClusterID != "" {
		opts = append(opts, kfake.ClusterID(cfg.ClusterID))
	}
	if cfg.DataDir != "" {
		opts = append(opts, kfake.DataDir(cfg.DataDir))
	}
	if cfg.SyncWrites {
		opts = append(opts, kfake.SyncWrites())
	}
	tlsConf, err := cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	if tlsConf != nil {
		opts = append(opts, kfake.TLS(tlsConf))
	}
	if cfg.SASLUser != "" {
		opts = append(opts, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", cfg.SASLUser, cfg.SASLPassword))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("start embedded broker on %s: %w", cfg.Listen, err)
	}
	addrs := c.ListenAddrs()
	if len(addrs) != 1 {
		c.Close()
		return nil, fmt.Errorf("embedded broker: expected one listener, got %d", len(addrs))
	}
	return &Broker{cluster: c, addr: addrs[0]}, nil
}

// Addr is the host:port clients bootstrap from.
func (b *Broker) Addr() string { return b.addr }

// Close stops accepting connections and, with a DataDir, writes the state
// that a restart reloads. It blocks until that is done.
func (b *Broker) Close() { b.cluster.Close() }

// Run starts a broker, serves until ctx is done, then closes it cleanly.
func Run(ctx context.Context, cfg Config, logger *slog.Logger) error {
	b, err := Start(cfg, logger)
	if err != nil {
		return err
	}
	logger.Info("embedded kafka listening",
		slog.String("addr", b.Addr()),
		slog.String("data_dir", cfg.DataDir),
		slog.Int("partitions", cfg.Partitions))
	<-ctx.Done()
	logger.Info("embedded kafka stopping")
	b.Close()
	logger.Info("embedded kafka stopped")
	return nil
}

// errLogLevel is returned for a log level kfake does not have.
var errLogLevel = errors.New("log level must be one of none, error, warn, info, debug")

func parseLogLevel(s string) (kfake.LogLevel, error) {
	switch strings.ToLower(s) {
	case "none":
		return kfake.LogLevelNone, nil
	case "error":
		return kfake.LogLevelError, nil
	case "", "warn":
		return kfake.LogLevelWarn, nil
	case "info":
		return kfake.LogLevelInfo, nil
	case "debug":
		return kfake.LogLevelDebug, nil
	}
	return 0, fmt.Errorf("%w, got %q", errLogLevel, s)
}

// slogAdapter sends kfake's printf-style log lines to slog, keeping the
// message constant and the formatted text in an attribute.
type slogAdapter struct {
	logger *slog.Logger
	level  kfake.LogLevel
}

func (a slogAdapter) Logf(level kfake.LogLevel, format string, args ...any) {
	if level > a.level || level == kfake.LogLevelNone {
		return
	}
	var l slog.Level
	switch level {
	case kfake.LogLevelError:
		l = slog.LevelError
	case kfake.LogLevelWarn:
		l = slog.LevelWarn
	case kfake.LogLevelInfo:
		l = slog.LevelInfo
	default:
		l = slog.LevelDebug
	}
	a.logger.Log(context.Background(), l, "kfake", slog.String("detail", fmt.Sprintf(format, args...)))
}
