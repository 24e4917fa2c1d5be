package api

import (
	"encoding/json"
	"testing"

	"github.com/tributary/tributary/internal/ids"
)

func TestDecodeID(t *testing.T) {
	seed, _ := ids.Lookup("seed000")
	id, err := seed.(ids.Snowflake).Encode(ids.Parts{UnixMilli: 1790000000123, Node: 3, Seq: 7})
	if err != nil {
		t.Fatal(err)
	}
	tw, _ := ids.Lookup("twitter")
	twID, _ := tw.(ids.Snowflake).Encode(ids.Parts{UnixMilli: 1790000000000, Node: 5<<5 | 9, Seq: 1})
	v7, _ := ids.NewUUIDv7(1790000000456, [10]byte{1, 2, 3})
	for _, c := range []struct {
		name, layout string
		id           any
		want         string
	}{
		{"seed000", "seed000", id,
			`{"layout":"seed000","kind":"snowflake","global":true,"created_at":"2026-09-21T14:13:20.123Z","shard":3,"sequence":7,` +
				`"note":"shard is the id's node field: the shard or worker that generated it, not necessarily where the row lives now"}`},
		{"twitter splits the node", "twitter", twID,
			`{"layout":"twitter","kind":"snowflake","global":true,"created_at":"2026-09-21T14:13:20.000Z","shard":169,"datacenter":5,"worker":9,"sequence":1,` +
				`"note":"shard is the id's node field: the shard or worker that generated it, not necessarily where the row lives now"}`},
		{"serial is not global", "serial", int64(17),
			`{"layout":"serial","kind":"serial","global":false,"note":"a per-shard sequence value, not global: the same id may name different rows on different shards; a row is (shard, id)"}`},
		{"uuidv7", "uuidv7", v7.String(),
			`{"layout":"uuidv7","kind":"uuidv7","global":true,"created_at":"2026-09-21T14:13:20.456Z"}`},
		{"hash bigint", "pgdog-hash-bigint:4", int64(1),
			`{"layout":"pgdog-hash-bigint:4","kind":"hash-bigint","global":true,"shard":0,"note":"shard is the id's hash partition: the shard a hash-sharded router places it on"}`},
		{"negative snowflake", "seed000", int64(-5),
			`{"layout":"seed000","global":false,"note":"the id does not fit the table's configured layout","error":"negative: id out of range"}`},
		{"uuid for a bigint layout", "seed000", "0190a4e2-1c3b-7000-8000-000000000001",
			`{"layout":"seed000","global":false,"note":"the id does not fit the table's configured layout","error":"36 characters, longer than any bigint: malformed id"}`},
		{"unknown layout", "nope", int64(1),
			`{"layout":"nope","global":false,"error":"the configured id layout is not known: layout \"nope\" (known: seed000, quickcart, twitter, instagram, uuidv7, uuidv4, pgdog-hash-bigint:N, pgdog-hash-uuid:N, serial): unknown id layout"}`},
	} {
		l, lerr := ids.Lookup(c.layout)
		b, err := json.Marshal(decodeID(c.layout, l, lerr, canonicalID(c.id)))
		if err != nil || string(b) != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, b, c.want)
		}
	}
}
