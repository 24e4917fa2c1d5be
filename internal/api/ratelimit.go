package api

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RateLimit bounds each token's requests: a bucket of Burst requests
// refilled at PerSecond. PerSecond 0 (the default) is no limit: a limit
// that suits no deployment by default would break existing clients on
// upgrade; an operator sets one that fits their ClickHouse.
type RateLimit struct {
	PerSecond float64
	Burst     int
}

// rateLimiter holds one bucket per token name (names survive a tokens
// reload; a rotated token keeps its name's bucket).
type rateLimiter struct {
	limit   RateLimit
	mu      sync.Mutex
	buckets map[string]*bucket // guarded by mu
	refused *prometheus.CounterVec
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newRateLimiter(l RateLimit, reg prometheus.Registerer) *rateLimiter {
	r := &rateLimiter{limit: l, buckets: map[string]*bucket{},
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tributary_api_rate_limited_total",
			Help: "Requests refused with 429 by the per-token rate limit, by token name."}, []string{"token"})}
	reg.MustRegister(r.refused)
	return r
}

// allow takes one request from name's bucket, or says how long until one
// is available.
func (r *rateLimiter) allow(name string, now time.Time) (bool, time.Duration) {
	if r == nil || r.limit.PerSecond <= 0 || name == "" {
		return true, 0
	}
	burst := float64(max(r.limit.Burst, 1))
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.buckets[name]
	if !ok {
		b = &bucket{tokens: burst, at: now}
		r.buckets[name] = b
	}
	b.tokens = math.Min(burst, b.tokens+now.Sub(b.at).Seconds()*r.limit.PerSecond)
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	r.refused.WithLabelValues(name).Inc()
	return false, time.Duration((1 - b.tokens) / r.limit.PerSecond * float64(time.Second))
}

// tooMany is the 429 for a refused request; Retry-After is whole seconds,
// at least 1.
func tooMany(w http.ResponseWriter, name string, wait time.Duration) *Error {
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(wait.Seconds())))))
	return &Error{Status: http.StatusTooManyRequests, Code: "rate_limited",
		Message: "token " + strconv.Quote(name) + " is over its rate limit; retry after Retry-After seconds"}
}
