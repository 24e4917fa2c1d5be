// Package kafkaconn is the one place that says how a Tributary binary
// connects to Kafka: the seed brokers, TLS (a CA file, an optional client
// certificate, the server name) and SASL/SCRAM authentication. Every
// component that talks to Kafka (cdc-reader, loader, tributaryctl, the
// benches) registers the same flags with AddClientFlags and builds its franz-go
// clients with Security.NewClient (or adds Security.ClientOpts to its own),
// so a setting means the same everywhere.
//
// Secrets never reach argv: the SASL password comes from
// $TRIBUTARY_KAFKA_SASL_PASSWORD or from the file --kafka-sasl-password-file
// names, and the client key from a file. Errors name the broker, the user
// and the file at fault, never the password.
//
// The zero Security is plaintext without authentication, the behaviour of
// Tributary before these settings existed.
package kafkaconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/tributary/tributary/internal/flagenv"
)

// The SASL mechanisms Security accepts. SCRAM-SHA-512 is the default: the
// password never crosses the wire, and Kafka stores only a salted hash.
const (
	ScramSHA512 = "SCRAM-SHA-512"
	ScramSHA256 = "SCRAM-SHA-256"
)

// PasswordEnv is the environment variable holding the SASL password.
const PasswordEnv = "TRIBUTARY_KAFKA_SASL_PASSWORD"

// Security says how to secure and authenticate the connections to Kafka's
// brokers; which brokers is the caller's (its --kafka-brokers).
type Security struct {
	// TLS turns TLS on; setting any file or the server name does too.
	TLS bool
	// CAFile is a PEM bundle of the authorities that may sign the brokers'
	// certificates; empty trusts the system's.
	CAFile string
	// CertFile and KeyFile are the client's certificate and key, for
	// brokers that ask for one (ssl.client.auth); both or neither.
	CertFile, KeyFile string
	// ServerName is the name the brokers' certificates must carry; empty
	// is the host of each broker's address.
	ServerName string
	// SASLUser turns SASL on with SASLMechanism.
	SASLUser string
	// SASLMechanism is ScramSHA512 (the default when empty) or ScramSHA256.
	SASLMechanism string
	// SASLPassword is the password itself ($TRIBUTARY_KAFKA_SASL_PASSWORD);
	// SASLPasswordFile names a file holding it instead. At most one is set.
	SASLPassword     string
	SASLPasswordFile string
}

// addSecurityFlags registers the TLS and SASL flags every binary that
// talks to Kafka shares (through AddClientFlags), with their environment
// fallbacks.
func addSecurityFlags(fs *flagenv.Set, o *Security) {
	fs.Bool(&o.TLS, "kafka-tls", "TRIBUTARY_KAFKA_TLS", false, "connect to Kafka over TLS (a SSL or SASL_SSL listener); on as well when any --kafka-*-file or --kafka-server-name is set. The brokers' certificates are always verified")
	fs.String(&o.CAFile, "kafka-ca-file", "TRIBUTARY_KAFKA_CA_FILE", "", "PEM file of the authorities trusted to sign the Kafka brokers' certificates (empty: the system's)")
	fs.String(&o.CertFile, "kafka-cert-file", "TRIBUTARY_KAFKA_CERT_FILE", "", "PEM client certificate shown to Kafka (with --kafka-key-file)")
	fs.String(&o.KeyFile, "kafka-key-file", "TRIBUTARY_KAFKA_KEY_FILE", "", "PEM private key of --kafka-cert-file")
	fs.String(&o.ServerName, "kafka-server-name", "TRIBUTARY_KAFKA_SERVER_NAME", "", "name the Kafka brokers' certificates must carry (empty: the host of each broker's address)")
	fs.String(&o.SASLUser, "kafka-sasl-user", "TRIBUTARY_KAFKA_SASL_USER", "", "SASL user to authenticate to Kafka as (empty: no SASL); the password comes from $"+PasswordEnv+" or --kafka-sasl-password-file")
	fs.String(&o.SASLMechanism, "kafka-sasl-mechanism", "TRIBUTARY_KAFKA_SASL_MECHANISM", ScramSHA512, "SASL mechanism: SCRAM-SHA-512 or SCRAM-SHA-256")
	fs.String(&o.SASLPasswordFile, "kafka-sasl-password-file", "TRIBUTARY_KAFKA_SASL_PASSWORD_FILE", "", "file holding the SASL password (one line; instead of $"+PasswordEnv+")")
	fs.Secret(&o.SASLPassword, PasswordEnv)
}

