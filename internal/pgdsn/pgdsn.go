// Package pgdsn checks PostgreSQL DSNs with errors that never carry the
// DSN: it holds a password, and pgx's own parse error quotes the DSN with
// the password masked only as far as the DSN could be parsed (an
// unterminated quote in a keyword/value DSN shows the rest of it).
package pgdsn

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrBad is wrapped by every error of Check.
var ErrBad = errors.New("the DSN does not parse")

// Check parses dsn as pgx does. The error says why, in pgx's words, but
// without the DSN.
func Check(dsn string) error {
	_, err := pgconn.ParseConfig(dsn)
	if err == nil {
		return nil
	}
	// pgx's message is "cannot parse `<the DSN, masked>`: <why>".
	msg := err.Error()
	if i := strings.LastIndex(msg, "`: "); i >= 0 && strings.HasPrefix(msg, "cannot parse `") {
		return fmt.Errorf("%w: %s", ErrBad, msg[i+len("`: "):])
	}
	return ErrBad
}
