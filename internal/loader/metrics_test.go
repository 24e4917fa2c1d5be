package loader

import (
	"os"
	"regexp"
	"slices"
	"testing"
)

// TestDLQReasonsListed: every dead-letter reason batch.go uses is in
// dlqReasons, so its series exists at 0 from start-up and the dead-letter
// alert sees its first record.
func TestDLQReasonsListed(t *testing.T) {
	b, err := os.ReadFile("batch.go")
	if err != nil {
		t.Fatal(err)
	}
	used := regexp.MustCompile(`deadLetter\{[^,]+, "([a-z_]+)"`).FindAllStringSubmatch(string(b), -1)
	if len(used) == 0 {
		t.Fatal("no dead-letter reasons found in batch.go")
	}
	for _, u := range used {
		if !slices.Contains(dlqReasons, u[1]) {
			t.Errorf("batch.go dead-letters with reason %q, which dlqReasons (metrics.go) lacks", u[1])
		}
	}
}
