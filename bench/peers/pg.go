package peers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/bench/internal/benchwork"
	"github.com/tributary/tributary/internal/envelope"
)

// bench holds the connections the harness itself uses: one to the shard
// (slot polling, DDL) and one Kafka admin client.
type bench struct {
	cfg   config
	runID string
	pg    *pgx.Conn
	kc    *kgo.Client
	adm   *kadm.Client
}

func newBench(ctx context.Context, c config) (*bench, error) {
	pg, err := pgx.Connect(ctx, c.dsn)
	if err != nil {
		return nil, fmt.Errorf("shard %d: %w", c.shard, err)
	}
	kc, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(c.brokers, ",")...))
	if err != nil {
		pg.Close(ctx)
		return nil, err
	}
	return &bench{cfg: c, runID: time.Now().UTC().Format("150405"), pg: pg, kc: kc, adm: kadm.NewClient(kc)}, nil
}

func (b *bench) close() {
	b.kc.Close()
	b.pg.Close(context.Background())
}

// cleanups undo what a case created, newest first, also after errors.
type cleanups struct{ fns []func(context.Context) error }

func (c *cleanups) add(f func(context.Context) error) { c.fns = append(c.fns, f) }

func (c *cleanups) run(b *bench) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := len(c.fns) - 1; i >= 0; i-- {
		if err := c.fns[i](ctx); err != nil {
			fmt.Println("  cleanup:", err)
		}
	}
}

func (b *bench) createTable(ctx context.Context, wc *workCase, table string, cl *cleanups) error {
	cl.add(func(ctx context.Context) error {
		_, err := b.pg.Exec(ctx, "DROP TABLE IF EXISTS "+table)
		return err
	})
	return wc.setup(ctx, b.pg, table)
}

// prepare creates the system's publication and data topic (so that both
// systems get --partitions partitions: the cdc-reader creates its topics so,
// Debezium's sink would rely on auto-creation) and registers their removal
// and the slot's.
func (b *bench) prepare(ctx context.Context, s *system, cl *cleanups, topicConfig map[string]*string) error {
	cl.add(func(ctx context.Context) error {
		_, err := b.adm.DeleteTopics(ctx, s.topics...)
		return err
	})
	cl.add(func(ctx context.Context) error {
		_, err := b.pg.Exec(ctx, "DROP PUBLICATION IF EXISTS "+s.pub)
		return err
	})
	cl.add(benchwork.DropSlot(b.pg, s.slot))
	if _, err := b.pg.Exec(ctx, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", s.pub, s.table)); err != nil {
		return err
	}
	res, err := b.adm.CreateTopics(ctx, int32(b.cfg.partitions), -1, topicConfig, s.dataTopic)
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.Err != nil {
			return fmt.Errorf("create topic %s: %w", r.Topic, r.Err)
		}
	}
	return nil
}

type slotState struct {
	streaming bool // a walsender holds it after START_REPLICATION
	confirmed envelope.LSN
}

func (b *bench) slotState(ctx context.Context, slot string) (slotState, error) {
	var confirmed, state *string
	err := b.pg.QueryRow(ctx, `SELECT s.confirmed_flush_lsn::text, r.state
		FROM pg_replication_slots s LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid
		WHERE s.slot_name = $1`, slot).Scan(&confirmed, &state)
	if errors.Is(err, pgx.ErrNoRows) {
		return slotState{}, nil
	}
	if err != nil {
		return slotState{}, fmt.Errorf("slot %s: %w", slot, err)
	}
	var st slotState
	st.streaming = state != nil && (*state == "streaming" || *state == "catchup")
	if confirmed != nil {
		if st.confirmed, err = envelope.ParseLSN(*confirmed); err != nil {
			return st, err
		}
	}
	return st, nil
}

// endOffsets are the topic's high watermarks, per partition.
func (b *bench) endOffsets(ctx context.Context, topic string) ([]int64, error) {
	lo, err := b.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	if err := lo.Error(); err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	hwm := make([]int64, b.cfg.partitions)
	for _, o := range lo[topic] {
		if int(o.Partition) < len(hwm) {
			hwm[o.Partition] = o.Offset
		}
	}
	return hwm, nil
}
