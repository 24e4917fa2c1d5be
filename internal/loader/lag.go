package loader

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// watchLag samples the group's committed lag per partition (end offset
// minus committed offset): records in Kafka not yet in ClickHouse. It is a
// group-wide view, the same from every loader of the group.
func (l *Loader) watchLag(ctx context.Context, cl *kgo.Client) {
	adm := kadm.NewClient(cl)
	t := time.NewTicker(l.cfg.LagInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		lags, err := adm.Lag(ctx, l.cfg.Group)
		if err != nil {
			if ctx.Err() == nil {
				l.log.Debug("lag sample failed", slog.Any("err", err))
			}
			continue
		}
		for _, g := range lags {
			for _, m := range g.Lag.Sorted() {
				if m.Err != nil || m.Lag < 0 {
					continue
				}
				l.m.lag.WithLabelValues(m.Topic, strconv.Itoa(int(m.Partition))).Set(float64(m.Lag))
			}
		}
	}
}
