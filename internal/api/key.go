package api

import (
	"fmt"
	"strings"

	"github.com/tributary/tributary/internal/rowkey"
	"github.com/tributary/tributary/internal/tables"
)

// A table identified by several columns is read by its key text:
// GET /v1/tables/{table}/rows/{k1},{k2} — the key columns' values in key
// order, joined by ",", a "\" before every "\" or "," inside a value
// (internal/rowkey), percent-encoded as any path segment.

// maxKeyLen bounds a key text: far beyond any real key, short of a
// request that is only bytes.
const maxKeyLen = 1024

// keyParts is a parsed key text, the values of the key columns in key
// order, as lookup hands it to readCopies.
type keyParts []string

// keyForm is the path of a row of t, for messages:
// /v1/tables/order_lines/rows/{tenant_id},{line_no}.
func keyForm(t *tables.Table) string {
	return "/v1/tables/" + t.Name + "/rows/{" + strings.Join(t.Key(), "},{") + "}"
}

// parseKey splits a key text of t, or says how one is written.
func parseKey(text string, t *tables.Table) (keyParts, error) {
	if len(text) > maxKeyLen {
		return nil, badRequest("bad_id", "key is %d bytes, more than %d; %s", len(text), maxKeyLen, keyHelp(t))
	}
	parts, err := rowkey.Parse(text, len(t.Key()))
	if err != nil {
		return nil, badRequest("bad_id", "key %q: %v; %s", text, strings.TrimPrefix(err.Error(), rowkey.ErrMalformed.Error()+": "), keyHelp(t))
	}
	return parts, nil
}

// keyError is the 400 of a key part that is not a value of its column.
func keyError(t *tables.Table, err error) error {
	return badRequest("bad_id", "%v; %s", err, keyHelp(t))
}

// keyHelp says how t's rows are named.
func keyHelp(t *tables.Table) string {
	return fmt.Sprintf(`%s is keyed by %s: %s (a "," or "\" inside a value is written "\," or "\\")`, t.Name, t.KeyForm(), keyForm(t))
}
