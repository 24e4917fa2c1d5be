package api

// What a failed request answers and logs. A query ClickHouse refused is
// answered by whose problem it is (query.Classify): 400 when a value of
// the request does not fit its column, 503 with Retry-After only when
// ClickHouse is unreachable or overloaded, 504 when it ran out of time,
// and 500 when the query is wrong whatever the caller sends (retrying
// does not help; the log has ClickHouse's message).

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/tributary/tributary/internal/query"
)

// failure is the answer to a handler's error that is not an *Error.
func failure(err error) *Error {
	if errors.Is(err, context.DeadlineExceeded) {
		return &Error{Status: http.StatusGatewayTimeout, Code: "timeout", Message: "the query took too long"}
	}
	switch query.Classify(err) {
	case query.ClassInput:
		msg := "a value of the request does not fit the column it is compared with"
		if ex, ok := query.Exception(err); ok {
			msg += fmt.Sprintf(" (ClickHouse %s: %s)", ex.Name, clipMessage(ex.Message))
		}
		return &Error{Status: http.StatusBadRequest, Code: "bad_value", Message: msg}
	case query.ClassUnavailable:
		return &Error{Status: http.StatusServiceUnavailable, Code: "backend_unavailable",
			Message: "ClickHouse is not reachable or overloaded; retry later"}
	case query.ClassTimeout:
		return &Error{Status: http.StatusGatewayTimeout, Code: "timeout", Message: "the query took too long"}
	}
	msg := "the query failed; retrying will not help: the API's log has the reason"
	if ex, ok := query.Exception(err); ok {
		msg = fmt.Sprintf("the query failed (ClickHouse error %d %s); retrying will not help: the API's log has the reason", ex.Code, ex.Name)
	}
	return &Error{Status: http.StatusInternalServerError, Code: "query_failed", Message: msg}
}

// clipMessage is the first line of a ClickHouse message, at most 200 bytes.
func clipMessage(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// secretParams are query parameters whose values the access log never
// shows. Tokens belong in the Authorization header (auth.go), which is
// never logged; a client that puts one in the URL anyway is not helped
// by having it in the log too.
var secretParams = []string{"token", "access_token", "auth", "authorization", "key", "api_key", "apikey",
	"password", "secret", "bearer"}

// loggedQuery is the raw query string as the access log records it, with
// the value of every parameter named like a secret replaced. A query
// string that does not parse is logged as its length only.
func loggedQuery(raw string) string {
	if raw == "" {
		return ""
	}
	v, err := url.ParseQuery(raw)
	if err != nil {
		return fmt.Sprintf("(malformed, %d bytes)", len(raw))
	}
	secret := false
	for k := range v {
		for _, s := range secretParams {
			if strings.EqualFold(k, s) {
				secret = true
			}
		}
	}
	if !secret {
		return clipQuery(raw)
	}
	parts := strings.Split(raw, "&")
	for i, p := range parts {
		k, _, _ := strings.Cut(p, "=")
		name, err := url.QueryUnescape(k)
		if err != nil {
			name = k
		}
		for _, s := range secretParams {
			if strings.EqualFold(name, s) {
				parts[i] = k + "=REDACTED"
			}
		}
	}
	return clipQuery(strings.Join(parts, "&"))
}

// clipQuery bounds a logged query string.
func clipQuery(s string) string {
	if len(s) > 1024 {
		return s[:1024] + "..."
	}
	return s
}
