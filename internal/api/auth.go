package api

// Bearer-token authentication and scope checks.
//
// Tokens are configured as entries `name:token:scope1,scope2` (one per line
// in a file, or separated by newlines or ';' in an environment variable;
// blank lines and lines starting with '#' are ignored). Only the SHA-256 of
// each token is kept in memory, and a presented token is hashed and compared
// against every entry with crypto/subtle, without stopping at a match: the
// time taken does not depend on which entry, if any, matched. Error messages
// name the entry (line and name), never the token.
//
// Answers: no or malformed credentials, or an unknown token, are 401 with
// `WWW-Authenticate: Bearer`; a known token without the route's scope is 403
// (RFC 6750 §3.1 insufficient_scope). Tokens are accepted only in the
// Authorization header: a token in a URL ends up in logs and histories.

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
)

// Scope is a permission a token grants.
type Scope string

// The scopes. ScopeAdmin grants every other scope.
const (
	// ScopeDocumentsRead: documents by id and search, the documents
	// table's rows through /v1/tables/{table}/rows/{id} (the same data as
	// /v1/documents/{id}), and the anomaly listings (ScopeAnomaliesRead,
	// which it granted before that scope existed). It does not grant any
	// other table's rows: those need RowsScope(table).
	ScopeDocumentsRead Scope = "documents:read"
	// ScopeRevenueRead: the revenue report.
	ScopeRevenueRead Scope = "revenue:read"
	// ScopeAnomaliesRead: the anomaly listings (/v1/anomalies/...).
	ScopeAnomaliesRead Scope = "anomalies:read"
	// ScopeAdmin: everything.
	ScopeAdmin Scope = "admin"
)

// rowsScopePrefix starts a per-table scope, rows:read:<table>.
const rowsScopePrefix = "rows:read:"

// RowsScope is the scope that reads table's rows through
// /v1/tables/{table}/rows/{id}.
func RowsScope(table string) Scope { return Scope(rowsScopePrefix + table) }

// Scopes lists every fixed scope a token may carry; RowsScope(table), for
// a configured table, is the one other kind.
var Scopes = []Scope{ScopeDocumentsRead, ScopeRevenueRead, ScopeAnomaliesRead, ScopeAdmin}

// scopeList is Scopes for error messages.
const scopeList = "documents:read, revenue:read, anomalies:read, rows:read:<table>, admin"

// tableScopeName is a table name as a rows:read:<table> scope may carry it
// (whether the table is configured is Tokens.CheckTables' to say).
var tableScopeName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// Route access levels besides a Scope.
const (
	// accessOpen: no token needed (health, readiness, this API's document).
	accessOpen Scope = ""
	// accessToken: any valid token, whatever its scopes (freshness, which
	// says nothing about the data itself).
	accessToken Scope = "token"
	// accessRows: RowsScope of the request's {table} path value.
	accessRows Scope = "rows"
)

// ErrBadTokens is wrapped by every token configuration error.
var ErrBadTokens = errors.New("bad token configuration")

// MinTokenLength is the shortest token accepted: shorter ones are guessable.
const MinTokenLength = 16

var (
	tokenName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	// tokenText is RFC 6750's b64token (no ':', which separates fields).
	tokenText = regexp.MustCompile(`^[A-Za-z0-9._~+/-]+=*$`)
)

// Tokens is a set of bearer tokens, safe for concurrent use. The set is
// replaced whole by Replace (a reload): a request sees the old set or the
// new one, never a mix.
type Tokens struct {
	cur atomic.Pointer[tokenSet]
}

// tokenSet is one parsed configuration; immutable.
type tokenSet struct {
	entries []tokenEntry
}

type tokenEntry struct {
	name   string
	line   int // where it was configured, for error messages
	hash   [sha256.Size]byte
	scopes []Scope
}

