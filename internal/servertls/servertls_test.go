package servertls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tributary/tributary/internal/testcert"
)

func leafPEM(l testcert.Leaf) ([]byte, []byte) { return l.CertPEM, l.KeyPEM }

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// value reads a counter's or a gauge's value.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	if d.Counter != nil {
		return d.GetCounter().GetValue()
	}
	return d.GetGauge().GetValue()
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// serve starts a TLS listener with s's configuration that completes the
// handshake of every connection and closes it.
func serve(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	tln := tls.NewListener(ln, s.Config())
	go func() {
		for {
			c, err := tln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if c.(*tls.Conn).Handshake() == nil {
					c.Write([]byte("ok")) //nolint:errcheck // the client reads it or not
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// dial handshakes with addr trusting roots, showing cert if any, and
// returns the server certificate's common name; the error is the
// handshake's or, for a refused client certificate (TLS 1.3 reports it
// after the handshake), the first read's.
func dial(addr string, roots *x509.CertPool, cert *tls.Certificate) (string, error) {
	cfg := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck // only bounds the read
	if _, err := io.ReadFull(c, make([]byte, 2)); err != nil {
		return "", err
	}
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
}

func TestReloadOnChange(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	root := testcert.NewCA(t, "root")
	c, k := leafPEM(root.Server(t, "first"))
	write(t, certFile, c)
	write(t, keyFile, k)
	reg := prometheus.NewRegistry()
	s, err := New(Options{CertFile: certFile, KeyFile: keyFile}, quiet, reg)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, s)
	if name, err := dial(addr, testcert.Pool(root), nil); err != nil || name != "first" {
		t.Fatalf("first handshake: %q, %v", name, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, 10*time.Millisecond, nil) }()

	// A replacement expired an hour ago is refused; the first stays.
	c2, k2 := leafPEM(root.Issue(t, "expired", false, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)))
	write(t, keyFile, k2)
	write(t, certFile, c2)
	for value(t, s.reloads.WithLabelValues("refused")) == 0 {
		if ctx.Err() != nil {
			t.Fatal("the expired replacement was never tried")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if name, err := dial(addr, testcert.Pool(root), nil); err != nil || name != "first" {
		t.Fatalf("after an expired replacement: %q, %v; want the first certificate still", name, err)
	}

	// A good replacement is put in force without a restart.
	c3, k3 := leafPEM(root.Server(t, "second"))
	write(t, keyFile, k3)
	write(t, certFile, c3)
	for {
		name, err := dial(addr, testcert.Pool(root), nil)
		if err != nil {
			t.Fatal(err)
		}
		if name == "second" {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the new certificate was never served")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := value(t, s.reloads.WithLabelValues("loaded")); n < 1 {
		t.Errorf("loaded reloads %v, want >= 1", n)
	}
	leaf, _ := tls.X509KeyPair(c3, k3)
	if got, want := value(t, s.expiry), float64(leaf.Leaf.NotAfter.Unix()); got != want {
		t.Errorf("expiry gauge %v, want %v", got, want)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestRefusedFiles(t *testing.T) {
	dir := t.TempDir()
	root := testcert.NewCA(t, "root")
	goodCert, goodKey := leafPEM(root.Server(t, "server"))
	_, otherKey := leafPEM(root.Server(t, "other"))
	expired, expiredKey := leafPEM(root.Issue(t, "old", false, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)))
	future, futureKey := leafPEM(root.Issue(t, "future", false, time.Now().Add(time.Hour), time.Now().Add(2*time.Hour)))
	files := map[string][]byte{"good.crt": goodCert, "good.key": goodKey, "other.key": otherKey, "expired.crt": expired,
		"expired.key": expiredKey, "future.crt": future, "future.key": futureKey, "garbage": []byte("not PEM\n"),
		"ca.pem": root.PEM, "key-as-ca.pem": goodKey}
	for name, b := range files {
		write(t, filepath.Join(dir, name), b)
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	cases := []struct {
		name string
		o    Options
		want []string
	}{
		{"key of another certificate", Options{CertFile: p("good.crt"), KeyFile: p("other.key")},
			[]string{p("good.crt"), p("other.key"), "private key does not match public key"}},
		{"expired", Options{CertFile: p("expired.crt"), KeyFile: p("expired.key")}, []string{p("expired.crt"), `"CN=old"`, "expired on"}},
		{"not yet valid", Options{CertFile: p("future.crt"), KeyFile: p("future.key")}, []string{p("future.crt"), "not valid before"}},
		{"not PEM", Options{CertFile: p("garbage"), KeyFile: p("good.key")}, []string{p("garbage"), "failed to find any PEM data"}},
		{"missing", Options{CertFile: p("nothing"), KeyFile: p("good.key")}, []string{p("nothing"), "no such file"}},
		{"client CA without certificates", Options{CertFile: p("good.crt"), KeyFile: p("good.key"), ClientCAFile: p("garbage")},
			[]string{p("garbage"), "no PEM certificate"}},
		{"key as client CA", Options{CertFile: p("good.crt"), KeyFile: p("good.key"), ClientCAFile: p("key-as-ca.pem")},
			[]string{p("key-as-ca.pem"), "PEM block 1 is a PRIVATE KEY"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(c.o, quiet, prometheus.NewRegistry())
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			for _, key := range [][]byte{goodKey, otherKey, expiredKey, futureKey} {
				if line := strings.Split(string(key), "\n")[1]; strings.Contains(err.Error(), line) {
					t.Errorf("error shows a key: %q", err)
				}
			}
		})
	}
	if _, err := New(Options{CertFile: p("good.crt"), KeyFile: p("good.key"), ClientCAFile: p("ca.pem")}, quiet, prometheus.NewRegistry()); err != nil {
		t.Errorf("good files refused: %v", err)
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{CertFile: "a"}, "--tls-cert-file and --tls-key-file go together"},
		{Options{KeyFile: "a"}, "--tls-cert-file and --tls-key-file go together"},
		{Options{ClientCAFile: "a"}, "--tls-client-ca-file needs --tls-cert-file"},
	} {
		errs := c.o.Validate("--tls")
		if len(errs) == 0 || !strings.Contains(errs[0].Error(), c.want) {
			t.Errorf("%+v: errors %v, want %q", c.o, errs, c.want)
		}
	}
	if errs := (Options{CertFile: "a", KeyFile: "b", ClientCAFile: "c"}).Validate("--tls"); len(errs) != 0 {
		t.Errorf("complete options refused: %v", errs)
	}
}

func TestClientCertificates(t *testing.T) {
	dir := t.TempDir()
	root, clients, stranger := testcert.NewCA(t, "root"), testcert.NewCA(t, "clients"), testcert.NewCA(t, "stranger")
	c, k := leafPEM(root.Server(t, "server"))
	write(t, filepath.Join(dir, "tls.crt"), c)
	write(t, filepath.Join(dir, "tls.key"), k)
	write(t, filepath.Join(dir, "clients.pem"), clients.PEM)
	s, err := New(Options{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key"),
		ClientCAFile: filepath.Join(dir, "clients.pem")}, quiet, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, s)
	pair := func(l testcert.Leaf) *tls.Certificate {
		p := l.Pair(t)
		return &p
	}
	good := pair(clients.Client(t, "app"))
	if name, err := dial(addr, testcert.Pool(root), good); err != nil || name != "server" {
		t.Fatalf("a client with a good certificate: %q, %v", name, err)
	}
	for _, bad := range []struct {
		name string
		cert *tls.Certificate
	}{
		{"no certificate", nil},
		{"signed by another CA", pair(stranger.Client(t, "app"))},
		{"expired", pair(clients.Issue(t, "app", true, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)))},
	} {
		if _, err := dial(addr, testcert.Pool(root), bad.cert); err == nil {
			t.Errorf("a client with %s was let in", bad.name)
		} else {
			t.Logf("%s: %v", bad.name, err)
		}
	}
}

// TestReloadOnSignal: with polling off, a signal reloads the files.
func TestReloadOnSignal(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	root := testcert.NewCA(t, "root")
	root.Server(t, "first").Write(t, certFile, keyFile)
	s, err := New(Options{CertFile: certFile, KeyFile: keyFile}, quiet, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hup := make(chan os.Signal, 1)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, 0, hup) }()
	root.Server(t, "second").Write(t, certFile, keyFile)
	hup <- syscall.SIGHUP
	for value(t, s.reloads.WithLabelValues("loaded")) == 0 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	if name, err := dial(addr, testcert.Pool(root), nil); err != nil || name != "second" {
		t.Fatalf("after SIGHUP: %q, %v; want the second certificate", name, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
