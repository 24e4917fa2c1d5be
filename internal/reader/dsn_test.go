package reader

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/pgdsn"
)

// TestRunRefusesBadDSN: a DSN that does not parse stops the reader before
// it connects anywhere, naming the shard and why, and showing none of the
// password (pgx's own error would show the part after an unterminated quote).
func TestRunRefusesBadDSN(t *testing.T) {
	r := New(Config{Shard: 7, DSN: "host=127.0.0.1 user=tributary_repl password='hunter2 part2 port=1"},
		slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	err := r.Run(context.Background())
	if !errors.Is(err, pgdsn.ErrBad) || !strings.Contains(err.Error(), "shard 7") {
		t.Fatalf("error %v, want a bad DSN of shard 7", err)
	}
	for _, part := range []string{"hunter2", "part2"} {
		if strings.Contains(err.Error(), part) {
			t.Errorf("error shows the password: %v", err)
		}
	}
}
