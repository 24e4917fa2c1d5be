package tests

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestEmbeddedKafkaSmoke runs the pipeline through the embedded (kfake)
// broker that the demo defaults to: insert, update and delete reach the API.
func TestEmbeddedKafkaSmoke(t *testing.T) {
	st := loadStack(t)
	if len(st.EmbeddedKafkaBrokers) == 0 {
		t.Fatal("the stack runs no embedded broker: start it with TRIBUTARY_KAFKA=both deploy/local/stack.sh up")
	}
	p := newPipeline(t, []int{2}, st.EmbeddedKafkaBrokers)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id := p.insert(ctx, 2, 7, "via kfake", "b")
	p.waitDoc(ctx, id, "insert", func(s int, d docAnswer) bool {
		return s == 200 && len(d.Copies) == 1 && d.Copies[0].Shard == 2 && d.Copies[0].Row["title"] == "via kfake"
	})
	p.exec(ctx, 2, fmt.Sprintf("UPDATE %s SET title = 'updated' WHERE id = $1", p.table()), id)
	p.waitDoc(ctx, id, "update", func(s int, d docAnswer) bool {
		return s == 200 && len(d.Copies) == 1 && d.Copies[0].Row["title"] == "updated"
	})
	p.exec(ctx, 2, fmt.Sprintf("DELETE FROM %s WHERE id = $1", p.table()), id)
	p.waitDoc(ctx, id, "delete", func(s int, _ docAnswer) bool { return s == http.StatusNotFound })
}
