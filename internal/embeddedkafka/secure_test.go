package embeddedkafka

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/kafkaconn"
)

// writeCerts writes a CA (ca.crt) and a server certificate for 127.0.0.1
// it signed (server.crt, server.key) into dir.
func writeCerts(t *testing.T, dir string) {
	t.Helper()
	write := func(name, typ string, der []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	write("ca.crt", "CERTIFICATE", caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srv := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, srv, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	write("server.crt", "CERTIFICATE", der)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write("server.key", "PRIVATE KEY", keyDER)
}

// TestTLSAndSASL: with a certificate and a SCRAM user, the broker serves
// a client of internal/kafkaconn with the right CA and password (a record
// goes in and comes back), and a plaintext client gets no answer.
func TestTLSAndSASL(t *testing.T) {
	dir := t.TempDir()
	writeCerts(t, dir)
	b, err := Start(Config{Listen: "127.0.0.1:0", Partitions: 1, TLSCertFile: filepath.Join(dir, "server.crt"),
		TLSKeyFile: filepath.Join(dir, "server.key"), SASLUser: "tributary", SASLPassword: "pw-embedded"},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	brokers := []string{b.Addr()}
	sec := kafkaconn.Security{CAFile: filepath.Join(dir, "ca.crt"), SASLUser: "tributary", SASLPassword: "pw-embedded"}
	cl, err := sec.NewClient(brokers, kgo.DefaultProduceTopic("secure"), kgo.AllowAutoTopicCreation(),
		kgo.ConsumeTopics("secure"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafkaconn.Check(ctx, cl, brokers, sec); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("over TLS")}).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	fs := cl.PollFetches(ctx)
	if err := fs.Err(); err != nil {
		t.Fatalf("fetch: %v", err)
	}
	if recs := fs.Records(); len(recs) != 1 || string(recs[0].Value) != "over TLS" {
		t.Fatalf("fetched %d records, want the one produced", len(recs))
	}

	plain, err := kafkaconn.Security{}.NewClient(brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
	defer pcancel()
	if err := kafkaconn.Check(pctx, plain, brokers, kafkaconn.Security{}); err == nil {
		t.Fatal("a plaintext client was answered by the TLS+SASL broker")
	}
}
