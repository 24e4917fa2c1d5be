package verify

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/tributary/tributary/internal/envelope"
)

// APIError is an answer of the API the verifier cannot use: an unknown
// table, a bad id, a server error that persisted through the retries.
type APIError struct {
	Status  int
	Code    string // the API's "error" field
	Message string
	Path    string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("api %s: %d %s: %s", e.Path, e.Status, e.Code, e.Message)
}

// apiClient reads the API under test.
type apiClient struct {
	base    string
	http    *http.Client
	token   string // bearer token, if any; never logged
	timeout time.Duration
	// attempts is how often a request is tried when the transport fails or
	// the API answers 5xx.
	attempts int
	backoff  time.Duration
}

func newAPIClient(cfg Config, timeout time.Duration) (*apiClient, error) {
	hc := cfg.HTTPClient
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = cfg.Concurrency
		if cfg.APICAFile != "" {
			b, err := os.ReadFile(cfg.APICAFile)
			if err != nil {
				return nil, fmt.Errorf("API CA file: %w", err)
			}
			roots := x509.NewCertPool()
			if !roots.AppendCertsFromPEM(b) {
				return nil, fmt.Errorf("API CA file %s: no PEM certificate in it", cfg.APICAFile)
			}
			tr.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		}
		hc = &http.Client{Transport: tr}
	}
	return &apiClient{base: strings.TrimRight(cfg.APIURL, "/"), http: hc, token: cfg.APIToken, timeout: timeout,
		attempts: 3, backoff: 200 * time.Millisecond}, nil
}

// get fetches path and returns the status and body of the last attempt.
func (c *apiClient) get(ctx context.Context, path string) (int, []byte, error) {
	var lastErr error
	for attempt := 0; attempt < c.attempts; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return 0, nil, ctx.Err()
			case <-time.After(c.backoff << (attempt - 1)):
			}
		}
		status, body, err := c.once(ctx, path)
		if err == nil && status < 500 {
			return status, body, nil
		}
		if err == nil {
			err = apiError(status, body, path)
		}
		if ctx.Err() != nil {
			return 0, nil, err
		}
		lastErr = err
	}
	return 0, nil, lastErr
}

func (c *apiClient) once(ctx context.Context, path string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("api %s: %w", path, err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("api %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, fmt.Errorf("api %s: read answer: %w", path, err)
	}
	return resp.StatusCode, body, nil
}

func apiError(status int, body []byte, path string) *APIError {
	var e struct {
		Code    string `json:"error"`
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &e) != nil || e.Code == "" {
		e.Code, e.Message = "unexpected_answer", strings.TrimSpace(cut(string(body), 200))
	}
	return &APIError{Status: status, Code: e.Code, Message: e.Message, Path: path}
}

// row returns the copies the API has of one id; none for a plain 404.
func (c *apiClient) row(ctx context.Context, table, id string) ([]apiCopy, error) {
	path := "/v1/tables/" + url.PathEscape(table) + "/rows/" + url.PathEscape(id)
	status, body, err := c.get(ctx, path)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		e := apiError(status, body, path)
		if status == http.StatusNotFound && e.Code == "not_found" {
			return nil, nil
		}
		return nil, e
	}
	return decodeCopies(body)
}

// decodeCopies reads the copies of a GET .../rows/{id} answer. Numbers
// stay json.Number, so nothing is rounded through float64.
func decodeCopies(body []byte) ([]apiCopy, error) {
	var ans struct {
		Copies []struct {
			Shard *int           `json:"shard"`
			Row   map[string]any `json:"row"`
		} `json:"copies"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&ans); err != nil {
		return nil, fmt.Errorf("api: decode row answer: %w", err)
	}
	out := make([]apiCopy, 0, len(ans.Copies))
	for i, c := range ans.Copies {
		if c.Shard == nil || c.Row == nil {
			return nil, fmt.Errorf("api: row answer: copy %d lacks shard or row", i)
		}
		out = append(out, apiCopy{Shard: *c.Shard, Row: c.Row})
	}
	return out, nil
}

// apiShard is one entry of GET /v1/shards.
type apiShard struct {
	Shard     int
	CommitLSN envelope.LSN
	Complete  bool
}

// shards returns the API's per-shard freshness.
func (c *apiClient) shards(ctx context.Context) ([]apiShard, error) {
	const path = "/v1/shards"
	status, body, err := c.get(ctx, path)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, apiError(status, body, path)
	}
	return decodeShards(body)
}

func decodeShards(body []byte) ([]apiShard, error) {
	var ans struct {
		Shards []struct {
			Shard     *int   `json:"shard"`
			CommitLSN string `json:"commit_lsn"`
			Complete  bool   `json:"complete"`
		} `json:"shards"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		return nil, fmt.Errorf("api: decode shards answer: %w", err)
	}
	out := make([]apiShard, 0, len(ans.Shards))
	for _, s := range ans.Shards {
		if s.Shard == nil {
			return nil, errors.New("api: shards answer: entry without shard")
		}
		lsn, err := envelope.ParseLSN(s.CommitLSN)
		if err != nil {
			return nil, fmt.Errorf("api: shards answer: shard %d: %w", *s.Shard, err)
		}
		out = append(out, apiShard{Shard: *s.Shard, CommitLSN: lsn, Complete: s.Complete})
	}
	return out, nil
}
