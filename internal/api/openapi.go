package api

import (
	_ "embed"
	"net/http"
)

// openAPIDocument is the OpenAPI 3.0 description of every route. The
// canonical file is internal/api/openapi.json (go:embed cannot reach
// ../../schema); schema/openapi.json is a byte-identical copy for readers of
// the repository, and TestOpenAPICopyIsIdentical keeps them so.
//
//go:embed openapi.json
var openAPIDocument []byte

// openapi serves the document as is.
func (s *Server) openapi(w http.ResponseWriter, _ *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	w.Write(openAPIDocument) //nolint:errcheck // the client went away; the status is already sent
	return nil
}
