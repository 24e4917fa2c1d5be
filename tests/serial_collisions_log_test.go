package tests

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary/tributary/internal/loader"
)

// syncBuffer is a bytes.Buffer several goroutines may log to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSerialCollisionsCountedNotShouted: a legacy serial table whose ids
// collide on two shards (expected of per-shard sequences) gets every
// collision counted in tributary_duplicate_ids and listed as an anomaly,
// and the loader's log at most one summary line, not a line per id.
func TestSerialCollisionsCountedNotShouted(t *testing.T) {
	const n = 200
	p := setupPipelineWith(t, []int{0, 1}, nil, true, "notes_",
		`{"topic_prefix":"e2e_%[1]s.","tables":[{"name":%[2]q,"id_column":"id","id_layout":"serial"}]}`,
		`CREATE TABLE %s (id bigint PRIMARY KEY, note text NOT NULL)`)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	tbl := p.table()
	for _, s := range p.shards {
		p.exec(ctx, s, fmt.Sprintf("INSERT INTO %s SELECT g, 'note ' || g FROM generate_series(1, %d) g", tbl, n))
		p.startReader(runCtx, s)
	}
	var logs syncBuffer
	reg := prometheus.NewRegistry()
	l := loader.New(loader.Config{
		Brokers: p.brokers, Group: "e2e_" + p.suffix, DLQTopic: "e2e_" + p.suffix + ".dlq", Tables: p.tables,
		BatchRecords: 5000, BatchWait: 50 * time.Millisecond,
		DuplicateGrace: time.Second, AnomalyInterval: 200 * time.Millisecond,
	}, p.store, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})), reg)
	p.goRun("loader", func() error { return l.Run(runCtx) })

	gauge := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "tributary_duplicate_ids" {
				continue
			}
			for _, m := range mf.GetMetric() {
				lbl := map[string]string{}
				for _, lp := range m.GetLabel() {
					lbl[lp.GetName()] = lp.GetValue()
				}
				if lbl["table"] == tbl && lbl["kind"] == "serial_collision" {
					return m.GetGauge().GetValue()
				}
			}
		}
		return -1
	}
	p.waitFor(ctx, 90*time.Second, fmt.Sprintf("%d serial collisions alerting", n), func() bool { return gauge() == n })
	time.Sleep(time.Second) // a few more evaluation rounds
	stop()
	if err := p.failed(); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	var perID, summaries int
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.Contains(line, "table="+tbl) && strings.Contains(line, " id="):
			perID++
		case strings.Contains(line, "serial ids collide across shards"):
			summaries++
		}
	}
	if perID != 0 || summaries != 1 {
		t.Errorf("%d collisions logged %d per-id lines and %d summaries, want 0 and 1:\n%s", n, perID, summaries, out)
	}
}
