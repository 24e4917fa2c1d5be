package chaos

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// dlqRecords counts the records in the dead-letter topic (the loader's
// default, tributary.dlq); a topic never created holds none.
func dlqRecords(ctx context.Context, brokers string) (int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, "tributary.dlq")
	if err != nil {
		return 0, fmt.Errorf("dead-letter topic end offsets: %w", err)
	}
	starts, err := adm.ListStartOffsets(ctx, "tributary.dlq")
	if err != nil {
		return 0, fmt.Errorf("dead-letter topic start offsets: %w", err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			return // unknown topic: nothing was ever dead-lettered
		}
		if s, ok := starts.Lookup(o.Topic, o.Partition); ok && s.Err == nil {
			n += o.Offset - s.Offset
		}
	})
	return n, nil
}

// loaderLag reads tributary_loader_consumer_lag_records from the loader's
// metrics: the largest value and how many partitions are above 0.
func loaderLag(ctx context.Context, addr string) (maxLag float64, nonZero int, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	seen := false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "tributary_loader_consumer_lag_records{") {
			continue
		}
		seen = true
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, 0, fmt.Errorf("loader metrics: %q: %w", line, err)
		}
		maxLag = max(maxLag, v)
		if v > 0 {
			nonZero++
		}
	}
	if !seen {
		return 0, 0, fmt.Errorf("loader metrics: no tributary_loader_consumer_lag_records")
	}
	return maxLag, nonZero, sc.Err()
}

// waitLagZero waits until the loader's lag metric is 0 on every
// partition, returning the last reading.
func waitLagZero(ctx context.Context, addr string) (maxLag float64, nonZero int, err error) {
	for {
		maxLag, nonZero, err = loaderLag(ctx, addr)
		if err == nil && nonZero == 0 {
			return maxLag, 0, nil
		}
		select {
		case <-ctx.Done():
			return maxLag, nonZero, err
		case <-time.After(time.Second):
		}
	}
}

// slotWAL is the WAL each replication slot of a shard retains (current
// position minus its restart_lsn), by "shard/slot".
func slotWAL(ctx context.Context, st *stack) (map[string]int64, error) {
	out := map[string]int64{}
	for _, sh := range st.shards {
		conn, err := pgx.Connect(ctx, sh.DSN)
		if err != nil {
			return nil, fmt.Errorf("shard %d: %w", sh.Number, err)
		}
		rows, err := conn.Query(ctx, "SELECT slot_name, coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::bigint FROM pg_replication_slots ORDER BY 1")
		if err == nil {
			for rows.Next() {
				var name string
				var n int64
				if err = rows.Scan(&name, &n); err != nil {
					break
				}
				out[fmt.Sprintf("%d/%s", sh.Number, name)] = n
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		conn.Close(ctx)
		if err != nil {
			return nil, fmt.Errorf("shard %d slots: %w", sh.Number, err)
		}
	}
	return out, nil
}

// runVerify runs the verifier as `make verify` does, its output into the
// soak's log directory; it reports whether it passed and its last lines.
func runVerify(ctx context.Context, st *stack, out string, apiSample int) (bool, string, error) {
	logPath := filepath.Join(out, "verify.log")
	f, err := os.Create(logPath)
	if err != nil {
		return false, "", err
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, filepath.Join(st.repo, "bin", "verify"), "--api-sample", strconv.Itoa(apiSample))
	cmd.Env = append(append(os.Environ(), st.environ()...), "TRIBUTARY_RING_MAP="+st.ringMap, "TRIBUTARY_API_URL=http://"+st.apiAddr())
	var tail tailWriter
	cmd.Stdout, cmd.Stderr = multi{f, &tail}, multi{f, &tail}
	err = cmd.Run()
	if _, ok := err.(*exec.ExitError); ok && cmd.ProcessState.ExitCode() == 1 {
		return false, tail.String(), nil // differences found
	}
	if err != nil {
		return false, tail.String(), fmt.Errorf("verify: %w (log %s)", err, logPath)
	}
	return true, tail.String(), nil
}

type multi []interface{ Write([]byte) (int, error) }

func (m multi) Write(b []byte) (int, error) {
	for _, w := range m {
		w.Write(b) //nolint:errcheck // best effort: the file write matters, the tail is for the verdict
	}
	return len(b), nil
}

// tailWriter keeps the last 12 lines written, without the progress lines.
type tailWriter struct{ lines []string }

func (t *tailWriter) Write(b []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if strings.Contains(l, "progress") {
			continue
		}
		t.lines = append(t.lines, l)
		if len(t.lines) > 12 {
			t.lines = t.lines[1:]
		}
	}
	return len(b), nil
}

func (t *tailWriter) String() string { return strings.Join(t.lines, "\n") }
