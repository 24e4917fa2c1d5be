package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigAuth(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens")
	if err := os.WriteFile(file, []byte("ops:abcdefghijklmnopqrst:admin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		err  string
	}{
		{name: "open", args: nil},
		{name: "file", args: []string{"--tokens-file", file}},
		{name: "env", env: map[string]string{"TRIBUTARY_API_TOKENS": "ops:abcdefghijklmnopqrst:admin"}},
		{name: "require with file", args: []string{"--tokens-file", file, "--require-auth"}},
		{name: "require from env", env: map[string]string{"TRIBUTARY_API_REQUIRE_AUTH": "true", "TRIBUTARY_API_TOKENS_FILE": file}},
		{name: "require without tokens", args: []string{"--require-auth"}, err: "--require-auth: no tokens configured"},
		{name: "require without tokens, env", env: map[string]string{"TRIBUTARY_API_REQUIRE_AUTH": "1"}, err: "no tokens configured"},
		{name: "bad require env", env: map[string]string{"TRIBUTARY_API_REQUIRE_AUTH": "yes please"}, err: "not a boolean"},
		{name: "both sources", args: []string{"--tokens-file", file},
			env: map[string]string{"TRIBUTARY_API_TOKENS": "ops:abcdefghijklmnopqrst:admin"}, err: "not both"},
		{name: "no token flag", args: []string{"--tokens", "x"}, err: "flag provided but not defined"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, k := range []string{"TRIBUTARY_API_TOKENS", "TRIBUTARY_API_TOKENS_FILE", "TRIBUTARY_API_REQUIRE_AUTH"} {
				t.Setenv(k, c.env[k])
			}
			args := append([]string{"--tables", "x.json", "--clickhouse-addr", "127.0.0.1:1"}, c.args...)
			cfg, err := parse(args)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tokens, err := loadTokens(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			if open := cfg.TokensFile == "" && cfg.Tokens == ""; open != (tokens == nil) {
				t.Fatalf("tokens %v for config %+v", tokens, cfg)
			}
		})
	}
}

func TestConfigComponentMetrics(t *testing.T) {
	base := []string{"--tables", "x.json", "--clickhouse-addr", "127.0.0.1:1"}
	cfg, err := parse(append(base, "--component-metrics", "http://127.0.0.1:9101/metrics, http://127.0.0.1:9201/metrics,"))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := cfg.componentMetrics()
	if len(got) != 2 || got[1] != "http://127.0.0.1:9201/metrics" {
		t.Errorf("component metrics %q", got)
	}
	_, err = parse(append(base, "--component-metrics", "http://127.0.0.1:9101/metrics,127.0.0.1:9201"))
	if err == nil || !strings.Contains(err.Error(), `entry 2 ("127.0.0.1:9201") is not an http(s) URL`) {
		t.Errorf("error %v, want one naming entry 2", err)
	}
}

func TestConfigTLS(t *testing.T) {
	base := []string{"--tables", "x.json", "--clickhouse-addr", "127.0.0.1:1"}
	cfg, err := parse(base)
	if err != nil || cfg.TLS.On() {
		t.Fatalf("without TLS flags: TLS on %v, err %v; want plain HTTP", cfg.TLS.On(), err)
	}
	t.Setenv("TRIBUTARY_API_TLS_KEY_FILE", "api.key")
	cfg, err = parse(append(base, "--tls-cert-file", "api.crt"))
	if err != nil || cfg.TLS.CertFile != "api.crt" || cfg.TLS.KeyFile != "api.key" {
		t.Fatalf("cert by flag, key by env: %+v, %v", cfg.TLS, err)
	}
	t.Setenv("TRIBUTARY_API_TLS_KEY_FILE", "")
	for args, want := range map[string]string{
		"--tls-cert-file api.crt":                                      "--tls-cert-file and --tls-key-file go together",
		"--tls-client-ca-file ca.pem":                                  "--tls-client-ca-file needs --tls-cert-file",
		"--tls-cert-file a --tls-key-file b --tls-reload-interval -1s": "--tls-reload-interval must be >= 0",
	} {
		_, err := parse(append(base, strings.Fields(args)...))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", args, err, want)
		}
	}
}
