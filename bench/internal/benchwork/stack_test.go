package benchwork

import (
	"slices"
	"strings"
	"testing"
)

// TestDemoOf: the demo's addresses follow the stack's port offset, as
// deploy/local/demo.sh places them, and an offset that is not a number
// is refused by name.
func TestDemoOf(t *testing.T) {
	shards := map[int]string{0: "a", 1: "b", 5: "c"}
	for _, tc := range []struct {
		offset      string
		api, loader string
		readers     []string
		wantErr     bool
	}{
		{offset: "", api: "http://127.0.0.1:8080", loader: "127.0.0.1:9101",
			readers: []string{"127.0.0.1:9110", "127.0.0.1:9111", "127.0.0.1:9115"}},
		{offset: "800", api: "http://127.0.0.1:8880", loader: "127.0.0.1:9901",
			readers: []string{"127.0.0.1:9910", "127.0.0.1:9911", "127.0.0.1:9915"}},
		{offset: "eight", wantErr: true},
		{offset: "-200", wantErr: true},
	} {
		d, err := DemoOf(func(k string) string {
			if k == "TRIBUTARY_PORT_OFFSET" {
				return tc.offset
			}
			return ""
		})
		if tc.wantErr {
			if err == nil || !strings.Contains(err.Error(), "TRIBUTARY_PORT_OFFSET") || !strings.Contains(err.Error(), tc.offset) {
				t.Errorf("offset %q: error %v, want one naming $TRIBUTARY_PORT_OFFSET and the value", tc.offset, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("offset %q: %v", tc.offset, err)
		}
		if d.APIURL != tc.api || d.LoaderMetrics != tc.loader {
			t.Errorf("offset %q: API %s, loader metrics %s; want %s, %s", tc.offset, d.APIURL, d.LoaderMetrics, tc.api, tc.loader)
		}
		if got := d.ReaderMetrics(shards); !slices.Equal(got, tc.readers) {
			t.Errorf("offset %q: reader metrics %v, want %v", tc.offset, got, tc.readers)
		}
	}
}
