package chstore

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2"
)

func TestTLSOptionsValidate(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "x.pem")
	if err := os.WriteFile(file, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		o    TLSOptions
		on   bool
		want []string // substrings of the errors, in order; none: valid
	}{
		{name: "off", o: TLSOptions{}},
		{name: "on alone", o: TLSOptions{Enabled: true}, on: true},
		{name: "a CA file turns it on", o: TLSOptions{CAFile: file}, on: true},
		{name: "a server name turns it on", o: TLSOptions{ServerName: "ch"}, on: true},
		{name: "cert without key", o: TLSOptions{CertFile: file}, on: true, want: []string{"go together"}},
		{name: "missing CA file", o: TLSOptions{CAFile: filepath.Join(dir, "none.pem")}, on: true, want: []string{"--clickhouse-ca-file", "no such file"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.o.On(); got != c.on {
				t.Errorf("On() = %v, want %v", got, c.on)
			}
			errs := c.o.Validate()
			var text []string
			for _, e := range errs {
				text = append(text, e.Error())
			}
			all := strings.Join(text, "; ")
			if len(c.want) == 0 && len(errs) > 0 {
				t.Fatalf("want valid, got %s", all)
			}
			for _, w := range c.want {
				if !strings.Contains(all, w) {
					t.Errorf("errors %q do not say %q", all, w)
				}
			}
		})
	}
}

func TestTLSConfigRefusesBadPEM(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(file, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := TLSOptions{CAFile: file}.config()
	if err == nil || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("want an error naming %s and its fault, got %v", file, err)
	}
	c, err := TLSOptions{}.config()
	if c != nil || err != nil {
		t.Fatalf("TLS off: want no config, got %v, %v", c, err)
	}
}

func TestPassword(t *testing.T) {
	file := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(file, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := Password("", file); err != nil || got != "s3cret" {
		t.Errorf("from file: got %q, %v; want s3cret without the newline", got, err)
	}
	if got, err := Password("env", ""); err != nil || got != "env" {
		t.Errorf("from env: got %q, %v", got, err)
	}
	if _, err := Password("env", file); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("both set: want an error without the secrets, got %v", err)
	}
	if _, err := Password("", file+".missing"); err == nil || !strings.Contains(err.Error(), "--clickhouse-password-file") {
		t.Errorf("missing file: want an error naming the flag, got %v", err)
	}
}

func TestRefused(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want bool
		what string
	}{
		{"wrong password", fmt.Errorf("ping: %w", &clickhouse.Exception{Code: 193, Message: "Wrong password"}), true, "the server refused"},
		{"unknown CA", fmt.Errorf("dial: %w", x509.UnknownAuthorityError{}), true, "TLS handshake failed"},
		{"expired", &tls.CertificateVerificationError{Err: x509.CertificateInvalidError{Reason: x509.Expired}}, true, "TLS handshake failed"},
		{"wrong name", x509.HostnameError{Host: "ch"}, true, "TLS handshake failed"},
		{"plain server on the TLS side", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, true, "TLS handshake failed"},
		{"not up", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, false, "no answer"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Refused(c.err); got != c.want {
				t.Errorf("Refused = %v, want %v", got, c.want)
			}
			if got := what(c.err, false); !strings.HasPrefix(got, c.what) {
				t.Errorf("what = %q, want it to start with %q", got, c.what)
			}
		})
	}
}