// AddClientFlags registers --kafka-brokers (comma-separated seed brokers,
// required: ValidateClient says so) into brokers, and the Security flags
// into sec.
func AddClientFlags(fs *flagenv.Set, brokers *string, sec *Security) {
	fs.String(brokers, "kafka-brokers", "TRIBUTARY_KAFKA_BROKERS", "", "comma-separated Kafka seed brokers (required)")
	addSecurityFlags(fs, sec)
}

// ValidateClient reports every setting of AddClientFlags' that cannot
// work: no broker, and Security's own (Validate).
func ValidateClient(brokers string, sec Security) []error {
	var errs []error
	if len(flagenv.List(brokers)) == 0 {
		errs = append(errs, errors.New("--kafka-brokers (or $TRIBUTARY_KAFKA_BROKERS) is required"))
	}
	return append(errs, sec.Validate()...)
}

// tlsOn tells whether TLS is used.
func (o Security) tlsOn() bool {
	return o.TLS || o.CAFile != "" || o.CertFile != "" || o.KeyFile != "" || o.ServerName != ""
}

// Validate reports every setting that cannot work, before anything
// connects: files that cannot be read, a certificate without its key, a
// password without a user, two passwords, an unknown mechanism.
func (o Security) Validate() []error {
	var errs []error
	if (o.CertFile == "") != (o.KeyFile == "") {
		errs = append(errs, errors.New("--kafka-cert-file and --kafka-key-file go together: set both or neither"))
	}
	for _, f := range []struct{ flag, path string }{
		{"--kafka-ca-file", o.CAFile}, {"--kafka-cert-file", o.CertFile}, {"--kafka-key-file", o.KeyFile},
		{"--kafka-sasl-password-file", o.SASLPasswordFile},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.flag, err))
		}
	}
	switch o.mechanism() {
	case ScramSHA512, ScramSHA256:
	default:
		errs = append(errs, fmt.Errorf("--kafka-sasl-mechanism must be %s or %s, got %q", ScramSHA512, ScramSHA256, o.SASLMechanism))
	}
	if o.SASLPassword != "" && o.SASLPasswordFile != "" {
		errs = append(errs, errors.New("both $"+PasswordEnv+" and --kafka-sasl-password-file are set: use one"))
	}
	hasPassword := o.SASLPassword != "" || o.SASLPasswordFile != ""
	if o.SASLUser != "" && !hasPassword {
		errs = append(errs, errors.New("--kafka-sasl-user is set but no password: set $"+PasswordEnv+" or --kafka-sasl-password-file"))
	}
	if o.SASLUser == "" && hasPassword {
		errs = append(errs, errors.New("a Kafka SASL password is set but no --kafka-sasl-user"))
	}
	return errs
}

func (o Security) mechanism() string {
	if o.SASLMechanism == "" {
		return ScramSHA512
	}
	return o.SASLMechanism
}

// ClientOpts returns the franz-go options of these settings: the TLS
// dialer and the SASL mechanism (none for the zero Security). Files are read here, so
// an unreadable CA, a bad certificate or an empty password file is an
// error at start that names the file.
func (o Security) ClientOpts() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	tlsConf, err := o.tlsConfig()
	if err != nil {
		return nil, err
	}
	if tlsConf != nil {
		opts = append(opts, kgo.DialTLSConfig(tlsConf))
	}
	if o.SASLUser != "" {
		pass, err := o.password()
		if err != nil {
			return nil, err
		}
		auth := scram.Auth{User: o.SASLUser, Pass: pass}
		if o.mechanism() == ScramSHA256 {
			opts = append(opts, kgo.SASL(auth.AsSha256Mechanism()))
		} else {
			opts = append(opts, kgo.SASL(auth.AsSha512Mechanism()))
		}
	}
	// Clipped: callers append their own options to it, more than once.
	return slices.Clip(opts), nil
}

