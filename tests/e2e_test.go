package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// docAnswer is the part of GET /v1/documents/{id} the tests read.
type docAnswer struct {
	Copies []struct {
		Shard int            `json:"shard"`
		Row   map[string]any `json:"row"`
	} `json:"copies"`
	Duplicate bool `json:"duplicate"`
}

// getDoc returns the HTTP status and body of a document lookup.
func (p *pipeline) getDoc(ctx context.Context, id int64) (int, docAnswer) {
	p.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/v1/documents/%d", p.api.URL, id), nil)
	resp, err := p.httpClient().Do(req)
	if err != nil {
		p.t.Fatalf("GET document: %v", err)
	}
	defer resp.Body.Close()
	var a docAnswer
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
			p.t.Fatalf("decode answer: %v", err)
		}
	}
	return resp.StatusCode, a
}

// waitDoc polls until check accepts the answer or the deadline passes.
func (p *pipeline) waitDoc(ctx context.Context, id int64, what string, check func(int, docAnswer) bool) {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var status int
	var a docAnswer
	for time.Now().Before(deadline) {
		if err := p.failed(); err != nil {
			p.t.Fatalf("waiting for %s: %v", what, err)
		}
		status, a = p.getDoc(ctx, id)
		if check(status, a) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.t.Fatalf("timed out waiting for %s of %d: last status %d, answer %+v", what, id, status, a)
}

// TestEndToEndTwoShards: insert, update and delete on two shards appear
// through the API with the shard they came from, and an unchanged TOASTed
// body survives an update of another column.
func TestEndToEndTwoShards(t *testing.T) {
	p := newPipeline(t, []int{0, 1}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tbl := p.table()

	big := strings.Repeat("toast me ", 2000) // ~18 KB: stored out of line
	a := p.insert(ctx, 0, 10, "on shard zero", big)
	b := p.insert(ctx, 1, 11, "on shard one", "small")
	if a == b {
		t.Fatalf("two shards issued the same id %d", a)
	}
	for _, c := range []struct {
		id    int64
		shard int
		title string
	}{{a, 0, "on shard zero"}, {b, 1, "on shard one"}} {
		p.waitDoc(ctx, c.id, "insert", func(s int, d docAnswer) bool {
			return s == 200 && len(d.Copies) == 1 && d.Copies[0].Shard == c.shard && d.Copies[0].Row["title"] == c.title
		})
	}

	// Update the title only: the body is unchanged TOAST and must survive.
	p.exec(ctx, 0, fmt.Sprintf("UPDATE %s SET title = 'renamed' WHERE id = $1", tbl), a)
	p.waitDoc(ctx, a, "update", func(s int, d docAnswer) bool {
		return s == 200 && len(d.Copies) == 1 && d.Copies[0].Row["title"] == "renamed"
	})
	if _, d := p.getDoc(ctx, a); d.Copies[0].Row["body"] != big {
		t.Fatalf("unchanged TOAST body lost: got %d chars", len(fmt.Sprint(d.Copies[0].Row["body"])))
	}

	// Two updates of one row in one transaction, then a delete on shard 1.
	p.exec(ctx, 1, fmt.Sprintf("BEGIN; UPDATE %[1]s SET title = 'x' WHERE id = %[2]d; UPDATE %[1]s SET title = 'y' WHERE id = %[2]d; COMMIT", tbl, b))
	p.waitDoc(ctx, b, "second update", func(s int, d docAnswer) bool {
		return s == 200 && len(d.Copies) == 1 && d.Copies[0].Row["title"] == "y"
	})
	p.exec(ctx, 1, fmt.Sprintf("DELETE FROM %s WHERE id = $1", tbl), b)
	p.waitDoc(ctx, b, "delete", func(s int, _ docAnswer) bool { return s == http.StatusNotFound })

	// The same id live on two shards is returned twice and flagged.
	p.exec(ctx, 1, fmt.Sprintf("INSERT INTO %s (id, workspace_id, title, body) VALUES ($1, 99, 'copy', 'c')", tbl), a)
	p.waitDoc(ctx, a, "duplicate", func(s int, d docAnswer) bool {
		return s == 200 && len(d.Copies) == 2 && d.Duplicate && d.Copies[0].Shard == 0 && d.Copies[1].Shard == 1
	})
}
