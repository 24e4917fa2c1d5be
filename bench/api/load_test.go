package api

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestRunLoadOpenLoop: with a rate, a request's latency counts from when
// it was due, so requests queued behind a slow server show their wait;
// a closed loop shows only the service time.
func TestRunLoadOpenLoop(t *testing.T) {
	const service = 20 * time.Millisecond // one client: 50 req/s at most
	slow := func(context.Context, *rand.Rand) error { time.Sleep(service); return nil }

	// 200 req/s offered for 0.5 s to a 50 req/s server: 100 requests due,
	// the last served ~2 s after the start, ~1.5 s after it was due.
	lat, errs, _, _ := runLoad(context.Background(), 1, 200, 0, 500*time.Millisecond, 1, slow)
	if errs != 0 || len(lat) != 100 {
		t.Fatalf("open loop: %d latencies, %d errors; want the 100 due in 0.5 s at 200/s, none failed", len(lat), errs)
	}
	if worst := slices.Max(lat); worst < time.Second {
		t.Errorf("open loop: worst latency %s, want >= 1s (queued requests count their wait)", worst)
	}

	lat, _, _, _ = runLoad(context.Background(), 1, 0, 0, 200*time.Millisecond, 1, slow)
	if len(lat) == 0 || len(lat) > 11 {
		t.Fatalf("closed loop: %d requests in 0.2 s of 20 ms each, want 1..11", len(lat))
	}
	if best := slices.Min(lat); best < service {
		t.Errorf("closed loop: a latency of %s, below the %s service time", best, service)
	}
}