// tlsConfig builds the tls.Config, or nil when TLS is off. Verification is
// never turned off: a broker whose certificate the CA did not sign, or that
// names another host, is refused.
func (o Security) tlsConfig() (*tls.Config, error) {
	if !o.tlsOn() {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.ServerName}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("kafka CA file (--kafka-ca-file): %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("kafka CA file %s (--kafka-ca-file): no PEM certificate in it", o.CAFile)
		}
	}
	if o.CertFile != "" || o.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("kafka client certificate %s / key %s: %w", o.CertFile, o.KeyFile, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// password is the SASL password from the environment or the file; the
// file's trailing newline is dropped.
func (o Security) password() (string, error) {
	if o.SASLPasswordFile == "" {
		if o.SASLPassword == "" {
			return "", fmt.Errorf("kafka SASL user %s: no password ($%s or --kafka-sasl-password-file)", o.SASLUser, PasswordEnv)
		}
		return o.SASLPassword, nil
	}
	b, err := os.ReadFile(o.SASLPasswordFile)
	if err != nil {
		return "", fmt.Errorf("kafka SASL password file (--kafka-sasl-password-file): %w", err)
	}
	pass := strings.TrimRight(string(b), "\r\n")
	if pass == "" {
		return "", fmt.Errorf("kafka SASL password file %s (--kafka-sasl-password-file) is empty", o.SASLPasswordFile)
	}
	return pass, nil
}

// Describe names a connection to brokers for logs and errors: the
// brokers, the transport and the user, never the password.
func (o Security) Describe(brokers []string) string {
	s := strings.Join(brokers, ",")
	if o.tlsOn() {
		s += " (TLS"
	} else {
		s += " (plaintext"
	}
	if o.SASLUser != "" {
		s += ", SASL " + o.mechanism() + " user " + o.SASLUser
	}
	return s + ")"
}

// NewClient builds a franz-go client of brokers with these settings and
// extra, the caller's own options (which set no TLS or SASL).
func (o Security) NewClient(brokers []string, extra ...kgo.Opt) (*kgo.Client, error) {
	opts, err := o.ClientOpts()
	if err != nil {
		return nil, err
	}
	opts = append(opts, kgo.SeedBrokers(brokers...))
	cl, err := kgo.NewClient(append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client for %s: %w", o.Describe(brokers), err)
	}
	return cl, nil
}

// CheckTimeout bounds Check's metadata request.
const CheckTimeout = 30 * time.Second

// Check asks the brokers for metadata once, so that a wrong password, an
// untrusted certificate or a plaintext client on a TLS listener fails at
// start with an error saying which, instead of as retries later.
func Check(ctx context.Context, cl *kgo.Client, brokers []string, o Security) error {
	ctx, cancel := context.WithTimeout(ctx, CheckTimeout)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	_, err := req.RequestWith(ctx, cl)
	if err == nil {
		return nil
	}
	return fmt.Errorf("kafka %s: %s: %w", o.Describe(brokers), explain(err, o), err)
}

// explain names the step that failed, for an error a person reads.
func explain(err error, o Security) string {
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		verify   *tls.CertificateVerificationError
		header   tls.RecordHeaderError
	)
	switch {
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return "SASL authentication failed (wrong password, or no such user on the brokers)"
	case errors.Is(err, kerr.UnsupportedSaslMechanism), errors.Is(err, kerr.IllegalSaslState):
		return "the brokers do not accept SASL " + o.mechanism() + " on this listener"
	case errors.As(err, &hostname): // before verify, which wraps it
		return "TLS: the broker's certificate does not name this host (see --kafka-server-name)"
	case errors.As(err, &unknown), errors.As(err, &verify), errors.As(err, &invalid):
		return "TLS: the broker's certificate is not signed by an authority we trust (is --kafka-ca-file the CA that signed it?)"
	case errors.As(err, &header):
		return "TLS handshake failed: the listener does not speak TLS (drop --kafka-tls, or use the SSL/SASL_SSL port)"
	case o.SASLUser != "":
		// Some brokers (franz-go's kfake) close the connection on a
		// failed SCRAM exchange instead of answering with an error code.
		return "no answer: the brokers closed the connection or never answered (a wrong SASL password on a broker that closes instead of saying so, a listener without SASL, TLS on one side only, or the brokers are down)"
	case o.tlsOn():
		return "no answer over TLS (a plaintext listener, or one that wants SASL, closes the connection; or the brokers are down)"
	default:
		return "no answer (a TLS or SASL listener closes a plaintext client's connection; or the brokers are down)"
	}
}
