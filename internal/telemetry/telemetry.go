// Package telemetry serves a binary's operational HTTP endpoints (/metrics
// from a private Prometheus registry, /healthz, and on request Go's
// runtime profiles) and builds its structured logger.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tributary/tributary/internal/flagenv"
)

// NewRegistry returns a private registry with the Go runtime and process
// collectors registered.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Logger returns a JSON or text slog logger on stderr at the given level
// ("debug", "info", "warn", "error").
func Logger(format, level string) (*slog.Logger, error) {
	return LoggerTo(os.Stderr, format, level)
}

// LoggerTo is Logger writing to w (a progress.Terminal on a terminal, so
// that log lines scroll above progress bars).
func LoggerTo(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: want json or text", format)
}

// Serve runs an HTTP server with /metrics and /healthz on addr until ctx is
// done, then shuts it down gracefully. An empty addr disables it.
func Serve(ctx context.Context, addr string, reg *prometheus.Registry, extra map[string]http.Handler) error {
	if addr == "" {
		<-ctx.Done()
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: newMux(reg, extra), ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("metrics server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics shutdown: %w", err)
	}
	return nil
}

// newMux routes /metrics, /healthz and extra (pattern: handler).
func newMux(reg *prometheus.Registry, extra map[string]http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", Handler(reg))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n")) //nolint:errcheck // client went away
	})
	for p, h := range extra {
		mux.Handle(p, h)
	}
	return mux
}

// Metrics is the flags of a binary's metrics endpoint (AddFlags):
// --metrics-addr, and --pprof, which adds Go's runtime profiles to it.
type Metrics struct {
	Addr     string
	Profiles bool
}

// AddFlags registers --metrics-addr (default addr) and --pprof on fs; env
// prefixes their variables (TRIBUTARY_LOADER: TRIBUTARY_LOADER_METRICS_ADDR
// and TRIBUTARY_LOADER_PPROF).
func (m *Metrics) AddFlags(fs *flagenv.Set, env, addr string) {
	fs.String(&m.Addr, "metrics-addr", env+"_METRICS_ADDR", addr, "address for /metrics and /healthz (empty: off)")
	fs.Bool(&m.Profiles, "pprof", env+"_PPROF", false, "also serve Go's runtime profiles on --metrics-addr under /debug/pprof/: "+
		"CPU (/debug/pprof/profile?seconds=30, read with go tool pprof), heap, allocs, goroutine, and an execution trace (/debug/pprof/trace?seconds=5). "+
		"Off by default: they show the process's internals to whoever reaches the address, and a CPU profile or trace costs CPU while it runs")
}

// Validate refuses --pprof without an address to serve it on.
func (m Metrics) Validate() error {
	if m.Profiles && m.Addr == "" {
		return errors.New("--pprof needs --metrics-addr: the profiles are served there")
	}
	return nil
}

// Serve is Serve on m.Addr, with the profiles if m asks for them.
func (m Metrics) Serve(ctx context.Context, reg *prometheus.Registry) error {
	var extra map[string]http.Handler
	if m.Profiles {
		extra = Profiles()
	}
	return Serve(ctx, m.Addr, reg, extra)
}

// Profiles are Go's runtime profiles (net/http/pprof) as routes for
// Serve: /debug/pprof/ lists them and serves each by name (heap, allocs,
// goroutine, ...), profile is a CPU profile and trace an execution trace.
// The command line is left out: it can hold a DSN's password.
func Profiles() map[string]http.Handler {
	return map[string]http.Handler{
		"GET /debug/pprof/":        http.HandlerFunc(pprof.Index),
		"GET /debug/pprof/profile": http.HandlerFunc(pprof.Profile),
		"GET /debug/pprof/symbol":  http.HandlerFunc(pprof.Symbol),
		"GET /debug/pprof/trace":   http.HandlerFunc(pprof.Trace),
	}
}

// Handler returns the /metrics handler for reg.
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}

// Logging is the logging flags every binary takes, under the same names:
// --log-format and --log-level (AddFlags).
type Logging struct {
	Format string
	Level  string
}

// AddFlags registers --log-format (text) and --log-level (level: the
// binary's default) on fs.
func (l *Logging) AddFlags(fs *flagenv.Set, level string) {
	fs.String(&l.Format, "log-format", "TRIBUTARY_LOG_FORMAT", "text", "log format on stderr: text or json")
	fs.String(&l.Level, "log-level", "TRIBUTARY_LOG_LEVEL", level, "log level on stderr: debug, info, warn, error")
}

// Validate reports a format or level that is not one of the above, naming
// the flag, so that a binary refuses it before it starts anything.
func (l Logging) Validate() error {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(l.Level)); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", l.Level)
	}
	if l.Format != "text" && l.Format != "json" && l.Format != "" {
		return fmt.Errorf("--log-format %q: want text or json", l.Format)
	}
	return nil
}

// Logger returns the logger the flags ask for, writing to w.
func (l Logging) Logger(w io.Writer) (*slog.Logger, error) { return LoggerTo(w, l.Format, l.Level) }
