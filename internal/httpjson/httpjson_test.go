package httpjson

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestGet(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			w.Write([]byte(`{"n": 7}`))
		case "/bad":
			w.Write([]byte(`not json`))
		default:
			http.Error(w, `{"error":"not_found"}`, http.StatusNotFound)
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	var v struct{ N int }
	if code, err := Get(ctx, srv.Client(), srv.URL+"/ok", &v); err != nil || code != 200 || v.N != 7 {
		t.Fatalf("/ok: %d %v %+v", code, err, v)
	}
	v.N = 0
	if code, err := Get(ctx, srv.Client(), srv.URL+"/missing", &v); err != nil || code != 404 || v.N != 0 {
		t.Fatalf("/missing: %d %v %+v (a 404's body must not be decoded)", code, err, v)
	}
	if _, err := Get(ctx, srv.Client(), srv.URL+"/bad", &v); err == nil || !strings.Contains(err.Error(), "/bad") {
		t.Fatalf("/bad: %v, want an error naming the URL", err)
	}
	if code, err := Get(ctx, srv.Client(), srv.URL+"/bad", nil); err != nil || code != 200 {
		t.Fatalf("/bad with no out: %d %v", code, err)
	}
}
