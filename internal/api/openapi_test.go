package api

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// servedOutsideNew are routes the api binary serves next to the Server
// (cmd/api mounts the Prometheus handler); the document covers them too.
var servedOutsideNew = []string{"GET /metrics"}

type openAPIDoc struct {
	OpenAPI string                                `json:"openapi"`
	Paths   map[string]map[string]json.RawMessage `json:"paths"`
}

func loadOpenAPI(t *testing.T) openAPIDoc {
	t.Helper()
	var d openAPIDoc
	if err := json.Unmarshal(openAPIDocument, &d); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	return d
}

func TestOpenAPICopyIsIdentical(t *testing.T) {
	copyBytes, err := os.ReadFile("../../schema/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(copyBytes, openAPIDocument) {
		t.Fatal("schema/openapi.json differs from internal/api/openapi.json (the canonical file): cp internal/api/openapi.json schema/openapi.json")
	}
}

// TestOpenAPICoversRoutes: every pattern api.New registers is documented,
// and every documented operation is served.
func TestOpenAPICoversRoutes(t *testing.T) {
	d := loadOpenAPI(t)
	if !strings.HasPrefix(d.OpenAPI, "3.0.") {
		t.Fatalf("openapi version %q, want 3.0.x", d.OpenAPI)
	}
	var served []string
	for _, p := range append(slices.Clone(newTestServer(t).patterns), servedOutsideNew...) {
		if p == "/" {
			continue // the JSON 404/405 fallback, not a route
		}
		served = append(served, strings.Replace(p, "/{$}", "/", 1)) // the status page is the exact path /
	}
	var documented []string
	for path, ops := range d.Paths {
		for method := range ops {
			switch method {
			case "get", "put", "post", "delete", "options", "head", "patch", "trace":
				documented = append(documented, strings.ToUpper(method)+" "+path)
			}
		}
	}
	sort.Strings(served)
	sort.Strings(documented)
	for _, p := range served {
		if !slices.Contains(documented, p) {
			t.Errorf("route %q is served but not in openapi.json", p)
		}
	}
	for _, p := range documented {
		if !slices.Contains(served, p) {
			t.Errorf("openapi.json documents %q, which is not served", p)
		}
	}
}

// TestOpenAPIWellFormed: references resolve and every path parameter is
// declared (what a validator would check first).
func TestOpenAPIWellFormed(t *testing.T) {
	var doc any
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		t.Fatal(err)
	}
	var walk func(v any, at string)
	walk = func(v any, at string) {
		switch x := v.(type) {
		case map[string]any:
			for k, c := range x {
				if k == "$ref" {
					ref, _ := c.(string)
					if resolve(doc, ref) == nil {
						t.Errorf("%s: $ref %q does not resolve", at, ref)
					}
				}
				walk(c, at+"/"+k)
			}
		case []any:
			for _, c := range x {
				walk(c, at)
			}
		}
	}
	walk(doc, "#")
	param := regexp.MustCompile(`\{(\w+)\}`)
	for path, ops := range loadOpenAPI(t).Paths {
		for method, raw := range ops {
			var op struct {
				Parameters []struct {
					Name, In string
					Required bool
				} `json:"parameters"`
				Responses map[string]any `json:"responses"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			if len(op.Responses) == 0 {
				t.Errorf("%s %s: no responses", method, path)
			}
			for _, m := range param.FindAllStringSubmatch(path, -1) {
				if !slices.ContainsFunc(op.Parameters, func(p struct {
					Name, In string
					Required bool
				}) bool {
					return p.Name == m[1] && p.In == "path" && p.Required
				}) {
					t.Errorf("%s %s: path parameter %s not declared", method, path, m[1])
				}
			}
		}
	}
}

func resolve(doc any, ref string) any {
	if !strings.HasPrefix(ref, "#/") {
		return nil
	}
	cur := doc
	for _, part := range strings.Split(ref[2:], "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[part]
	}
	return cur
}

func TestOpenAPIServed(t *testing.T) {
	rec := httptest.NewRecorder()
	newTestServer(t).ServeHTTP(rec, httptest.NewRequest("GET", "/v1/openapi.json", nil))
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" || !bytes.Equal(rec.Body.Bytes(), openAPIDocument) {
		t.Fatalf("GET /v1/openapi.json: %d %s", rec.Code, rec.Header().Get("Content-Type"))
	}
}