// allows reports whether e may use a route needing need; documentsTable
// is the table whose rows documents:read also grants.
func (e *tokenEntry) allows(need Scope, documentsTable string) bool {
	switch {
	case need == accessOpen || need == accessToken || slices.Contains(e.scopes, ScopeAdmin) || slices.Contains(e.scopes, need):
		return true
	case slices.Contains(e.scopes, ScopeDocumentsRead):
		return need == ScopeAnomaliesRead || (documentsTable != "" && need == RowsScope(documentsTable))
	}
	return false
}

// alsoGranted says which other scope grants need, for a 403's message.
func alsoGranted(need Scope, documentsTable string) string {
	if need == ScopeAnomaliesRead || (documentsTable != "" && need == RowsScope(documentsTable)) {
		return " (documents:read or admin also grant it)"
	}
	return " (admin also grants it)"
}

// LoadTokens reads a token file. A file others can read is the caller's to
// warn about (see TokenFileWarning).
func LoadTokens(path string) (*Tokens, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokens file: %w", err)
	}
	t, err := ParseTokens(string(b), false)
	if err != nil {
		return nil, fmt.Errorf("tokens file %s: %w", path, err)
	}
	return t, nil
}

// TokenFileWarning returns why the file at path is too widely readable,
// or "" when only its owner can read it.
func TokenFileWarning(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return ""
	}
	if m := st.Mode().Perm(); m&0o077 != 0 {
		return fmt.Sprintf("tokens file mode is %#o: group and others can read it (chmod 600)", m)
	}
	return ""
}

// ParseTokens parses token entries; semicolons also separate entries when
// semicolons is set (for an environment variable). It refuses an empty set,
// duplicate names or tokens, unknown scopes and tokens shorter than
// MinTokenLength.
func ParseTokens(text string, semicolons bool) (*Tokens, error) {
	t := &tokenSet{}
	names := map[string]bool{}
	var errs []error
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 4096), 64*1024)
	line := 0
	for sc.Scan() {
		line++
		items := []string{sc.Text()}
		if semicolons {
			items = strings.Split(sc.Text(), ";")
		}
		for _, item := range items {
			item = strings.TrimSpace(item)
			if item == "" || strings.HasPrefix(item, "#") {
				continue
			}
			e, err := parseTokenEntry(item)
			e.line = line
			if err != nil {
				errs = append(errs, fmt.Errorf("entry on line %d: %w", line, err))
				continue
			}
			if names[e.name] {
				errs = append(errs, fmt.Errorf("entry on line %d: name %q is used twice", line, e.name))
			}
			names[e.name] = true
			for _, o := range t.entries {
				if o.hash == e.hash {
					errs = append(errs, fmt.Errorf("entry on line %d (%s): same token as %s", line, e.name, o.name))
				}
			}
			t.entries = append(t.entries, e)
		}
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("line %d: %w", line+1, err))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrBadTokens, errors.Join(errs...))
	}
	if len(t.entries) == 0 {
		return nil, fmt.Errorf("%w: no token entries", ErrBadTokens)
	}
	out := &Tokens{}
	out.cur.Store(t)
	return out, nil
}

