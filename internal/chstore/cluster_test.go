package chstore

import (
	"errors"
	"testing"
)

func TestReplicated(t *testing.T) {
	for _, c := range []struct{ engine, want string }{
		{"ReplacingMergeTree(_version)", "ReplicatedReplacingMergeTree('/p', '{replica}', _version)"},
		{"ReplacingMergeTree", "ReplicatedReplacingMergeTree('/p', '{replica}')"},
		{"MergeTree", "ReplicatedMergeTree('/p', '{replica}')"},
	} {
		if got := replicated(c.engine, "/p"); got != c.want {
			t.Errorf("replicated(%q) = %q, want %q", c.engine, got, c.want)
		}
	}
}

func TestClusterReplicatedSingleServer(t *testing.T) {
	s := &Store{db: "d"}
	if got := s.ClusterReplicated("t", "ReplacingMergeTree(v)"); got != "ReplacingMergeTree(v)" {
		t.Errorf("one server: engine %q, want it unchanged", got)
	}
	if got := s.LocalTable("t"); got != "t" {
		t.Errorf("one server: local table %q, want t", got)
	}
	s.cluster = "c"
	if got := s.ClusterReplicated("t", "ReplacingMergeTree(v)"); got != "ReplicatedReplacingMergeTree('/clickhouse/tributary/d/all/t', '{replica}', v)" {
		t.Errorf("cluster: engine %q", got)
	}
	if got := s.LocalTable("t"); got != "t_local" {
		t.Errorf("cluster: local table %q, want t_local", got)
	}
}

func TestCheckMacros(t *testing.T) {
	n := func(shard, replica int, macro string) Node {
		return Node{Shard: shard, Replica: replica, Addr: "h:1", macro: macro}
	}
	for _, c := range []struct {
		name  string
		nodes []Node
		ok    bool
	}{
		{"consistent", []Node{n(1, 1, "01"), n(1, 2, "01"), n(2, 1, "02")}, true},
		{"replicas of one shard differ", []Node{n(1, 1, "1"), n(1, 2, "2"), n(2, 1, "3")}, false},
		{"two shards share one", []Node{n(1, 1, "1"), n(2, 1, "1")}, false},
	} {
		err := checkMacros("c", c.nodes)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, errProfile)) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
