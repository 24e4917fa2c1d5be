package reader

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestErrorKindsListed: every kind the reader counts in
// tributary_reader_errors_total is in errorKinds, so its series exists at 0
// from start-up and the reader-errors alert sees the first one.
func TestErrorKindsListed(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`m\.errors\.WithLabelValues\("([a-z_]+)"\)`)
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range re.FindAllStringSubmatch(string(b), -1) {
			n++
			if !slices.Contains(errorKinds, u[1]) {
				t.Errorf("%s counts reader errors of kind %q, which errorKinds (metrics.go) lacks", f, u[1])
			}
		}
	}
	if n == 0 {
		t.Fatal("no error kinds found")
	}
}
