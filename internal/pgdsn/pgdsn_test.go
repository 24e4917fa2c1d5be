package pgdsn

import (
	"errors"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		dsn, want string
	}{
		{"postgres://u:s3cr3tPart@host:notaport/db", "invalid port"},
		{"host=h user=u password='s3cr3tPart other port=1", "unterminated quoted string"},
		{"host=h user=u password=s3cr3tPart port=x", "invalid port"},
		{"postgres://u:s3cr3tPart%zz@host/db", "invalid percent-encoded token in password"},
		{"postgres://u:s3cr3tPart@host/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.crt", "unable to read CA file"},
	} {
		err := Check(c.dsn)
		if !errors.Is(err, ErrBad) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one saying %q", c.dsn, err, c.want)
		}
		// The password of the second is all of "'s3cr3tPart other port=1".
		for _, part := range []string{"s3cr3t", "Part", "other"} {
			if err != nil && strings.Contains(err.Error(), part) {
				t.Errorf("error shows the password: %v", err)
			}
		}
	}
	if err := Check("postgres://u:pw@127.0.0.1:5432/app?sslmode=disable"); err != nil {
		t.Errorf("a good DSN: %v", err)
	}
}
