package reader

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/envelope"
)

// rowImage is one row's image, reused from row to row: the encoder copies
// it into the record, so only the values' strings are allocated per row.
// strs keeps the last row's values (copyRange continues after its key).
type rowImage struct {
	after map[string]*string
	strs  []string
	size  int // the previous record's size, to size the next buffer
}

func newRowImage(tab *snapTable) *rowImage {
	return &rowImage{after: make(map[string]*string, len(tab.cols)), strs: make([]string, len(tab.cols)), size: 256}
}

// chunkAcked is the producer callback of a chunk's records.
func (r *Reader) chunkAcked(prog *snapProgress, c *chunk) func(*kgo.Record, error) {
	return func(_ *kgo.Record, err error) {
		if err != nil {
			r.m.errors.WithLabelValues("produce").Inc()
		}
		prog.ack(c, err)
	}
}

// produceSnapRow hands one copied row to the producer as a snapshot read.
func (r *Reader) produceSnapRow(pctx context.Context, enc *envelope.Encoder, img *rowImage, tab *snapTable, vals [][]byte,
	now time.Time, cp envelope.LSN, acked func(*kgo.Record, error)) error {
	t := tab.t
	if len(vals) != len(tab.cols) {
		return fmt.Errorf("snapshot %s: %d values for %d columns (did the table change?)", t.Name, len(vals), len(tab.cols))
	}
	for i, v := range vals {
		if v != nil {
			img.strs[i] = string(v) // vals is reused by the next row
			img.after[tab.cols[i].Name] = &img.strs[i]
		} else {
			img.strs[i] = ""
			img.after[tab.cols[i].Name] = nil
		}
	}
	id, ok := tab.id(vals, img.strs)
	if !ok {
		return fmt.Errorf("snapshot %s: NULL id", t.Name)
	}
	ev := envelope.Event{
		Kind: envelope.KindChange, Shard: r.cfg.Shard, Schema: t.Schema, Table: t.Name,
		Op: envelope.OpRead, ID: id, CommitLSN: cp, CommitTime: now,
		Columns: tab.cols, After: img.after, Epoch: tab.epoch,
	}
	b := enc.Append(make([]byte, 0, img.size+64), &ev)
	img.size = len(b)
	r.producer.Produce(pctx, &kgo.Record{Topic: t.Topic, Key: []byte(id), Value: b}, acked)
	return nil
}
