package chstore

import (
	"errors"
	"strings"
	"testing"
)

func TestParseNodeAddrs(t *testing.T) {
	m, err := parseNodeAddrs(" a:9000=a:9440, [::1]:9000=[::1]:9440 ,")
	if err != nil || len(m) != 2 || m["a:9000"] != "a:9440" || m["[::1]:9000"] != "[::1]:9440" {
		t.Fatalf("parse: %v, %v", m, err)
	}
	if m, err := parseNodeAddrs(""); err != nil || len(m) != 0 {
		t.Errorf("empty: %v, %v", m, err)
	}
	for _, bad := range []string{"a:9000", "a:9000=", "=a:9440", "a=a:9440", "a:9000=a", ":9000=a:9440", "a:9000=a:9440,a:9000=b:9440"} {
		if _, err := parseNodeAddrs(bad); err == nil || !strings.Contains(err.Error(), "--clickhouse-node-addrs") {
			t.Errorf("%q: %v, want an error naming the flag", bad, err)
		}
	}
}

func TestForNode(t *testing.T) {
	byName := Node{Shard: 1, Replica: 2, Addr: "10.0.0.2:9000", Name: "ch-1-2:9000"}
	sameHost := Node{Shard: 2, Replica: 1, Addr: "127.0.0.1:60074", Name: "127.0.0.1:60074"}
	tlsOn := DialOptions{Addr: "seed:9440", TLS: TLSOptions{Enabled: true}}
	for _, c := range []struct {
		name      string
		o         DialOptions
		n         Node
		want      string
		noAddr    bool
		parseFail bool
	}{
		{"plain, no map: the listed address", DialOptions{}, byName, "10.0.0.2:9000", false, false},
		{"plain, mapped by name", DialOptions{NodeAddrs: "ch-1-2:9000=proxy:19000"}, byName, "proxy:19000", false, false},
		{"TLS, mapped by name", with(tlsOn, "ch-1-2:9000=ch-1-2:9440"), byName, "ch-1-2:9440", false, false},
		{"TLS, mapped by IP", with(tlsOn, "10.0.0.2:9000=10.0.0.2:9440"), byName, "10.0.0.2:9440", false, false},
		{"TLS, the name wins over the IP", with(tlsOn, "10.0.0.2:9000=ip:9440,ch-1-2:9000=name:9440"), byName, "name:9440", false, false},
		{"TLS, same host, its own port", with(tlsOn, "127.0.0.1:60070=127.0.0.1:60073,127.0.0.1:60074=127.0.0.1:60077"), sameHost, "127.0.0.1:60077", false, false},
		{"TLS, no entry for it", with(tlsOn, "127.0.0.1:60070=127.0.0.1:60073"), sameHost, "", true, false},
		{"TLS, no map", tlsOn, byName, "", true, false},
		{"a map that does not parse", with(tlsOn, "nonsense"), byName, "", false, true},
	} {
		got, err := c.o.ForNode(c.n)
		switch {
		case c.noAddr:
			if !errors.Is(err, ErrNoNodeAddr) || !strings.Contains(err.Error(), c.n.String()) || !strings.Contains(err.Error(), c.n.Name) {
				t.Errorf("%s: %v, want ErrNoNodeAddr naming %s", c.name, err, c.n)
			}
		case c.parseFail:
			if err == nil || errors.Is(err, ErrNoNodeAddr) {
				t.Errorf("%s: %v, want the parse error", c.name, err)
			}
		case err != nil || got.Addr != c.want:
			t.Errorf("%s: %q, %v; want %q", c.name, got.Addr, err, c.want)
		case got.TLS != c.o.TLS || got.NodeAddrs != c.o.NodeAddrs:
			t.Errorf("%s: the other options changed: %+v", c.name, got)
		}
	}
}

func with(o DialOptions, nodeAddrs string) DialOptions {
	o.NodeAddrs = nodeAddrs
	return o
}

func TestValidateCluster(t *testing.T) {
	if err := (Conn{NodeAddrs: "a:1=a:2"}).ValidateCluster(""); err == nil || !strings.Contains(err.Error(), "--clickhouse-cluster") {
		t.Errorf("node addrs without a cluster: %v", err)
	}
	if err := (Conn{NodeAddrs: "a:1"}).ValidateCluster("c"); err == nil {
		t.Error("a malformed map passed")
	}
	if err := (Conn{NodeAddrs: "a:1=a:2"}).ValidateCluster("c"); err != nil {
		t.Error(err)
	}
	if err := (Conn{}).ValidateCluster(""); err != nil {
		t.Error(err)
	}
}
