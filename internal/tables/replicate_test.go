package tables

import (
	"strings"
	"testing"
)

func TestReplicatedColumnsValidate(t *testing.T) {
	for _, c := range []struct{ table, want string }{
		{`"columns":["id","a"],"exclude_columns":["b"]`, "exclusive"},
		{`"columns":["a"]`, `include the id column "id"`},
		{`"exclude_columns":["id"]`, `cannot hold the id column "id"`},
		{`"exclude_columns":["a b"]`, "not a plain identifier"},
		{`"exclude_columns":["a","a"]`, "listed twice"},
		{`"shard_key":"ws","exclude_columns":["ws"]`, `shard_key column "ws" must be replicated`},
		{`"row_filter":"  "`, "row_filter is blank"},
	} {
		_, err := Parse([]byte(`{"tables":[{"name":"t","id_column":"id","id_layout":"serial",` + c.table + `}]}`))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.table, err, c.want)
		}
	}
	cfg, err := Parse([]byte(`{"tables":[{"name":"t","id_column":"id","id_layout":"serial","exclude_columns":["email"],"row_filter":"status <> 'x'"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	tb := cfg.Tables[0]
	if !tb.HasColumnList() || tb.Replicates("email") || !tb.Replicates("id") {
		t.Errorf("exclude_columns: has list %v, email %v, id %v", tb.HasColumnList(), tb.Replicates("email"), tb.Replicates("id"))
	}
}
