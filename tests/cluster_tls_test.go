package tests

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/api"
	"github.com/tributary/tributary/internal/chstore"
	"github.com/tributary/tributary/internal/query"
)

// TestClusterTLS: in cluster mode with TLS, the loader reaches every node
// at the TLS address --clickhouse-node-addrs gives it and its rows reach
// both ClickHouse shards; without an entry for a node, opening the store,
// tributaryctl teardown's DialNodes and the API's readiness pings each
// fail naming the node instead of dialling its plain port; a map to the
// plain ports fails the handshake (so TLS is what the nodes are spoken).
// The API, as the reader user over TLS, answers every id and says ready
// with all three replicas reached through their TLS ports.
func TestClusterTLS(t *testing.T) {
	clusterStack(t)
	s := loadSecureStack(t)
	nodeAddrs := s.Env["TRIBUTARY_CLICKHOUSE_NODE_TLS_ADDRS"]
	if nodeAddrs == "" {
		t.Fatal("stack.env has no TRIBUTARY_CLICKHOUSE_NODE_TLS_ADDRS: restart the stack with this checkout's deploy/local/stack.sh")
	}
	p := setupPipeline(t, []int{0, 1}, nil, true)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	tlsOpts := chstore.TLSOptions{CAFile: s.CAFile}
	opts := chstore.Options{Addr: s.CHTLSAddr, Database: p.chDB, Username: s.LoaderUser, Password: s.LoaderPassword,
		TLS: tlsOpts, Cluster: s.ClickHouseCluster}
	dial := chstore.DialOptions{Addr: s.CHTLSAddr, Username: s.LoaderUser, Password: s.LoaderPassword, TLS: tlsOpts}

	// No entry for the nodes: a clear error naming one, from all three.
	firstNode := p.store.Nodes()[0]
	noAddr := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, chstore.ErrNoNodeAddr) || !strings.Contains(err.Error(), firstNode.Addr) {
			t.Errorf("%s without --clickhouse-node-addrs: %v; want ErrNoNodeAddr naming %s", what, err, firstNode.Addr)
		}
	}
	if st, err := chstore.OpenWait(ctx, opts, nil); err == nil {
		st.Close()
		t.Error("store over TLS without node addresses opened")
	} else {
		noAddr("open", err)
	}
	if nodes, err := chstore.DialNodes(ctx, dial, s.ClickHouseCluster); err == nil {
		chstore.CloseNodes(nodes)
		t.Error("DialNodes over TLS without node addresses succeeded")
	} else {
		noAddr("DialNodes", err)
	}
	reps, err := query.New(p.store.Conn(), p.chDB).WithCluster(s.ClickHouseCluster, dial).Replicas(ctx)
	if err != nil || len(reps) != 3 {
		t.Fatalf("replicas: %v, %d nodes; want the stack's 3", err, len(reps))
	}
	for _, r := range reps {
		if !errors.Is(r.Err, chstore.ErrNoNodeAddr) {
			t.Errorf("readiness of %s without node addresses: %v; want ErrNoNodeAddr", r.Addr, r.Err)
		}
	}
	// Every node mapped to its plain port: TLS to it fails.
	var plain []string
	for _, n := range p.store.Nodes() {
		plain = append(plain, n.Addr+"="+n.Addr)
	}
	o := opts
	o.NodeAddrs = strings.Join(plain, ",")
	if st, err := chstore.Open(ctx, o); err == nil {
		st.Close()
		t.Error("store over TLS to the nodes' plain ports opened")
	}

	// With the stack's map: readiness and DialNodes reach every node, and
	// the loader loads through TLS connections to them.
	dial.NodeAddrs, opts.NodeAddrs = nodeAddrs, nodeAddrs
	nodes, err := chstore.DialNodes(ctx, dial, s.ClickHouseCluster)
	if err != nil {
		t.Fatalf("DialNodes over TLS: %v", err)
	}
	chstore.CloseNodes(nodes)
	reps, err = query.New(p.store.Conn(), p.chDB).WithCluster(s.ClickHouseCluster, dial).Replicas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reps {
		if r.Err != nil {
			t.Errorf("readiness of %s over TLS: %v", r.Addr, r.Err)
		}
	}
	store, err := chstore.OpenWait(ctx, opts, nil)
	if err != nil {
		t.Fatalf("loader store over TLS in cluster mode: %v", err)
	}
	// The harness's plain store stays open: the API reads through it.
	defer p.store.Close()
	p.store = store

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	for _, sh := range p.shards {
		p.startReader(runCtx, sh)
	}
	p.startLoader(runCtx, "l1")
	var ids []int64
	for i := 0; i < 60; i++ {
		ids = append(ids, p.insert(ctx, i%2, int64(100+i%5), fmt.Sprintf("doc %d", i), "body"))
	}
	if rep := p.runVerify(ctx); !rep.Passed {
		t.Fatalf("verify: %+v", rep.Differences)
	}
	if err := p.failed(); err != nil {
		t.Fatal(err)
	}

	// The API as cmd/api runs it here: the reader user, over TLS, its
	// readiness pinging every node at its TLS address.
	rdial := chstore.DialOptions{Addr: s.CHTLSAddr, Username: s.ReaderUser, Password: s.ReaderPassword,
		TLS: tlsOpts, NodeAddrs: nodeAddrs}
	q, err := query.Open(ctx, p.chDB, rdial)
	if err != nil {
		t.Fatalf("API over TLS: %v", err)
	}
	defer q.Close()
	p.api.Close()
	p.api = httptest.NewServer(api.New(api.Config{Tables: p.tables, DocumentsTable: p.table(), QueryTimeout: 10 * time.Second,
		Shards: p.shards}, q.WithCluster(s.ClickHouseCluster, rdial), p.log, prometheus.NewRegistry()))
	if r := p.ready(ctx); r.Status != "ready" || len(r.Replicas) != 3 {
		t.Errorf("/readyz of the API over TLS: %+v, want ready with 3 replicas", r)
	}
	for _, id := range ids {
		if status, a := p.getDoc(ctx, id); status != http.StatusOK || len(a.Copies) != 1 {
			t.Errorf("GET document %d through the API over TLS: %d, %d copies; want 200 with one", id, status, len(a.Copies))
		}
	}

	// Each id on one replica set; both ClickHouse shards hold some.
	local := store.LocalTable(p.table())
	perShard := map[int]map[int64]bool{}
	for _, n := range store.Nodes() {
		if err := waitReplicated(ctx, n.Conn(), p.chDB, local); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		got := idsOnNode(ctx, t, p, n, ids)
		if perShard[n.Shard] == nil {
			perShard[n.Shard] = map[int64]bool{}
		}
		for _, id := range got {
			perShard[n.Shard][id] = true
		}
	}
	seen := map[int64]int{}
	for sh, got := range perShard {
		if len(got) == 0 {
			t.Errorf("ClickHouse shard %d has none of the %d rows", sh, len(ids))
		}
		for id := range got {
			seen[id]++
		}
	}
	if len(perShard) < 2 {
		t.Errorf("rows on ClickHouse shard(s) %v only, want both", perShard)
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("id %d is on %d ClickHouse shards, want 1", id, seen[id])
		}
	}
}
