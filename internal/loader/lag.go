package loader

import (
	"context"
	"strconv"

	"github.com/twmb/franz-go/pkg/kadm"
)

// sampleLag samples the group's lag per partition (every LagInterval, as
// a monitor): of the records that were in Kafka at the previous sample
// (the partition's start and end offsets then), those the group has not
// committed by this one. It is a group-wide view, the same from every
// loader of the group.
//
// Why the end offsets of one sample against the commits of the next: the
// readers keep writing watermark rounds (one record to every partition)
// to idle shards, so at any instant a round may be in Kafka and not yet
// committed. "End now minus committed now" then read 1 on every partition
// of a converged pipeline whenever the sample met a round in flight — with
// a reader's and the sampler's period in step, for minutes (a lag alert
// could never clear). A record one interval old and still not committed
// is lag; one produced since is not yet.
func (l *Loader) sampleLag(ctx context.Context, adm offsetLister) error {
	if l.lagPrev != nil {
		committed, err := adm.FetchOffsets(ctx, l.cfg.Group)
		if err != nil {
			return err //nolint:wrapcheck // the monitor's log says what failed; lagPrev stays: the next sample measures against it
		}
		for p, n := range l.lagPrev.lag(committed) {
			l.m.lag.WithLabelValues(p.topic, strconv.Itoa(int(p.part))).Set(float64(n))
		}
	}
	next, err := listRange(ctx, adm, l.cfg.Tables.Topics())
	if err != nil {
		return err
	}
	l.lagPrev = next
	return nil
}

// offsetLister is what watchLag asks Kafka (a *kadm.Client).
type offsetLister interface {
	FetchOffsets(ctx context.Context, group string) (kadm.OffsetResponses, error)
	ListStartOffsets(ctx context.Context, topics ...string) (kadm.ListedOffsets, error)
	ListEndOffsets(ctx context.Context, topics ...string) (kadm.ListedOffsets, error)
}

// topicPart names a partition.
type topicPart struct {
	topic string
	part  int32
}

// listedRange is each partition's start and end offset at one instant.
type listedRange map[topicPart][2]int64

func listRange(ctx context.Context, adm offsetLister, topics []string) (listedRange, error) {
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, err
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, err
	}
	out := listedRange{}
	ends.Each(func(e kadm.ListedOffset) {
		s, ok := starts.Lookup(e.Topic, e.Partition)
		if e.Err != nil || !ok || s.Err != nil {
			return // not listed: no reading for it this time
		}
		out[topicPart{e.Topic, e.Partition}] = [2]int64{s.Offset, e.Offset}
	})
	return out, nil
}

// lag is, per partition of r, how many of its records the group has not
// committed in committed: from its committed offset (its start when it has
// none, or when retention removed what the commit points at) to its end.
// A partition whose commit could not be read has no reading.
func (r listedRange) lag(committed kadm.OffsetResponses) map[topicPart]int64 {
	out := make(map[topicPart]int64, len(r))
	for p, se := range r {
		from := se[0]
		if c, ok := committed.Lookup(p.topic, p.part); ok {
			if c.Err != nil {
				continue
			}
			from = max(from, c.At)
		}
		out[p] = max(0, se[1]-from)
	}
	return out
}
