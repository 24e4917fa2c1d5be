package loader

import (
	"os"
	"regexp"
	"slices"
	"testing"
)

// TestDLQReasonsListed: every dead-letter reason batch.go and the apply
// steps (steps.go) use is in dlqReasons, so its series exists at 0 from
// start-up and the dead-letter alert sees its first record.
func TestDLQReasonsListed(t *testing.T) {
	for _, file := range []string{"batch.go", "steps.go"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		used := regexp.MustCompile(`deadLetter\{[^,]+, "([a-z_]+)"`).FindAllStringSubmatch(string(b), -1)
		if len(used) == 0 {
			t.Fatalf("no dead-letter reasons found in %s", file)
		}
		for _, u := range used {
			if !slices.Contains(dlqReasons, u[1]) {
				t.Errorf("%s dead-letters with reason %q, which dlqReasons (metrics.go) lacks", file, u[1])
			}
		}
	}
}
