// Package servertls serves HTTPS from certificate and key files that are
// reloaded when they change, with optional client-certificate
// authentication.
//
// The files are read at start: a missing, unreadable or malformed file, a
// key that does not match its certificate, or a certificate not valid now
// (expired, or not yet valid) is refused there with an error naming the file
// and what is wrong — never the key's contents. While serving, the files are
// checked for a change (size or modification time) every poll and on a
// signal; a changed set that does not load keeps the one in force: a
// half-copied key or an expired replacement must not take the listener down.
// Every handshake uses the set in force when it starts.
//
// With a client CA file, every client must present a certificate that one of
// its authorities signed and that is valid now; others fail the handshake
// (the server logs why; no HTTP request is read).
//
// Metrics (on the registry given to New): tributary_tls_reloads_total{outcome}
// (loaded, refused), tributary_tls_certificate_expiry_timestamp_seconds (the
// NotAfter of the certificate in force, Unix seconds).
package servertls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/filewatch"
)

// DefaultReloadInterval is how often the files are checked for a change.
const DefaultReloadInterval = 5 * time.Second

// Options names the files. CertFile and KeyFile go together; without them
// there is no TLS (On is false). ClientCAFile turns client-certificate
// authentication on.
type Options struct {
	CertFile, KeyFile string
	ClientCAFile      string
}

// On tells whether TLS is configured.
func (o Options) On() bool { return o.CertFile != "" || o.KeyFile != "" || o.ClientCAFile != "" }

// Validate reports settings that cannot work, before anything is read;
// flags is how the caller's flags are named ("--tls" for --tls-cert-file).
func (o Options) Validate(flags string) []error {
	var errs []error
	if (o.CertFile == "") != (o.KeyFile == "") {
		errs = append(errs, fmt.Errorf("%[1]s-cert-file and %[1]s-key-file go together: set both or neither", flags))
	}
	if o.ClientCAFile != "" && o.CertFile == "" {
		errs = append(errs, fmt.Errorf("%[1]s-client-ca-file needs %[1]s-cert-file and %[1]s-key-file: client certificates are asked for over TLS only", flags))
	}
	return errs
}

// ErrBadFiles is wrapped by every error about the files' contents.
var ErrBadFiles = errors.New("bad TLS files")

// Server holds the TLS configuration in force and reloads it.
type Server struct {
	opts Options
	log  *slog.Logger
	now  func() time.Time

	// cur is the configuration every new handshake uses; replaced whole.
	cur atomic.Pointer[tls.Config]
	// seen is the files' stamps at the last attempt; owned by Run.
	seen [3]stamp

	reloads *prometheus.CounterVec
	expiry  prometheus.Gauge
}

type stamp struct {
	size int64
	mod  time.Time
}

func (s *Server) stamps() [3]stamp {
	var out [3]stamp
	for i, f := range []string{s.opts.CertFile, s.opts.KeyFile, s.opts.ClientCAFile} {
		if f == "" {
			continue
		}
		if st, err := os.Stat(f); err == nil {
			out[i] = stamp{size: st.Size(), mod: st.ModTime()}
		}
	}
	return out
}

// New loads the files now; an error names the file and the problem.
func New(opts Options, log *slog.Logger, reg prometheus.Registerer) (*Server, error) {
	s := &Server{opts: opts, log: log, now: time.Now,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tributary_tls_reloads_total",
			Help: "Reloads of the TLS certificate, key and client CA files by outcome: loaded (put in force), refused (the files in force stay)."}, []string{"outcome"}),
		expiry: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tributary_tls_certificate_expiry_timestamp_seconds",
			Help: "When the served certificate in force expires (its NotAfter), Unix seconds."}),
	}
	s.reloads.WithLabelValues("loaded")
	s.reloads.WithLabelValues("refused")
	s.seen = s.stamps()
	cfg, leaf, err := s.load()
	if err != nil {
		return nil, err
	}
	s.cur.Store(cfg)
	s.expiry.Set(float64(leaf.NotAfter.Unix()))
	reg.MustRegister(s.reloads, s.expiry)
	return s, nil
}

// Config is the tls.Config for a listener: each handshake takes the
// configuration in force at its start.
func (s *Server) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.cur.Load(), nil
		},
	}
}

// load reads and checks the files into a configuration.
func (s *Server) load() (*tls.Config, *x509.Certificate, error) {
	pair, err := tls.LoadX509KeyPair(s.opts.CertFile, s.opts.KeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: certificate %s, key %s: %w", ErrBadFiles, s.opts.CertFile, s.opts.KeyFile, err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, nil, fmt.Errorf("%w: certificate %s: %w", ErrBadFiles, s.opts.CertFile, err)
		}
	}
	if err := checkValidity(leaf, s.now()); err != nil {
		return nil, nil, fmt.Errorf("%w: certificate %s (%s): %w", ErrBadFiles, s.opts.CertFile, describe(leaf), err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}, NextProtos: []string{"http/1.1"}}
	if s.opts.ClientCAFile != "" {
		pool, err := loadPool(s.opts.ClientCAFile)
		if err != nil {
			return nil, nil, err
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, leaf, nil
}

// checkValidity refuses a certificate outside its validity period at now.
func checkValidity(c *x509.Certificate, now time.Time) error {
	switch {
	case now.After(c.NotAfter):
		return fmt.Errorf("expired on %s", c.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(c.NotBefore):
		return fmt.Errorf("not valid before %s", c.NotBefore.UTC().Format(time.RFC3339))
	}
	return nil
}

func describe(c *x509.Certificate) string {
	return fmt.Sprintf("subject %q, issuer %q", c.Subject.String(), c.Issuer.String())
}

// loadPool reads a PEM bundle of CA certificates; every block must be a
// certificate that parses, and there must be one.
func loadPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: client CA file: %w", ErrBadFiles, err)
	}
	pool := x509.NewCertPool()
	n := 0
	for rest := b; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%w: client CA file %s: PEM block %d is a %s, want CERTIFICATE", ErrBadFiles, path, n+1, block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: client CA file %s: certificate %d: %w", ErrBadFiles, path, n+1, err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: client CA file %s: no PEM certificate in it", ErrBadFiles, path)
	}
	return pool, nil
}

// Reload reads the files now and puts them in force; on error the
// configuration in force stays and the error is returned.
func (s *Server) Reload() error {
	cfg, leaf, err := s.load()
	if err != nil {
		s.reloads.WithLabelValues("refused").Inc()
		return err
	}
	s.cur.Store(cfg)
	s.expiry.Set(float64(leaf.NotAfter.Unix()))
	s.reloads.WithLabelValues("loaded").Inc()
	s.log.Info("TLS files reloaded", slog.String("cert_file", s.opts.CertFile), slog.String("certificate", describe(leaf)),
		slog.Time("not_after", leaf.NotAfter))
	return nil
}

// Run reloads on every value from signals and, every > 0, when a file
// changed since the last attempt, until ctx is done. Refusals are logged,
// not returned: the configuration in force keeps serving.
func (s *Server) Run(ctx context.Context, every time.Duration, signals <-chan os.Signal) error {
	filewatch.Run(ctx, every, signals, func() bool { return s.stamps() != s.seen }, func(why string) {
		s.seen = s.stamps()
		if err := s.Reload(); err != nil {
			s.log.Error("TLS reload refused; the certificate in force stays", slog.String("trigger", why), slog.Any("err", err))
		}
	})
	return nil
}
