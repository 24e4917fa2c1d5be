package reader

import (
	"testing"

	"github.com/tributary/tributary/internal/decode"
	"github.com/tributary/tributary/internal/envelope"
	"github.com/tributary/tributary/internal/tables"
)

func TestSplitRegclass(t *testing.T) {
	for _, c := range []struct{ in, schema, name string }{
		{"public.payments", "public", "payments"},
		{`"My Schema"."Pay.ments"`, "My Schema", "Pay.ments"},
		{`billing."say ""hi"""`, "billing", `say "hi"`},
	} {
		s, n, err := splitRegclass(c.in)
		if err != nil || s != c.schema || n != c.name {
			t.Errorf("%s: %q %q %v", c.in, s, n, err)
		}
	}
	for _, bad := range []string{"payments", `"unterminated.x`, "a.b.c", `"a"x.b`} {
		if _, _, err := splitRegclass(bad); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

// The message content as schema/postgres/20_partitions.sql writes it (seen
// with test_decoding on PostgreSQL 15): a configured root's partition
// truncate is kept for the commit; one right after the root's own truncate,
// and one of an unconfigured table, are not.
func TestPartitionMessage(t *testing.T) {
	cfg, err := tables.Parse([]byte(`{"tables":[{"name":"ptest","id_column":"id","id_layout":"serial"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	r := &Reader{cfg: Config{Tables: cfg}}
	content := `{"root": "public.ptest", "cause": "truncate", "levels": [{"bound": "FOR VALUES FROM ('2026-01-01 00:00:00+00') TO ('2026-02-01 00:00:00+00')", "columns": ["paid_at"], "siblings": null, "strategy": "r"}], "partition": "public.ptest_01"}`
	msg := &decode.LogicalMessage{Transactional: true, Prefix: partitionPrefix, Content: []byte(content)}
	if err := r.partitionMessage(envelope.LSN(100), msg); err != nil {
		t.Fatal(err)
	}
	if len(r.pendingParts) != 1 || r.pendingParts[0].at != 100 || r.pendingParts[0].table != "ptest" ||
		r.pendingParts[0].scope.Partition != "public.ptest_01" || r.pendingParts[0].scope.Levels[0].Columns[0] != "paid_at" {
		t.Fatalf("pending %+v", r.pendingParts)
	}
	r.truncated = map[string]bool{"ptest": true}
	if err := r.partitionMessage(envelope.LSN(200), msg); err != nil || len(r.pendingParts) != 1 {
		t.Errorf("a partition truncate right after the table's: %v, %d pending", err, len(r.pendingParts))
	}
	other := &decode.LogicalMessage{Transactional: true, Prefix: partitionPrefix, Content: []byte(`{"root": "public.other", "cause": "drop", "levels": [], "partition": "public.other_1"}`)}
	if err := r.partitionMessage(envelope.LSN(300), other); err != nil || len(r.pendingParts) != 1 {
		t.Errorf("an unconfigured table's partition: %v, %d pending", err, len(r.pendingParts))
	}
	bad := &decode.LogicalMessage{Transactional: true, Prefix: partitionPrefix, Content: []byte(`{"root": 5}`)}
	if err := r.partitionMessage(envelope.LSN(400), bad); err == nil {
		t.Error("a malformed message was accepted")
	}
}
