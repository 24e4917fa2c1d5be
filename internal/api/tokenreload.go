package api

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/filewatch"
)

// TokenReloader puts a tokens file's new contents in force without a
// restart: on a signal (SIGHUP, the caller's to route) and when the file's
// size or modification time changes (polled). A file that does not parse or
// check keeps the tokens in force: a half-written or mistyped file must not
// lock every client out, nor open the API.
//
// Metric: tributary_api_token_reloads_total{outcome} (loaded, refused).
type TokenReloader struct {
	path   string
	tokens *Tokens
	check  func(*Tokens) error
	log    *slog.Logger

	reloads *prometheus.CounterVec

	// seen is the file's stamp at the last attempt; owned by Run.
	seen fileStamp
}

type fileStamp struct {
	size int64
	mod  time.Time
}

func stampOf(path string) (fileStamp, error) {
	st, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{size: st.Size(), mod: st.ModTime()}, nil
}

// NewTokenReloader reloads path into tokens, which were loaded from it;
// check (may be nil) vets a new set before it is put in force (e.g.
// Tokens.CheckTables).
func NewTokenReloader(path string, tokens *Tokens, check func(*Tokens) error, log *slog.Logger, reg prometheus.Registerer) *TokenReloader {
	r := &TokenReloader{path: path, tokens: tokens, check: check, log: log,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tributary_api_token_reloads_total",
			Help: "Tokens file reloads by outcome: loaded (put in force), refused (malformed; the tokens in force stay)."}, []string{"outcome"})}
	r.reloads.WithLabelValues("loaded")
	r.reloads.WithLabelValues("refused")
	reg.MustRegister(r.reloads)
	r.seen, _ = stampOf(path)
	return r
}

// Reload reads the file now. On error the tokens in force stay and the
// error (naming the file and line, never a token) is returned.
func (r *TokenReloader) Reload() error {
	n, err := LoadTokens(r.path)
	if err == nil && r.check != nil {
		if err = r.check(n); err != nil {
			err = fmt.Errorf("tokens file %s: %w", r.path, err)
		}
	}
	if err != nil {
		r.reloads.WithLabelValues("refused").Inc()
		return err
	}
	r.tokens.Replace(n)
	r.reloads.WithLabelValues("loaded").Inc()
	return nil
}

// Run reloads on every value from signals and, every > 0, when the file
// changed since the last attempt, until ctx is done. Refusals are logged
// (they are not fatal: the tokens in force keep serving).
func (r *TokenReloader) Run(ctx context.Context, every time.Duration, signals <-chan os.Signal) error {
	changed := func() bool {
		// A file gone for a moment (an editor's rename) is not a change;
		// its reappearance will be.
		st, err := stampOf(r.path)
		return err == nil && st != r.seen
	}
	filewatch.Run(ctx, every, signals, changed, func(why string) {
		r.seen, _ = stampOf(r.path)
		if err := r.Reload(); err != nil {
			r.log.Error("tokens reload refused; the tokens in force stay", slog.String("trigger", why), slog.Any("err", err))
			return
		}
		r.log.Info("tokens reloaded", slog.String("trigger", why), slog.String("source", r.path), slog.Any("tokens", r.tokens.Names()))
	})
	return nil
}
