package loader

import (
	"context"
	"strconv"

	"github.com/twmb/franz-go/pkg/kadm"
)

// sampleLag samples the group's committed lag per partition (end offset
// minus committed offset): records in Kafka not yet in ClickHouse. It is a
// group-wide view, the same from every loader of the group.
func (l *Loader) sampleLag(ctx context.Context, adm *kadm.Client) error {
	lags, err := adm.Lag(ctx, l.cfg.Group)
	if err != nil {
		return err //nolint:wrapcheck // the monitor's log says what failed
	}
	for _, g := range lags {
		for _, m := range g.Lag.Sorted() {
			if m.Err != nil || m.Lag < 0 {
				continue
			}
			l.m.lag.WithLabelValues(m.Topic, strconv.Itoa(int(m.Partition))).Set(float64(m.Lag))
		}
	}
	return nil
}
