// Package api is Tributary's HTTP/JSON API over ClickHouse. It never talks
// to a shard: the api binary has no PostgreSQL dependency at all
// (tests/deps_test.go checks). Every answer carries the freshness of every
// shard, so "not found" can be told from "not yet".
//
// Every read route accepts after=S:X/Y (read-your-writes, consistency.go).
// Routes other than health, readiness and the OpenAPI document need a
// bearer token with the route's scope when tokens are configured
// (auth.go); with none the API is open. Listings page with opaque cursors
// (cursor.go).
//
// Metrics (private registry): tributary_api_requests_total{route,code},
// tributary_api_request_seconds{route},
// tributary_api_read_wait_seconds{outcome} (time after= requests waited for
// the watermarks; outcome visible or not_yet_visible),
// tributary_api_read_after_watermark_seconds (after= reads answered: from
// the watermark reading that found the positions reached to the answer
// written, the last stage of read-your-writes; consistency.go),
// tributary_api_token_reloads_total{outcome} (tokenreload.go),
// tributary_api_rate_limited_total{token} (ratelimit.go). Served over HTTPS
// (cmd/api --tls-cert-file), the binary also exports internal/servertls'
// tributary_tls_reloads_total{outcome} and
// tributary_tls_certificate_expiry_timestamp_seconds.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/ids"
	"github.com/tributary/tributary/internal/query"
	"github.com/tributary/tributary/internal/tables"
)

// Config is what the API serves.
type Config struct {
	Tables *tables.Config
	// DocumentsTable is the table GET /v1/documents/{id} reads.
	DocumentsTable string
	// QueryTimeout bounds every request, including an after= wait.
	QueryTimeout time.Duration
	// Tokens authenticates requests. Nil (the zero value) serves every
	// route to anyone.
	Tokens *Tokens
	// ComponentMetrics are the readers' and loaders' metrics URLs the
	// status page scrapes (status_metrics.go); none: the page says so.
	ComponentMetrics []string
	// RunbookURL is where the status page links the runbook's sections
	// (default DefaultRunbookURL).
	RunbookURL string
	// Shards are the fleet's shard numbers (its fleet file), when known:
	// after= naming another shard is a 400 at once, and a shard of the
	// fleet still in its initial copy (no watermark yet) is waited for.
	// Without them, the shards are those with watermarks (knownShards).
	Shards []int
	// RateLimit bounds each token's requests (ratelimit.go); zero: none.
	RateLimit RateLimit
}

// Server is the HTTP handler set.
type Server struct {
	cfg Config
	q   *query.Queries
	log *slog.Logger
	mux *http.ServeMux
	// patterns lists every pattern registered on mux, in order; the OpenAPI
	// test checks the document against it.
	patterns []string

	// watch shares watermark polls among after= waiters.
	watch *watermarkWatch
	// stopped shares readings of the stopped tables (stopped.go).
	stopped *stoppedWatch
	// preagg caches the revenue pre-aggregates' state (preagg.go).
	preagg preaggCache
	// layouts holds each table's id layout, resolved once.
	layouts map[string]tableLayout

	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	waited   *prometheus.HistogramVec
	answered prometheus.Histogram // after= reads, watermark reading to answer
	limiter  *rateLimiter

	// ping checks ClickHouse for /readyz (q.Ping; a fake in tests), and
	// reached says whether it ever answered since the start.
	ping    func(context.Context) error
	reached atomic.Bool
	// replicas lists the ClickHouse cluster's nodes, each pinged, for
	// /readyz (q.Replicas: nil on one server; a fake in tests).
	replicas func(context.Context) ([]query.Replica, error)
}

// tableLayout is a table's configured id layout, or why it did not resolve.
type tableLayout struct {
	layout ids.Layout
	err    error
}

