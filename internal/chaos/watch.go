package chaos

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/tributary/tributary/internal/httpjson"
)

// walPositions reads every shard's current WAL position, retrying a shard
// that is not back yet until ctx ends.
func walPositions(ctx context.Context, st *stack) (map[int]pglogrepl.LSN, error) {
	out := map[int]pglogrepl.LSN{}
	for _, sh := range st.shards {
		for {
			lsn, err := walPosition(ctx, sh.DSN)
			if err == nil {
				out[sh.Number] = lsn
				break
			}
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("shard %d WAL position: %w", sh.Number, err)
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	return out, nil
}

func walPosition(ctx context.Context, dsn string) (pglogrepl.LSN, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	var s string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
		return 0, err
	}
	return pglogrepl.ParseLSN(s)
}

// waitFresh waits until GET /v1/shards shows every shard complete at or
// past its position in want.
func waitFresh(ctx context.Context, apiAddr string, want map[int]pglogrepl.LSN) error {
	for {
		behind, err := shardsBehind(ctx, apiAddr, want)
		if err == nil && behind == "" {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("behind: %s", behind)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// shardsBehind names the shards whose watermark is short of want, or "".
func shardsBehind(ctx context.Context, apiAddr string, want map[int]pglogrepl.LSN) (string, error) {
	var body struct {
		Shards []struct {
			Shard     int    `json:"shard"`
			CommitLSN string `json:"commit_lsn"`
			Complete  bool   `json:"complete"`
		} `json:"shards"`
	}
	if code, err := httpjson.Get(ctx, httpClient, "http://"+apiAddr+"/v1/shards", &body); err != nil || code != http.StatusOK {
		return "", fmt.Errorf("GET /v1/shards: %d %v", code, err)
	}
	have := map[int]pglogrepl.LSN{}
	for _, s := range body.Shards {
		if lsn, err := pglogrepl.ParseLSN(s.CommitLSN); err == nil && s.Complete {
			have[s.Shard] = lsn
		}
	}
	var behind []string
	for sh, lsn := range want {
		if have[sh] < lsn {
			behind = append(behind, fmt.Sprintf("shard %d at %s < %s", sh, have[sh], lsn))
		}
	}
	return strings.Join(behind, ", "), nil
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

// probe asks the API what a user would, every 250 ms, and keeps every
// answer's time and status, to count the 5xx outside outages afterwards.
type probe struct {
	mu      sync.Mutex
	answers []answer
}

type answer struct {
	at     time.Time
	route  string
	code   int    // 0: no answer (the API is down)
	status string // /readyz: its "status" field
}

func (p *probe) run(ctx context.Context, apiAddr string, docID func() string) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
		for _, route := range []string{"/v1/documents/" + docID(), "/v1/shards", "/readyz"} {
			var ready struct {
				Status string `json:"status"`
			}
			var v any
			if route == "/readyz" {
				v = &ready
			}
			code, _ := httpjson.Get(ctx, httpClient, "http://"+apiAddr+route, v)
			if ctx.Err() != nil {
				return
			}
			name := route
			if strings.HasPrefix(route, "/v1/documents/") {
				name = "/v1/documents/{id}"
			}
			p.mu.Lock()
			p.answers = append(p.answers, answer{at: time.Now(), route: name, code: code, status: ready.Status})
			p.mu.Unlock()
		}
	}
}

// rss samples the resident memory of every component every 2 s and keeps
// each one's peak. PostgreSQL is a shard's postmaster and its children.
type rss struct {
	mu   sync.Mutex
	peak map[string]int64 // bytes
}

func (r *rss) run(ctx context.Context, st *stack, fl *fleetProcs) {
	r.peak = map[string]int64{}
	for {
		sample := map[string]int64{}
		for sh, p := range fl.readers {
			sample[fmt.Sprintf("reader-%d", sh)] = procRSS(p.pid())
		}
		sample["loader"] = procRSS(fl.loader.pid())
		sample["api"] = procRSS(fl.api.pid())
		if pid, err := readPid(st.kafkaPidFile()); err == nil {
			sample["kafka"] = procRSS(pid)
		}
		if pid, err := readPid(st.clickhousePidFile()); err == nil {
			sample["clickhouse"] = procRSS(pid)
		}
		for _, sh := range st.shards {
			if pid, err := readPid(filepath.Join(st.pgDir(sh.Number), "postmaster.pid")); err == nil {
				sample[fmt.Sprintf("postgres-%d", sh.Number)] = treeRSS(pid)
			}
		}
		r.mu.Lock()
		for k, v := range sample {
			r.peak[k] = max(r.peak[k], v)
		}
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
}

// procRSS is a process's VmRSS in bytes, 0 when it is gone.
func procRSS(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// treeRSS is the VmRSS of pid and its direct children (PostgreSQL's
// backends; their shared buffers count in each one, so this overstates).
func treeRSS(pid int) int64 {
	total := procRSS(pid)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so cut after ')'.
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			total += procRSS(child)
		}
	}
	return total
}
