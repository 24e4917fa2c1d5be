package preflight

import (
	"errors"
	"testing"
)

func TestKinds(t *testing.T) {
	for _, c := range []struct {
		k    kinds
		typ  string
		want bool
	}{
		{kindNumeric, "numeric(12,2)", true},
		{kindNumeric, "numeric", false},
		{kindNumeric, "integer", false},
		{kindText, "text", true},
		{kindText, "character(3)", true},
		{kindText, "character varying(40)", true},
		{kindText, "characters", false},
		{kindTime, "timestamp with time zone", true},
		{kindTime, "date", true},
		{kindTime, "time without time zone", false},
		{kindInteger, "bigint", true},
		{kindInteger, "numeric(10,0)", false},
		{kindIntOrUUID, "uuid", true},
		{idKinds("seed000"), "bigint", true},
		{idKinds("seed000"), "integer", false},
		{idKinds("pgdog-hash-uuid:4"), "uuid", true},
		{idKinds("serial"), "integer", true},
		{idKinds("uuidv4"), "bigint", false},
	} {
		if got := c.k.accepts(column{typ: c.typ}); got != c.want {
			t.Errorf("%v accepts %q = %v, want %v", c.k, c.typ, got, c.want)
		}
	}
	// An enum is a label: text for the revenue's status and currency.
	enum := column{typ: "payment_status", enum: true}
	if kindText.accepts(enum) || !kindLabel.accepts(enum) || kindLabel.accepts(column{typ: "payment_status"}) || !kindLabel.accepts(column{typ: "character(3)"}) {
		t.Error("kindLabel: want enums and text, and kindText no enum")
	}
	if s := kindNumeric.String(); s != "numeric" {
		t.Errorf("kindNumeric = %q", s)
	}
}

func TestScaleAndNames(t *testing.T) {
	if scale("numeric(14,2)") != "2" || scale("numeric(10,0)") != "0" || scale("text") != "" {
		t.Error("scale")
	}
	if got := namedShards(map[int]int{17: 3, 1: 20}); got != "shard 1: 20, shard 17: 3" {
		t.Errorf("namedShards = %q", got)
	}
	p := Problem{Shard: 5, ShardName: "eu", Table: "documents", Field: "shard_key", Message: "column \"w\" does not exist"}
	if got := p.String(); got != `shard 5 (eu): table documents: shard_key: column "w" does not exist` {
		t.Errorf("Problem = %q", got)
	}
	if got := (Problem{Shard: 0, Message: "wal_level is replica"}).String(); got != "shard 0: wal_level is replica" {
		t.Errorf("Problem = %q", got)
	}
	if got := redact(errors.New("failed to connect: host=h user=u password=secret")); got != "failed to connect: host=h user=u password=..." {
		t.Errorf("redact = %q", got)
	}
}