// New builds the API handler.
func New(cfg Config, q *query.Queries, log *slog.Logger, reg prometheus.Registerer) *Server {
	s := &Server{cfg: cfg, q: q, log: log, mux: http.NewServeMux(), watch: &watermarkWatch{fetch: q.Freshness, timeout: max(cfg.QueryTimeout, time.Second)},
		stopped: &stoppedWatch{fetch: q.StoppedTables, timeout: max(cfg.QueryTimeout, time.Second)},
		layouts: map[string]tableLayout{}, ping: q.Ping, replicas: q.Replicas}
	s.limiter = newRateLimiter(cfg.RateLimit, reg)
	for _, t := range cfg.Tables.Tables {
		l, err := ids.Lookup(t.IDLayout)
		s.layouts[t.Name] = tableLayout{layout: l, err: err}
	}
	s.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tributary_api_requests_total",
		Help: "HTTP requests by route and status code."}, []string{"route", "code"})
	s.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tributary_api_request_seconds",
		Help: "HTTP request latency by route.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"route"})
	s.waited = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tributary_api_read_wait_seconds",
		Help:    "Time after= requests waited for the named shards' watermarks, by outcome (visible, not_yet_visible).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}, []string{"outcome"})
	s.answered = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tributary_api_read_after_watermark_seconds",
		Help:    "After= reads answered: from the start of the watermark reading that found the named positions reached to the answer written (the watermark query, the read, the encoding). The watermark was written at most one reading before (readings follow each other at least 5 ms apart while a request waits).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)})
	reg.MustRegister(s.requests, s.latency, s.waited, s.answered)
	s.registerMoveMetrics(reg)

	s.route("GET /v1/documents", ScopeDocumentsRead, s.search)
	s.route("GET /v1/documents/{id}", ScopeDocumentsRead, s.document)
	s.route("GET /v1/tables/{table}/rows/{id}", accessRows, s.tableRow)
	s.route("GET /v1/anomalies/duplicates", ScopeAnomaliesRead, s.duplicates)
	s.route("GET /v1/anomalies/moves", ScopeAnomaliesRead, s.moveAnomalies)
	s.route("GET /v1/anomalies/misplaced", ScopeAnomaliesRead, s.misplaced)
	s.route("GET /v1/shards", accessToken, s.shards)
	s.route("GET /v1/revenue", ScopeRevenueRead, s.revenue)
	s.route("GET /v1/status", accessToken, s.statusJSON) // status.go
	s.route("GET /{$}", accessOpen, s.status)            // status.go: checks tokens itself, to answer in HTML
	s.route("GET /v1/openapi.json", accessOpen, s.openapi)
	s.route("GET /readyz", accessOpen, s.ready)
	s.route("GET /healthz", accessOpen, func(w http.ResponseWriter, _ *http.Request) error {
		return writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.route("/", accessOpen, func(w http.ResponseWriter, r *http.Request) error {
		// ServeMux sends a method mismatch here too (this pattern matches
		// every method): tell the two apart, answering in JSON either way.
		if r.Method != http.MethodGet {
			probe := r.Clone(r.Context())
			probe.Method = http.MethodGet
			if _, pattern := s.mux.Handler(probe); pattern != "/" {
				w.Header().Set("Allow", "GET, HEAD")
				return &Error{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed",
					Message: r.Method + " is not allowed on " + r.URL.Path + "; use GET"}
			}
		}
		return &Error{Status: http.StatusNotFound, Code: "unknown_route", Message: "no route " + r.Method + " " + r.URL.Path}
	})
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Error is an API error: a status and a JSON body that says what is wrong.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"error"`
	Message string `json:"message"`
	// Detail is extra context (e.g. freshness for a 404).
	Detail any `json:"detail,omitempty"`
}

func (e *Error) Error() string { return e.Message }

// badRequest is a 400 with the given code.
func badRequest(code, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Code: code, Message: fmt.Sprintf(format, args...)}
}

type handler func(http.ResponseWriter, *http.Request) error

// route registers h with authentication (need: a Scope, accessToken or
// accessOpen), metrics, a request timeout, panic safety and JSON errors. A
// method mismatch on a known path is answered 405 by ServeMux; we wrap that
// too.
func (s *Server) route(pattern string, need Scope, h handler) {
	name := pattern
	s.patterns = append(s.patterns, pattern)
	s.mux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.QueryTimeout)
		defer cancel()
		ctx, reached := withReached(ctx) // consistency.go
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		principal, err := s.cfg.Tokens.authorize(rec, r, need, s.cfg.DocumentsTable)
		if err == nil {
			if ok, wait := s.limiter.allow(principal, start); !ok {
				err = tooMany(rec, principal, wait)
			}
		}
		if err == nil {
			err = func() (err error) {
				defer func() {
					if p := recover(); p != nil {
						err = fmt.Errorf("panic: %v", p)
					}
				}()
				return h(rec, r.WithContext(ctx))
			}()
		}
		if err != nil {
			var apiErr *Error
			if !errors.As(err, &apiErr) {
				apiErr = failure(err) // errors.go
				s.log.Error("request failed", slog.String("route", name), slog.String("class", query.Classify(err).String()),
					slog.Int("status", apiErr.Status), slog.Any("err", err))
				if apiErr.Status == http.StatusServiceUnavailable {
					rec.Header().Set("Retry-After", "1")
				}
			}
			writeJSON(rec, apiErr.Status, apiErr) //nolint:errcheck // client went away
		}
		s.requests.WithLabelValues(name, strconv.Itoa(rec.code)).Inc()
		s.latency.WithLabelValues(name).Observe(time.Since(start).Seconds())
		if !reached.IsZero() && err == nil {
			s.answered.Observe(time.Since(*reached).Seconds())
		}
		attrs := []any{slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.String("query", loggedQuery(r.URL.RawQuery)), slog.Int("status", rec.code), slog.Duration("took", time.Since(start)), slog.String("token", principal)}
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			// Under client-certificate authentication: who, by its subject.
			attrs = append(attrs, slog.String("client_cert", r.TLS.PeerCertificates[0].Subject.String()))
		}
		s.log.Info("request", attrs...)
	}))
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.code = code
	r.ResponseWriter.WriteHeader(code)
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// maxIDLen is the longest id of any layout: a UUID's 36 characters (a
// bigint has at most 20).
const maxIDLen = 36

// parseID accepts a decimal integer id or a UUID and returns the value to
// bind for the table's id column.
func parseID(s string) (any, error) {
	switch {
	case s == "":
		return nil, badRequest("bad_id", "id must be a decimal integer or a UUID")
	case len(s) > maxIDLen:
		return nil, badRequest("bad_id", "id is %d characters, longer than any id layout's: at most %d (a UUID; a bigint has at most 20)",
			len(s), maxIDLen)
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, nil
	} else if errors.Is(err, strconv.ErrRange) {
		return nil, badRequest("bad_id", "id %s is beyond the range of a bigint (-9223372036854775808..9223372036854775807)", s)
	}
	if strings.Count(s, "-") == 4 {
		if u, err := uuid.Parse(s); err == nil {
			return u.String(), nil
		}
	}
	return nil, badRequest("bad_id", "id %q is neither a 64-bit decimal integer nor a UUID", s)
}

// idValue is the type of the values of an id layout: "bigint", "uuid",
// or "" when the layout did not resolve (either is then tried).
func idValue(l ids.Layout) string {
	switch l.(type) {
	case ids.UUIDv7, ids.UUIDv4, ids.HashUUID, *ids.UUIDv7, *ids.UUIDv4, *ids.HashUUID:
		return "uuid"
	case ids.Snowflake, ids.HashBigint, ids.Serial, *ids.Snowflake, *ids.HashBigint, *ids.Serial:
		return "bigint"
	}
	return ""
}

// parseTableID is parseID for table t, whose ids have layout l: an id of
// the other kind (a UUID where the layout's ids are bigints, or the other
// way round) is a 400 naming the layout, never a query.
func parseTableID(s string, t *tables.Table, l tableLayout) (any, error) {
	id, err := parseID(s)
	if err != nil || l.err != nil {
		return id, err
	}
	want := idValue(l.layout)
	switch id.(type) {
	case int64:
		if want == "uuid" {
			return nil, badRequest("wrong_id_kind", "table %s has id_layout %q, whose ids are UUIDs; %s is an integer", t.Name, t.IDLayout, s)
		}
	case string:
		if want == "bigint" {
			return nil, badRequest("wrong_id_kind", "table %s has id_layout %q, whose ids are bigints (decimal integers); %s is a UUID", t.Name, t.IDLayout, s)
		}
	}
	return id, nil
}

// rowResponse is the answer of a by-id lookup.
type rowResponse struct {
	Table string `json:"table"`
	ID    string `json:"id"`
	// DecodedID is what the id says per the table's id layout.
	DecodedID *idInfo      `json:"decoded_id"`
	Copies    []query.Copy `json:"copies"`
	Duplicate bool         `json:"duplicate"`
	// Move is the document's newest move (GET /v1/documents/{id} with a
	// move log configured); Anomaly says what is wrong with it, if anything.
	Move    *moveStatus `json:"move,omitempty"`
	Anomaly *rowAnomaly `json:"anomaly,omitempty"`
	// Placement names the copies the ring map says are not current
	// (GET /v1/documents/{id}; see placement.go).
	Placement *placementStatus       `json:"placement,omitempty"`
	Freshness []query.ShardFreshness `json:"freshness"`
	// Stopped: the table (or its move log) is stopped by the loader; its
	// data is as of Freshness until it is fixed (stopped.go).
	Stopped []query.StoppedTable `json:"stopped_tables,omitempty"`
}

// lookup answers a by-id read of table. With current (the document
// route), copies are narrowed to the current one: per the move log when
// moves is set (see moves.go), and per ring-map ownership (placement.go).
func (s *Server) lookup(w http.ResponseWriter, r *http.Request, table, idText string, moves *query.MoveLog, current bool) error {
	t, ok := s.cfg.Tables.ByName(table)
	if !ok {
		return &Error{Status: http.StatusNotFound, Code: "unknown_table", Message: fmt.Sprintf("table %q is not replicated", table)}
	}
	l := s.layouts[t.Name]
	var id any
	var err error
	if t.Composite() {
		id, err = parseKey(idText, t)
	} else {
		id, err = parseTableID(idText, t, l)
	}
	if err != nil {
		return err
	}
	// The watermarks of what the read reads: the table, and the move log
	// with it. Another table, stopped or behind, holds nothing back.
	topics := []string{t.Topic}
	if moves != nil {
		topics = append(topics, moves.Log.Topic)
	}
	fresh, err := s.freshness(w, r, topics)
	if err != nil {
		return err
	}
	stopped, err := s.stoppedIn(r.Context(), topics)
	if err != nil {
		return err
	}
	var decoded *idInfo // a key of several columns decodes nothing
	if !t.Composite() {
		decoded = decodeID(t.IDLayout, l.layout, l.err, canonicalID(id))
	}
	copies, move, anomaly, err := s.readCopies(r.Context(), t, id, moves)
	if query.IsKeyPartError(err) {
		return keyError(t, err)
	}
	if errors.Is(err, query.ErrUnknownTable) {
		copies, err = nil, nil // nothing loaded yet: a plain 404 with freshness
	}
	var placement *placementStatus
	if err == nil && current {
		copies, placement, err = s.ownedCopies(r.Context(), t, copies)
	}
	if err != nil {
		return err
	}
	if len(copies) == 0 {
		detail := notFoundDetail(fresh, decoded, move, anomaly)
		if len(stopped) > 0 {
			detail["stopped_tables"] = stopped
		}
		return &Error{Status: http.StatusNotFound, Code: "not_found",
			Message: fmt.Sprintf("no live row with id %s in %s as of the freshness below", idText, table),
			Detail:  detail}
	}
	return writeJSON(w, http.StatusOK, rowResponse{
		Table: table, ID: idText, DecodedID: decoded, Copies: copies, Duplicate: len(copies) > 1,
		Move: move, Anomaly: anomaly, Placement: placement, Freshness: fresh, Stopped: stopped,
	})
}

func (s *Server) document(w http.ResponseWriter, r *http.Request) error {
	moves, _ := query.MoveLogOf(s.cfg.Tables, s.cfg.DocumentsTable)
	return s.lookup(w, r, s.cfg.DocumentsTable, r.PathValue("id"), moves, true)
}

func (s *Server) tableRow(w http.ResponseWriter, r *http.Request) error {
	return s.lookup(w, r, r.PathValue("table"), r.PathValue("id"), nil, false)
}

// shards is the fleet's freshness: over every table that is not stopped,
// with the stopped ones listed apart (stopped.go).
func (s *Server) shards(w http.ResponseWriter, r *http.Request) error {
	all := s.cfg.Tables.Topics()
	fresh, err := s.freshnessOf(w, r, all, true)
	if err != nil {
		return err
	}
	stopped, err := s.stoppedIn(r.Context(), all)
	if err != nil {
		return err
	}
	statuses := make([]stoppedTableStatus, len(stopped))
	for i, t := range stopped {
		f, err := s.watch.snapshot(r.Context(), []string{t.Topic})
		if err != nil {
			return err
		}
		statuses[i] = stoppedTableStatus{StoppedTable: t, Freshness: f}
	}
	markStopped(w, stopped)
	return writeJSON(w, http.StatusOK, map[string]any{"shards": fresh, "stopped_tables": statuses})
}

// ready is GET /readyz. Ready: ClickHouse answers (in a cluster, every
// node of it). Not ready (503): it has not answered since this process
// started, so nothing says the configuration is right (a rollout should
// wait). Degraded (200): it answered before and does not now, or a node
// of the cluster does not (replicaHealth). The API still answers then —
// 4xx for bad input, /healthz, /metrics, the OpenAPI document, and every
// data route, exactly through the replicas left or with 503
// backend_unavailable and Retry-After — and every replica of the API
// shares the same ClickHouse, so taking them all out of a load balancer
// would only turn those answers into refused connections.
func (s *Server) ready(w http.ResponseWriter, r *http.Request) error {
	auth := "on"
	if s.cfg.Tokens == nil {
		auth = "off"
	}
	if err := s.ping(r.Context()); err != nil {
		if !s.reached.Load() {
			return &Error{Status: http.StatusServiceUnavailable, Code: "not_ready", Message: "ClickHouse is not reachable: " + err.Error()}
		}
		return writeJSON(w, http.StatusOK, map[string]any{"status": "degraded", "auth": auth,
			"clickhouse": "unreachable: " + err.Error(),
			"message":    "ClickHouse does not answer: data routes answer 503 backend_unavailable with Retry-After until it does"})
	}
	s.reached.Store(true)
	out := map[string]any{"status": "ready", "auth": auth, "clickhouse": "ok"}
	replicas, err := s.replicas(r.Context())
	if err != nil {
		out["status"], out["message"] = "degraded", "the ClickHouse cluster's nodes are not known: "+err.Error()
		return writeJSON(w, http.StatusOK, out)
	}
	if replicas != nil {
		states, message := replicaHealth(replicas)
		out["replicas"] = states
		if message != "" {
			out["status"], out["message"] = "degraded", message
		}
	}
	return writeJSON(w, http.StatusOK, out)
}

// replicaState is one node of the ClickHouse cluster in /readyz.
type replicaState struct {
	query.Replica
	State string `json:"state"` // ok, unreachable: <error>, or behind: <why>
}

// replicaHealth is each node's state, and what the API does while some do
// not answer or do not keep up ("" when all do): a ClickHouse shard with
// a replica left that keeps up is read from it, exactly; one with only
// replicas behind is read from the least behind; one with none fails
// every read that needs it.
func replicaHealth(replicas []query.Replica) ([]replicaState, string) {
	states := make([]replicaState, len(replicas))
	alive, current := map[int]bool{}, map[int]bool{}
	var down, behind []string
	for i, n := range replicas {
		states[i] = replicaState{Replica: n, State: "ok"}
		name := fmt.Sprintf("shard %d replica %d (%s)", n.Shard, n.Replica, n.Addr)
		switch {
		case n.Err != nil:
			states[i].State = "unreachable: " + n.Err.Error()
			down = append(down, name)
			continue
		case n.Behind != "":
			states[i].State = "behind: " + n.Behind
			behind = append(behind, name+": "+n.Behind)
		default:
			current[n.Shard] = true
		}
		alive[n.Shard] = true
	}
	if len(down) == 0 && len(behind) == 0 {
		return states, ""
	}
	var parts []string
	switch len(down) {
	case 0:
	case 1:
		parts = append(parts, "ClickHouse "+down[0]+" does not answer")
	default:
		parts = append(parts, "ClickHouse "+strings.Join(down, ", ")+" do not answer")
	}
	if len(behind) > 0 {
		parts = append(parts, "ClickHouse "+strings.Join(behind, "; ")+" (behind)")
	}
	message := strings.Join(parts, "; ") + ": "
	lost := shardsWithout(replicas, alive)
	stale := slices.DeleteFunc(shardsWithout(replicas, current), func(s string) bool { return slices.Contains(lost, s) })
	var then []string
	if len(lost) > 0 {
		then = append(then, "ClickHouse shard(s) "+strings.Join(lost, ", ")+
			" have no replica left, so data routes that read them answer 503 backend_unavailable with Retry-After")
	}
	if len(stale) > 0 {
		then = append(then, "ClickHouse shard(s) "+strings.Join(stale, ", ")+
			" have no replica that keeps up: reads of them go on from the least behind")
	}
	if len(then) == 0 {
		return states, message + "reads go on, exact, through the other replicas of its shard"
	}
	return states, message + strings.Join(then, "; ")
}

// shardsWithout lists the ClickHouse shards of replicas that have is false.
func shardsWithout(replicas []query.Replica, has map[int]bool) []string {
	var out []string
	for _, n := range replicas {
		if !has[n.Shard] && !slices.Contains(out, strconv.Itoa(n.Shard)) {
			out = append(out, strconv.Itoa(n.Shard))
		}
	}
	return out
}
