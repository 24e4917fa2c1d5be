package flagenv

import (
	"strings"
	"testing"
	"time"
)

func TestBool(t *testing.T) {
	cases := []struct {
		name, env string
		args      []string
		want      bool
		err       string
	}{
		{name: "default", want: false},
		{name: "from env", env: "true", want: true},
		{name: "flag over env", env: "true", args: []string{"--tls=false"}, want: false},
		{name: "bad env", env: "maybe", err: `$TEST_TLS="maybe": not a boolean`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("TEST_TLS", c.env)
			s := New("x", "x")
			var got bool
			s.Bool(&got, "tls", "TEST_TLS", false, "use TLS")
			err := s.Parse(c.args)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("want an error saying %q, got %v", c.err, err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %v, %v; want %v", got, err, c.want)
			}
		})
	}
}

func TestRequired(t *testing.T) {
	if err := Required("x.json", "tables", "TRIBUTARY_TABLES", ""); err != nil {
		t.Fatalf("a set value: %v", err)
	}
	if err := Required("", "tables", "TRIBUTARY_TABLES", ""); err == nil || err.Error() != "--tables (or $TRIBUTARY_TABLES) is required" {
		t.Fatalf("empty: %v", err)
	}
	if err := Required("", "fleet", "TRIBUTARY_FLEET", "the shards"); err == nil || err.Error() != "--fleet (or $TRIBUTARY_FLEET) is required: the shards" {
		t.Fatalf("empty with why: %v", err)
	}
}

func TestBounds(t *testing.T) {
	if err := AtLeast("batch-records", 1, 1); err != nil {
		t.Fatalf("at the bound: %v", err)
	}
	if err := AtLeast("batch-records", 0, 1); err == nil || err.Error() != "--batch-records must be >= 1, got 0" {
		t.Fatalf("below: %v", err)
	}
	if err := Positive("batch-wait", time.Millisecond); err != nil {
		t.Fatalf("positive: %v", err)
	}
	if err := Positive("batch-wait", time.Duration(0)); err == nil || err.Error() != "--batch-wait must be > 0, got 0s" {
		t.Fatalf("zero: %v", err)
	}
	if err := NotNegative("compact-interval", time.Duration(0)); err != nil {
		t.Fatalf("zero is not negative: %v", err)
	}
	if err := NotNegative("image-cache-bytes", -1); err == nil || err.Error() != "--image-cache-bytes must be >= 0, got -1" {
		t.Fatalf("negative: %v", err)
	}
}
