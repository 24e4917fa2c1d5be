package chstore

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/tributary/tributary/internal/flagenv"
)

// TLSOptions says whether the native protocol is wrapped in TLS and which
// certificates it trusts and shows. The zero value is plain TCP.
type TLSOptions struct {
	// Enabled turns TLS on; setting any file or the server name does too.
	Enabled bool
	// CAFile is a PEM bundle of the authorities that may sign the server's
	// certificate; empty trusts the system's.
	CAFile string
	// CertFile and KeyFile are the client's certificate and key, for a
	// server that asks for one; both or neither.
	CertFile, KeyFile string
	// ServerName is the name the server's certificate must carry; empty is
	// the host of the address.
	ServerName string
}

// On tells whether TLS is used.
func (t TLSOptions) On() bool {
	return t.Enabled || t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != ""
}

// Validate reports settings that cannot work, before anything connects.
func (t TLSOptions) Validate() []error {
	var errs []error
	if (t.CertFile == "") != (t.KeyFile == "") {
		errs = append(errs, errors.New("--clickhouse-cert-file and --clickhouse-key-file go together: set both or neither"))
	}
	for flag, f := range map[string]string{"--clickhouse-ca-file": t.CAFile, "--clickhouse-cert-file": t.CertFile, "--clickhouse-key-file": t.KeyFile} {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", flag, err))
		}
	}
	return errs
}

// config builds the tls.Config, or nil when TLS is off. Verification is
// never turned off: a server whose certificate the CA did not sign, or that
// names another host, is refused.
func (t TLSOptions) config() (*tls.Config, error) {
	if !t.On() {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("clickhouse CA file: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("clickhouse CA file %s: no PEM certificate in it", t.CAFile)
		}
	}
	if t.CertFile != "" || t.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("clickhouse client certificate %s / key %s: %w", t.CertFile, t.KeyFile, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// addTLSFlags registers the TLS flags every binary that dials ClickHouse
// shares, with their environment fallbacks. Only file names are flags: the
// key itself never reaches argv.
func addTLSFlags(fs *flagenv.Set, t *TLSOptions) {
	fs.Bool(&t.Enabled, "clickhouse-tls", "TRIBUTARY_CLICKHOUSE_TLS", false, "dial ClickHouse's native protocol over TLS (its tcp_port_secure); on as well when any --clickhouse-*-file or --clickhouse-server-name is set. The server's certificate is always verified")
	fs.String(&t.CAFile, "clickhouse-ca-file", "TRIBUTARY_CLICKHOUSE_CA_FILE", "", "PEM file of the authorities trusted to sign ClickHouse's certificate (empty: the system's)")
	fs.String(&t.CertFile, "clickhouse-cert-file", "TRIBUTARY_CLICKHOUSE_CERT_FILE", "", "PEM client certificate shown to ClickHouse (with --clickhouse-key-file)")
	fs.String(&t.KeyFile, "clickhouse-key-file", "TRIBUTARY_CLICKHOUSE_KEY_FILE", "", "PEM private key of --clickhouse-cert-file")
	fs.String(&t.ServerName, "clickhouse-server-name", "TRIBUTARY_CLICKHOUSE_SERVER_NAME", "", "name ClickHouse's certificate must carry (empty: the host of --clickhouse-addr)")
}

// AddPasswordFileFlag registers --clickhouse-password-file, the other way
// than $TRIBUTARY_CLICKHOUSE_PASSWORD to give the password.
func AddPasswordFileFlag(fs *flagenv.Set, p *string) {
	fs.String(p, "clickhouse-password-file", "TRIBUTARY_CLICKHOUSE_PASSWORD_FILE", "", "file holding the ClickHouse user's password (one line; instead of $TRIBUTARY_CLICKHOUSE_PASSWORD)")
}

// Password resolves the password from the environment's value and a file
// name, at most one of them set. The file's trailing newline is dropped.
func Password(fromEnv, file string) (string, error) {
	if file == "" {
		return fromEnv, nil
	}
	if fromEnv != "" {
		return "", errors.New("both $TRIBUTARY_CLICKHOUSE_PASSWORD and --clickhouse-password-file are set: use one")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--clickhouse-password-file: %w", err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

// Refused tells an error no retry can cure: the server answered and said
// no (a wrong password, an unknown user), or its certificate is not one we
// trust. Waiting for a server that is not up is the other kind.
func Refused(err error) bool {
	var (
		exc      *clickhouse.Exception
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		verify   *tls.CertificateVerificationError
		header   tls.RecordHeaderError
		alert    tls.AlertError
	)
	return errors.As(err, &exc) || errors.As(err, &unknown) || errors.As(err, &hostname) ||
		errors.As(err, &invalid) || errors.As(err, &verify) || errors.As(err, &header) || errors.As(err, &alert)
}

// what names the step that failed, for an error a person reads.
func what(err error, tlsOn bool) string {
	var exc *clickhouse.Exception
	switch {
	case errors.As(err, &exc):
		return "the server refused"
	case Refused(err):
		return "TLS handshake failed (is --clickhouse-ca-file the CA that signed the server's certificate, and is the address its TLS port?)"
	case tlsOn:
		return "no answer over TLS"
	default:
		return "no answer"
	}
}