// CheckTables refuses a rows:read:<table> scope whose table is not
// configured (known says which are), naming the entry's line: a typo would
// otherwise grant nothing, silently.
func (t *Tokens) CheckTables(known func(table string) bool) error {
	var errs []error
	for _, e := range t.cur.Load().entries {
		for _, sc := range e.scopes {
			if table, ok := strings.CutPrefix(string(sc), rowsScopePrefix); ok && !known(table) {
				errs = append(errs, fmt.Errorf("entry on line %d (%s): scope %s: table %q is not configured", e.line, e.name, sc, table))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrBadTokens, errors.Join(errs...))
	}
	return nil
}

// Replace puts n's tokens in force in place of t's, for every request
// from now on.
func (t *Tokens) Replace(n *Tokens) { t.cur.Store(n.cur.Load()) }

// parseTokenEntry parses `name:token:scope1,scope2`. The token is never
// part of an error message.
func parseTokenEntry(s string) (tokenEntry, error) {
	var e tokenEntry
	name, rest, ok1 := strings.Cut(s, ":")
	token, scopes, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 {
		return e, errors.New("want name:token:scope1,scope2")
	}
	name, token = strings.TrimSpace(name), strings.TrimSpace(token)
	if !tokenName.MatchString(name) {
		return e, fmt.Errorf("name %q: want 1 to 64 of A-Z a-z 0-9 _ . -", name)
	}
	if len(token) < MinTokenLength || len(token) > 512 || !tokenText.MatchString(token) {
		return e, fmt.Errorf("%s: the token must be %d to 512 characters of A-Z a-z 0-9 - . _ ~ + / (then = padding)", name, MinTokenLength)
	}
	e.name, e.hash = name, sha256.Sum256([]byte(token))
	for i, sc := range strings.Split(scopes, ",") {
		sc = strings.TrimSpace(sc)
		if sc == "" {
			continue
		}
		table, isRows := strings.CutPrefix(sc, rowsScopePrefix)
		if !slices.Contains(Scopes, Scope(sc)) && (!isRows || !tableScopeName.MatchString(table)) {
			// Not echoed: with fields swapped, the "scope" is the token.
			return e, fmt.Errorf("%s: scope %d is not one of %s", name, i+1, scopeList)
		}
		if !slices.Contains(e.scopes, Scope(sc)) {
			e.scopes = append(e.scopes, Scope(sc))
		}
	}
	if len(e.scopes) == 0 {
		return e, fmt.Errorf("%s: no scope", name)
	}
	return e, nil
}

// Len is the number of tokens.
func (t *Tokens) Len() int { return len(t.cur.Load().entries) }

// Names lists the token names, in configuration order.
func (t *Tokens) Names() []string {
	entries := t.cur.Load().entries
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.name
	}
	return out
}

// lookup returns the entry whose token is presented. Every entry is
// compared, in constant time, whatever matches.
func (t *Tokens) lookup(presented string) (*tokenEntry, bool) {
	h := sha256.Sum256([]byte(presented))
	var found *tokenEntry
	entries := t.cur.Load().entries
	for i := range entries {
		if subtle.ConstantTimeCompare(h[:], entries[i].hash[:]) == 1 {
			found = &entries[i]
		}
	}
	return found, found != nil
}

// authRealm names the protection space in WWW-Authenticate.
const authRealm = `Bearer realm="tributary"`

// authorize checks r's bearer token against need and returns the token's
// name. With no tokens configured every request passes as "".
// documentsTable is the table whose rows documents:read grants; accessRows
// needs RowsScope of r's {table}.
func (t *Tokens) authorize(w http.ResponseWriter, r *http.Request, need Scope, documentsTable string) (string, error) {
	if t == nil || need == accessOpen {
		return "", nil
	}
	if need == accessRows {
		need = RowsScope(r.PathValue("table"))
	}
	h := r.Header.Get("Authorization")
	if h == "" {
		w.Header().Set("WWW-Authenticate", authRealm)
		return "", &Error{Status: http.StatusUnauthorized, Code: "unauthorized",
			Message: "this route needs a bearer token: Authorization: Bearer <token>"}
	}
	scheme, presented, ok := strings.Cut(h, " ")
	presented = strings.TrimSpace(presented)
	if !ok || !strings.EqualFold(scheme, "Bearer") || presented == "" {
		w.Header().Set("WWW-Authenticate", authRealm+`, error="invalid_request"`)
		return "", &Error{Status: http.StatusUnauthorized, Code: "unauthorized",
			Message: "the Authorization header must be: Bearer <token>"}
	}
	e, ok := t.lookup(presented)
	if !ok {
		w.Header().Set("WWW-Authenticate", authRealm+`, error="invalid_token"`)
		return "", &Error{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "the bearer token is not valid"}
	}
	if !e.allows(need, documentsTable) {
		w.Header().Set("WWW-Authenticate", fmt.Sprintf(`%s, error="insufficient_scope", scope=%q`, authRealm, string(need)))
		return e.name, &Error{Status: http.StatusForbidden, Code: "forbidden",
			Message: fmt.Sprintf("token %q lacks the %s scope this route needs%s", e.name, need, alsoGranted(need, documentsTable))}
	}
	return e.name, nil
}
