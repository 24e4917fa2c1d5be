package kafkaconn

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// testCA makes a CA and a server certificate for 127.0.0.1 signed by it,
// writes the CA's PEM to dir/name and returns the server's certificate.
func testCA(t *testing.T, dir, name string) tls.Certificate {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		t.Fatal(err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caTmpl, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}
}

// secureBroker is a kfake broker with TLS and one SCRAM-SHA-512 user.
func secureBroker(t *testing.T, cert tls.Certificate, user, pass string) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser(ScramSHA512, user, pass),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// check builds a client from sec and runs Check against brokers.
func check(t *testing.T, brokers []string, sec Security, wait time.Duration) error {
	t.Helper()
	if errs := sec.Validate(); len(errs) > 0 {
		t.Fatalf("Validate: %v", errs)
	}
	cl, err := sec.NewClient(brokers)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	return Check(ctx, cl, brokers, sec)
}

func TestCheckTLSAndSCRAM(t *testing.T) {
	dir := t.TempDir()
	cert := testCA(t, dir, "ca.crt")
	testCA(t, dir, "other-ca.crt") // an authority that signed nothing here
	const secret = "s3cret-Pa55word"
	brokers := secureBroker(t, cert, "tributary", secret)
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := Security{CAFile: filepath.Join(dir, "ca.crt"), SASLUser: "tributary", SASLPasswordFile: pwFile}

	cases := []struct {
		name string
		sec  Security
		want string // "" is success
	}{
		{"right CA and password (file)", good, ""},
		{"right CA and password (env)", Security{CAFile: good.CAFile, SASLUser: "tributary", SASLPassword: secret}, ""},
		// kfake closes the connection on a failed SCRAM exchange, where
		// Kafka answers SASL_AUTHENTICATION_FAILED (that message is
		// tested against Kafka: tests/kafka_secure_test.go).
		{"wrong password", Security{CAFile: good.CAFile, SASLUser: "tributary", SASLPassword: "wrong-password"}, "closed the connection or never answered"},
		{"unknown user", Security{CAFile: good.CAFile, SASLUser: "nobody", SASLPassword: secret}, "closed the connection or never answered"},
		{"no SASL", Security{CAFile: good.CAFile}, "no answer over TLS"},
		{"wrong CA", Security{CAFile: filepath.Join(dir, "other-ca.crt"), SASLUser: "tributary", SASLPassword: secret}, "not signed by an authority we trust"},
		{"wrong server name", Security{CAFile: good.CAFile, ServerName: "kafka.example", SASLUser: "tributary", SASLPassword: secret}, "does not name this host"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wait := 20 * time.Second
			if tc.want != "" {
				wait = 3 * time.Second // the closed-connection cases retry until then
			}
			err := check(t, brokers, tc.sec, wait)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Check succeeded, want an error saying %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check: %v\nwant it to say %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), brokers[0]) {
				t.Fatalf("Check: %v\nwant it to name the broker %s", err, brokers[0])
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "wrong-password") {
				t.Fatalf("Check's error carries the password: %v", err)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	cases := []struct {
		name string
		sec  Security
		want []string
	}{
		{"zero is plaintext", Security{}, nil},
		{"cert without key", Security{CertFile: missing}, []string{"--kafka-cert-file and --kafka-key-file go together", "--kafka-cert-file: stat " + missing}},
		{"unreadable CA", Security{CAFile: missing}, []string{"--kafka-ca-file: stat " + missing}},
		{"user without password", Security{SASLUser: "u"}, []string{"--kafka-sasl-user is set but no password"}},
		{"password without user", Security{SASLPassword: "p"}, []string{"no --kafka-sasl-user"}},
		{"two passwords", Security{SASLUser: "u", SASLPassword: "p", SASLPasswordFile: missing}, []string{"use one"}},
		{"unknown mechanism", Security{SASLUser: "u", SASLPassword: "p", SASLMechanism: "PLAIN"}, []string{`--kafka-sasl-mechanism must be SCRAM-SHA-512 or SCRAM-SHA-256, got "PLAIN"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := tc.sec.Validate()
			var all []string
			for _, e := range errs {
				all = append(all, e.Error())
			}
			joined := strings.Join(all, "\n")
			if len(tc.want) == 0 && len(errs) > 0 {
				t.Fatalf("Validate: %s", joined)
			}
			for _, w := range tc.want {
				if !strings.Contains(joined, w) {
					t.Errorf("Validate said:\n%s\nwant %q", joined, w)
				}
			}
			if strings.Contains(joined, `"p"`) {
				t.Errorf("Validate's errors carry the password: %s", joined)
			}
		})
	}
}

func TestClientOptsBadFiles(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "pw")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		sec  Security
		want string
	}{
		{"CA file without a certificate", Security{CAFile: notPEM}, "kafka CA file " + notPEM + " (--kafka-ca-file): no PEM certificate in it"},
		{"bad client certificate", Security{CertFile: notPEM, KeyFile: notPEM}, "kafka client certificate " + notPEM},
		{"empty password file", Security{SASLUser: "u", SASLPasswordFile: empty}, "kafka SASL password file " + empty + " (--kafka-sasl-password-file) is empty"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.sec.ClientOpts()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ClientOpts: %v, want %q", err, tc.want)
			}
		})
	}
}

func TestDescribeNeverShowsThePassword(t *testing.T) {
	got := Security{TLS: true, SASLUser: "loader", SASLPassword: "hunter2"}.Describe([]string{"k1:9093", "k2:9093"})
	if want := "k1:9093,k2:9093 (TLS, SASL SCRAM-SHA-512 user loader)"; got != want {
		t.Fatalf("Describe = %q, want %q", got, want)
	}
	if got := (Security{}).Describe([]string{"k:9092"}); got != "k:9092 (plaintext)" {
		t.Fatalf("Describe of the zero Security = %q", got)
	}
}
