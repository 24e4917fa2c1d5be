package envelope

import (
	"reflect"
	"testing"
	"time"
)

// A partition's truncate survives both encoders and both decoders, and is
// written as version 3 so that older consumers refuse it instead of reading
// it as a truncate of the whole table.
func TestPartitionScopeRoundTrip(t *testing.T) {
	ev := &Event{Kind: KindChange, Shard: 5, Schema: "public", Table: "payments", Op: OpTruncate,
		LSN: 0x16B374D848, CommitLSN: 0x16B374D900, CommitTime: time.Unix(1700000000, 0).UTC(), Partitions: 4,
		Partition: &PartitionScope{Cause: "detach", Partition: "public.payments_2026_01", Levels: []PartitionBound{
			{Strategy: "r", Columns: []string{"paid_at"}, Bound: "FOR VALUES FROM ('2026-01-01 00:00:00+00') TO ('2026-02-01 00:00:00+00')"},
			{Strategy: "l", Columns: []string{"region"}, Bound: "DEFAULT", Siblings: []string{"FOR VALUES IN ('eu')"}},
		}}}
	var enc Encoder
	for name, b := range map[string][]byte{"append": enc.Append(nil, ev), "json": mustEncode(t, ev)} {
		for dname, decode := range map[string]func([]byte) (*Event, error){"decoder": new(Decoder).Decode, "json": Decode} {
			got, err := decode(b)
			if err != nil {
				t.Fatalf("%s/%s: %v", name, dname, err)
			}
			if got.V != 3 || !reflect.DeepEqual(got.Partition, ev.Partition) {
				t.Errorf("%s/%s: v %d, partition %+v", name, dname, got.V, got.Partition)
			}
		}
	}
	bad := *ev
	bad.Op = OpDelete
	bad.ID = "1"
	if err := bad.Validate(); err == nil {
		t.Error("a delete with a partition scope was accepted")
	}
}

func mustEncode(t *testing.T, ev *Event) []byte {
	t.Helper()
	b, err := Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
