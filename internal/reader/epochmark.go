package reader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The snapshot epoch is kept in two places. The reader's state (Kafka)
// holds it with everything else; a comment on the shard's publication
// holds it again, so that it outlives a lost state topic. Without it a
// reader that finds no state starts over at epoch 0 or 1, and if an earlier
// copy had reached a higher epoch the new copy's rows would lose to the
// stale ones already in ClickHouse — and its snapshot end would leave live
// the rows deleted while changes were lost. With it, such a start copies in
// the next epoch after the recorded one.

// epochMarkPrefix starts the publication comment that records the epoch.
const epochMarkPrefix = "tributary epoch="

// epochMark is the epoch recorded on the publication, if any.
type epochMark struct {
	epoch    uint16
	recorded bool
	// foreign: the publication has a comment that is not ours; it is left
	// alone (and the epoch not recorded).
	foreign bool
}

// readEpochMark reads the epoch recorded on publication pub.
func readEpochMark(ctx context.Context, conn *pgx.Conn, pub string) (epochMark, error) {
	var comment *string
	err := conn.QueryRow(ctx, "SELECT obj_description(oid, 'pg_publication') FROM pg_publication WHERE pubname = $1", pub).Scan(&comment)
	if errors.Is(err, pgx.ErrNoRows) {
		return epochMark{}, nil
	}
	if err != nil {
		return epochMark{}, fmt.Errorf("read the epoch recorded on publication %s: %w", pub, err)
	}
	return parseEpochMark(comment)
}

// parseEpochMark parses a publication comment (nil: none).
func parseEpochMark(comment *string) (epochMark, error) {
	if comment == nil || *comment == "" {
		return epochMark{}, nil
	}
	rest, ok := strings.CutPrefix(*comment, epochMarkPrefix)
	if !ok {
		return epochMark{foreign: true}, nil
	}
	digits, _, _ := strings.Cut(rest, " ")
	n, err := strconv.ParseUint(digits, 10, 16)
	if err != nil {
		return epochMark{}, fmt.Errorf("the publication's comment %q records no valid epoch (%w): correct it to %s<n> with the highest epoch this shard's data reached, or remove it", *comment, err, epochMarkPrefix)
	}
	return epochMark{epoch: uint16(n), recorded: true}, nil
}

// chooseEpoch is the epoch a start copies or streams in, from the action,
// the stored state and the epoch recorded on the publication: startEpoch's
// choice, or — when a new copy starts with an epoch recorded that is not
// below it — the next epoch after the recorded one, so that the copy beats
// every row an earlier epoch wrote, and its snapshot end removes the rows
// it no longer contains. raised says the record decided.
func chooseEpoch(action startAction, stored *readerState, mark epochMark) (epoch uint16, raised bool, err error) {
	e := startEpoch(action, stored)
	if action == actionResume || action == actionResumeSnapshot || !mark.recorded || e > mark.epoch {
		return e, false, nil
	}
	if mark.epoch == 1<<16-1 {
		return 0, false, fmt.Errorf("the publication records epoch %d, the last one: a new copy has no higher epoch to take", mark.epoch)
	}
	return mark.epoch + 1, true, nil
}

// recordEpoch records epoch on publication pub, unless an epoch as high is
// recorded already (it never lowers the mark) or the publication's comment
// is someone else's. A failure is
// logged, not returned: the epoch is still in the reader's state; only a
// lost state would then be unsafe, which the warning says.
func recordEpoch(ctx context.Context, conn *pgx.Conn, pub string, epoch uint16, mark epochMark, log *slog.Logger) {
	if mark.recorded && mark.epoch >= epoch {
		return
	}
	if mark.foreign {
		log.Warn("the publication has a comment of its own, so the snapshot epoch is kept only in the reader's state: if that state is lost, a new copy may lose to older rows (schema/envelope.md, \"Epochs\")",
			slog.String("publication", pub), slog.Int("epoch", int(epoch)))
		return
	}
	q := fmt.Sprintf("COMMENT ON PUBLICATION %s IS '%s%d (the cdc-reader''s snapshot epoch of this shard; keep it)'",
		pgx.Identifier{pub}.Sanitize(), epochMarkPrefix, epoch)
	if _, err := conn.Exec(ctx, q); err != nil {
		log.Warn("could not record the snapshot epoch on the publication (the role must own it), so it is kept only in the reader's state: if that state is lost, a new copy may lose to older rows (schema/envelope.md, \"Epochs\")",
			slog.String("publication", pub), slog.Int("epoch", int(epoch)), slog.Any("err", err))
		return
	}
	log.Info("snapshot epoch recorded on the publication", slog.String("publication", pub), slog.Int("epoch", int(epoch)))
}
