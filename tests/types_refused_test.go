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

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
)

// refusedDDL: a composite type Tributary does not map, a numeric the
// config may give a Decimal, and the ClickHouse-bounded date and time.
var refusedDDL = []string{
	`CREATE TYPE %[1]s_pt AS (x integer, y integer)`,
	`CREATE TABLE %[1]s (id bigint PRIMARY KEY DEFAULT tributary.next_id(), pt %[1]s_pt, rate numeric, day date, at timestamptz)`,
}

// lockedBuffer collects log lines written from the components' goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestTypesRefusedLoudly: a column of a type Tributary does not map stops
// its table with a message naming the column, its type and the config line
// that would store it; with that line (and a Decimal chosen for an
// unconstrained numeric) the table flows, and values the ClickHouse types
// cannot hold exactly — a numeric with more digits than the Decimal, a date
// before 1970, a timestamp 'infinity' — are dead-lettered with the reason,
// never stored as some other value.
func TestTypesRefusedLoudly(t *testing.T) {
	dropTypes := func(t *testing.T, table string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, loadStack(t).ShardDSNs[0]); err == nil {
			conn.Exec(ctx, "DROP TYPE IF EXISTS "+table+"_pt CASCADE") //nolint:errcheck
			conn.Close(ctx)
		}
	}
	start := func(t *testing.T, columnTypes string) (*meteredPipeline, *lockedBuffer, context.Context) {
		var table string
		t.Cleanup(func() { // after the pipeline's cleanup, which drops the table
			if table != "" {
				dropTypes(t, table)
			}
		})
		p := setupPipelineWith(t, []int{0}, nil, true, "refused_",
			`{"topic_prefix":"e2e_%[1]s.","tables":[{"name":%[2]q,"id_column":"id","id_layout":"seed000"`+columnTypes+`}]}`,
			refusedDDL...)
		table = p.table()
		logs := &lockedBuffer{}
		p.log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		t.Cleanup(cancel)
		runCtx, stop := context.WithCancel(ctx)
		t.Cleanup(func() { stop(); p.wg.Wait(); t.Log(logs.String()) })
		p.startReader(runCtx, 0)
		return &meteredPipeline{pipeline: p, reg: p.startMeteredLoader(runCtx, "l1")}, logs, ctx
	}
	insert := func(t *testing.T, p *pipeline, ctx context.Context, pt, rate, day, at string) int64 {
		conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[0])
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var id int64
		if err := conn.QueryRow(ctx, fmt.Sprintf("INSERT INTO %s (pt, rate, day, at) VALUES ($1::text::%s_pt, $2::text::numeric, $3::text::date, $4::text::timestamptz) RETURNING id",
			p.table(), p.table()), pt, rate, day, at).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}

	t.Run("unmapped", func(t *testing.T) {
		p, logs, ctx := start(t, "")
		insert(t, p.pipeline, ctx, "(1,2)", "1.5", "2000-01-01", "2026-11-30 12:00:00+00")
		p.waitFor(ctx, time.Minute, "the table to stop", func() bool {
			v, _ := p.metric("tributary_loader_table_stopped", map[string]string{"table": p.table()})
			return v == 1
		})
		want := fmt.Sprintf(`table %[1]s column pt: unmapped PostgreSQL type: \"%[1]s_pt\"; to store its PostgreSQL text as it is, set \"column_types\": {\"pt\": \"String\"} on table %[1]s in the table config`, p.table())
		if !strings.Contains(logs.String(), want) {
			t.Fatalf("the loader's log does not say\n%s\nlog:\n%s", want, logs.String())
		}
	})

	t.Run("chosen", func(t *testing.T) {
		p, _, ctx := start(t, `,"column_types":{"pt":"String","rate":"Decimal(6, 2)"}`)
		bad := []struct{ pt, rate, day, at, reason string }{
			{"(3,4)", "1.005", "2000-01-01", "2026-11-30 12:00:00+00", "column rate: cannot convert \"1.005\": value does not fit: Decimal(6, 2) has more than 2 fractional digits"},
			{"(3,4)", "1.5", "1969-12-31", "2026-11-30 12:00:00+00", "column day: cannot convert \"1969-12-31\": value does not fit: ClickHouse's Date holds 1970-01-01 to 2149-06-06"},
			{"(3,4)", "1.5", "2000-01-01", "infinity", "column at: cannot convert \"infinity\""},
		}
		for _, b := range bad {
			insert(t, p.pipeline, ctx, b.pt, b.rate, b.day, b.at)
		}
		good := insert(t, p.pipeline, ctx, `(1,"2")`, "-9999.9", "2149-06-06", "2106-02-07 06:28:15.999999+00")
		var lsn string
		if err := p.store.Conn().Ping(ctx); err != nil {
			t.Fatal(err)
		}
		conn, err := pgx.Connect(ctx, p.stack.ShardDSNs[0])
		if err != nil {
			t.Fatal(err)
		}
		conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn) //nolint:errcheck
		conn.Close(ctx)
		row := p.getRowAfter(ctx, p.table(), good, "0:"+lsn)
		for col, want := range map[string]any{"pt": "(1,2)", "rate": "-9999.90", "day": "2149-06-06", "at": "2106-02-07T06:28:15.999999Z"} {
			if row[col] != want {
				t.Errorf("good row: %s = %#v, want %#v", col, row[col], want)
			}
		}
		if v, _ := p.metric("tributary_loader_table_stopped", map[string]string{"table": p.table()}); v != 0 {
			t.Errorf("refused values stopped the table")
		}
		dlq := p.kafka(kgo.ConsumeTopics(p.dlqTopic()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		var errs []string
		dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
		defer dcancel()
		for len(errs) < len(bad) && dctx.Err() == nil {
			dlq.PollFetches(dctx).EachRecord(func(r *kgo.Record) {
				for _, h := range r.Headers {
					if h.Key == "tributary.error" {
						errs = append(errs, string(h.Value))
					}
				}
			})
		}
		for _, b := range bad {
			found := false
			for _, e := range errs {
				found = found || strings.Contains(e, b.reason)
			}
			if !found {
				t.Errorf("no dead letter says %q; dead letters: %q", b.reason, errs)
			}
		}
		if len(errs) != len(bad) {
			t.Errorf("%d dead letters, want %d: %q", len(errs), len(bad), errs)
		}
	})
}
