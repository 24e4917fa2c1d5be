package reader

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/internal/envelope"
)

// readerState is what a reader remembers across restarts, in a compacted
// Kafka topic keyed by the shard's identity (see shardIdentity). It answers
// three questions the slot alone cannot: did the initial snapshot finish (a
// slot whose snapshot did not finish must not be streamed from), how far
// did an unfinished snapshot get (so that a restart continues it instead of
// starting over), and was the slot dropped and recreated behind our back
// (its confirmed position would then be below the one we stored, since a
// slot never moves backwards).
type readerState struct {
	Slot  string `json:"slot"`
	Shard int    `json:"shard"`
	// SystemID and Database name the PostgreSQL cluster (its system
	// identifier, which a physical standby shares and a new initdb does
	// not) and database the state is of; empty in states saved before
	// they were recorded (keyed by slot name alone; see pickState).
	SystemID     string       `json:"system_id,omitempty"`
	Database     string       `json:"database,omitempty"`
	SnapshotDone bool         `json:"snapshot_done"`
	Confirmed    envelope.LSN `json:"confirmed"`
	// ConsistentPoint is the slot's consistent point, stored once the slot
	// exists and the copy may begin. An unfinished snapshot is resumable
	// only while the slot is still exactly there: nothing was confirmed
	// past it, so every change after it will still be streamed.
	ConsistentPoint envelope.LSN `json:"consistent_point,omitempty"`
	// SnapshotEnd is the WAL insert position read after the snapshot's last
	// chunk: no copied row shows a state newer than it. Watermarks stay
	// below it (see snapshot.go), so a shard is never called complete at a
	// position its copied rows are ahead of.
	SnapshotEnd envelope.LSN `json:"snapshot_end,omitempty"`
	// Epoch is the snapshot epoch of this slot's data (see
	// envelope.Event.Epoch): 0 for the first copy, one more per copy taken
	// again after changes were lost.
	Epoch uint16 `json:"epoch,omitempty"`
	// Timeline is the source's WAL timeline when the state was saved (0 in
	// states saved before it was recorded). A slot behind the stored
	// position on the same timeline went back in a crash (PostgreSQL
	// persists confirmed_flush_lsn at checkpoints only); on another
	// timeline the database itself went back (a restore).
	Timeline uint32 `json:"timeline,omitempty"`
	// Snapshot is the progress of an unfinished snapshot (nil once done).
	Snapshot *snapshotState `json:"snapshot,omitempty"`
	// Resnapshots are the resnapshots running (resnapshot.go), with
	// their progress; EndedResnapshots the last one finished (done or
	// failed) of each table.
	Resnapshots      []*Resnapshot `json:"resnapshots,omitempty"`
	EndedResnapshots []*Resnapshot `json:"ended_resnapshots,omitempty"`
	// Resnapshot and LastResnapshot are the newest of each, as readers
	// that ran one resnapshot at a time stored them (read when the lists
	// are absent).
	Resnapshot     *Resnapshot `json:"resnapshot,omitempty"`
	LastResnapshot *Resnapshot `json:"last_resnapshot,omitempty"`
	// Sweeps: the reader has ClickHouse to sweep with (Config.SweepStore),
	// so it takes resnapshots with a predicate.
	Sweeps    bool      `json:"sweeps,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

// shardIdentity is what reader state is keyed by: the PostgreSQL cluster
// (system identifier, from IDENTIFY_SYSTEM), the database and the slot.
// Keyed by slot name alone, two deployments on one Kafka with the default
// slot names would read each other's positions.
type shardIdentity struct {
	SystemID, Database, Slot string
}

// key is the state topic's record key: system/database/slot. A slot name
// has no "/" (PostgreSQL allows [a-z0-9_]), nor has a system identifier.
func (id shardIdentity) key() string { return id.SystemID + "/" + id.Database + "/" + id.Slot }

func (id shardIdentity) String() string {
	return fmt.Sprintf("system %s, database %s, slot %s", id.SystemID, id.Database, id.Slot)
}

// ErrForeignState is returned when the state topic holds state for this
// reader's slot and shard that belongs to another PostgreSQL cluster.
var ErrForeignState = errors.New("reader state of another cluster")

// storedStates are the records of the state topic that may concern a
// reader, newest per key.
type storedStates struct {
	own    *readerState            // under the reader's identity key
	legacy *readerState            // under the slot name alone (the old format)
	others map[string]*readerState // under other identities with the same slot, by key
}

// pickState chooses the state a reader starts from, or refuses:
//   - state under its own identity, if it says the same identity and shard;
//   - else state in the old format (keyed by slot name, no identity) of the
//     same shard number, which is migrated (migrate: save it under the
//     identity and delete the old key); of another shard number it is not
//     this reader's, and it refuses;
//   - else, while the slot exists, state of the same slot and shard from
//     another cluster means two deployments share the topic with the same
//     names, or the database was replaced under the slot: it refuses,
//     since neither the slot nor that state can be trusted to be this one's;
//   - else nothing (a first start).
func pickState(st storedStates, id shardIdentity, shard int, slotExists bool) (stored *readerState, migrate bool, err error) {
	if o := st.own; o != nil {
		if o.SystemID != id.SystemID || o.Database != id.Database || o.Slot != id.Slot {
			return nil, false, fmt.Errorf("%w: the state stored under %q names system %s, database %s, slot %s",
				ErrForeignState, id.key(), o.SystemID, o.Database, o.Slot)
		}
		if o.Shard != shard {
			return nil, false, fmt.Errorf("%w: the state of %s was stored by shard %d, and this reader is shard %d: check --shard and the DSN ($TRIBUTARY_PG_DSN)",
				ErrForeignState, id, o.Shard, shard)
		}
		return o, false, nil
	}
	if l := st.legacy; l != nil {
		if l.Shard != shard {
			return nil, false, fmt.Errorf("%w: the state topic holds state for slot %s in the old format (keyed by slot name) stored by shard %d, and this reader is shard %d: it is another shard's or another deployment's; give this reader its own --slot or --state-topic",
				ErrForeignState, id.Slot, l.Shard, shard)
		}
		return l, true, nil
	}
	if slotExists {
		for _, o := range st.others {
			if o.Shard == shard && o.Slot == id.Slot && o.Database == id.Database {
				return nil, false, fmt.Errorf("%w: slot %s exists on this cluster (system %s) but no state is stored for it, and the state topic holds state for slot %s of shard %d from system %s: two deployments share the topic with the same slot names, or the database was replaced; give this deployment its own --state-topic, or drop slot %s so that the shard is copied again",
					ErrForeignState, id.Slot, id.SystemID, o.Slot, o.Shard, o.SystemID, id.Slot)
			}
		}
	}
	return nil, false, nil
}

// stateStore reads and writes reader state.
type stateStore struct {
	cl       *kgo.Client
	topic    string
	id       shardIdentity
	epoch    uint16 // stamped on every state saved
	timeline uint32 // likewise
	// endsWait bounds how long load asks again for the topic's end
	// offsets while Kafka answers them with a transient error (0:
	// defaultEndsWait); retried, if set, is called before each wait.
	endsWait time.Duration
	retried  func(err error, wait time.Duration)
}

// defaultEndsWait is how long load waits for the state topic's end
// offsets to be answerable: a restarted broker took over 90 s to rejoin
// a 3-node cluster at load 40-60 (tests/cluster_test.go, stackUp).
const defaultEndsWait = 2 * time.Minute

func ensureStateTopic(ctx context.Context, cl *kgo.Client, topic string, rf int16) error {
	adm := kadm.NewClient(cl)
	missing, err := missingTopics(ctx, adm, []string{topic})
	if err != nil {
		return fmt.Errorf("state topic: %w", err)
	}
	if len(missing) > 0 {
		res, err := adm.CreateTopics(ctx, 1, brokerReplicas(rf), map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, topic)
		if err != nil {
			return fmt.Errorf("create state topic: %w", err)
		}
		for _, r := range res.Sorted() {
			if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
				return fmt.Errorf("create state topic %s: %w", topic, r.Err)
			}
		}
	}
	// Reading the state right after creation must not mistake a topic the
	// metadata does not show yet for an empty one.
	_, err = waitPartitions(ctx, adm, []string{topic}, 30*time.Second)
	return err
}

// load reads the records that concern this reader's slot, reading the
// topic from the start to its current end.
func (s *stateStore) load(ctx context.Context, brokers []string, kafkaOpts []kgo.Opt) (storedStates, error) {
	st := storedStates{others: map[string]*readerState{}}
	ends, err := s.endOffsets(ctx)
	if err != nil {
		return st, err
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	if len(ends) == 0 {
		return st, fmt.Errorf("state topic %s: no partitions in the offsets answer", s.topic)
	}
	if len(want) == 0 {
		return st, nil
	}
	cons, err := kgo.NewClient(append(kafkaOpts, kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(s.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		return st, fmt.Errorf("state consumer: %w", err)
	}
	defer cons.Close()
	for len(want) > 0 {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return st, fmt.Errorf("read state: %w", err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return st, fmt.Errorf("read state: %w", ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			s.note(&st, string(r.Key), r.Value)
			if end, ok := want[r.Partition]; ok && r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
	return st, nil
}

// endOffsets lists the end offset of every partition of the state topic.
// A partition whose end cannot be read is an error, never "no state":
// taking it for empty would drop the slot and re-snapshot the shard. But
// an error Kafka calls retriable — the topic not yet in the answering
// broker's metadata, a partition without a leader or whose leader moved
// (UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE,
// NOT_LEADER_OR_FOLLOWER), as right after a broker restart — is asked
// again after a backoff (50 ms, doubling to 2 s) until endsWait has
// passed; any other error ends the start at once.
func (s *stateStore) endOffsets(ctx context.Context) (kadm.ListedOffsets, error) {
	within := s.endsWait
	if within <= 0 {
		within = defaultEndsWait
	}
	deadline := time.Now().Add(within)
	adm := kadm.NewClient(s.cl)
	backoff := 50 * time.Millisecond
	for {
		ends, err := adm.ListEndOffsets(ctx, s.topic)
		if err == nil {
			err = ends.Error()
		}
		if err == nil {
			return ends, nil
		}
		if ctx.Err() != nil || !kerr.IsRetriable(err) {
			return nil, fmt.Errorf("state topic offsets: %w", err)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("state topic offsets: still %w after %s", err, within)
		}
		if s.retried != nil {
			s.retried(err, backoff)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("state topic offsets: %w (last answer: %w)", ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// note takes one state record into st: the newest record of a key wins, a
// tombstone (nil value) deletes it.
func (s *stateStore) note(st *storedStates, key string, value []byte) {
	var v *readerState
	if value != nil {
		var x readerState
		if json.Unmarshal(value, &x) != nil {
			return
		}
		v = &x
	}
	switch {
	case key == s.id.key():
		st.own = v
	case key == s.id.Slot:
		st.legacy = v
	case strings.HasSuffix(key, "/"+s.id.Slot):
		if v == nil {
			delete(st.others, key)
		} else {
			st.others[key] = v
		}
	}
}

// migrate stores a state read in the old format under the identity key,
// then deletes the old key, so that no other deployment takes it too.
func (s *stateStore) migrate(ctx context.Context, st readerState) error {
	st.SystemID, st.Database = s.id.SystemID, s.id.Database
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	if err := s.cl.ProduceSync(ctx, &kgo.Record{Topic: s.topic, Key: []byte(s.id.key()), Value: b}).FirstErr(); err != nil {
		return fmt.Errorf("migrate state: %w", err)
	}
	if err := s.cl.ProduceSync(ctx, &kgo.Record{Topic: s.topic, Key: []byte(s.id.Slot)}).FirstErr(); err != nil {
		return fmt.Errorf("migrate state: delete the old key: %w", err)
	}
	return nil
}

// save stores st synchronously, under the reader's identity.
func (s *stateStore) save(ctx context.Context, st readerState) error {
	st.UpdatedAt = time.Now().UTC()
	st.Epoch, st.Timeline = s.epoch, s.timeline
	st.SystemID, st.Database = s.id.SystemID, s.id.Database
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	if err := s.cl.ProduceSync(ctx, &kgo.Record{Topic: s.topic, Key: []byte(s.id.key()), Value: b}).FirstErr(); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	return nil
}

// startEpoch is the snapshot epoch a start runs in. Continuing keeps the
// stored epoch. A new copy over data that an earlier copy or stream may
// have written — the slot was lost, dropped or recreated while state was
// stored — is the next epoch, so that its rows beat the stale ones and its
// snapshot end removes rows deleted in the gap. A first start is epoch 0.
func startEpoch(action startAction, stored *readerState) uint16 {
	switch {
	case action == actionResume || action == actionResumeSnapshot:
		return stored.Epoch
	case stored != nil:
		return stored.Epoch + 1
	case action == actionRecreate:
		// A slot exists but no state was stored: something ran before;
		// be newer than an unknown first copy.
		return 1
	}
	return 0
}

// startAction is what a reader does with its slot at start-up.
type startAction int

const (
	// actionResume streams from the slot's confirmed position.
	actionResume startAction = iota
	// actionCreate creates the slot and takes the initial snapshot.
	actionCreate
	// actionRecreate drops the slot, creates it again and snapshots: what
	// the slot would stream from cannot be trusted to be complete.
	actionRecreate
	// actionResumeSnapshot continues an unfinished snapshot from its stored
	// progress, then streams from the slot's consistent point.
	actionResumeSnapshot
)

func (a startAction) String() string {
	switch a {
	case actionResume:
		return "resume"
	case actionCreate:
		return "create"
	case actionRecreate:
		return "recreate"
	case actionResumeSnapshot:
		return "resume-snapshot"
	}
	return fmt.Sprintf("startAction(%d)", int(a))
}

// decideStart compares the slot with the stored state and says what to do
// and why. The slot's confirmed position wins over the stored one when it
// is ahead (the stored one lags by up to one save interval, and the slot
// is confirmed only after Kafka acknowledged). A slot behind the stored
// position on the same timeline lost its newest position in a crash
// (confirmed_flush_lsn is persisted at checkpoints): resuming from it sends
// changes again, which is harmless. Behind it on another timeline (or with
// no timeline recorded), the database or slot was restored or recreated,
// and the slot cannot be trusted.
func decideStart(slot slotInfo, stored *readerState) (startAction, string) {
	switch {
	case !slot.exists:
		return actionCreate, "no slot yet"
	case slot.walStatus == "lost":
		return actionRecreate, "the slot's WAL was removed (wal_status = lost): changes are gone"
	case stored == nil:
		return actionRecreate, "the slot exists but no reader state was ever stored for it, so its snapshot cannot be known complete"
	case !stored.SnapshotDone && (stored.ConsistentPoint == 0 || stored.Snapshot == nil):
		return actionRecreate, "the initial snapshot did not finish and never recorded a start (the reader stopped while creating the slot)"
	case !stored.SnapshotDone && slot.confirmed != stored.ConsistentPoint:
		// Confirmed past the consistent point, changes in between may never
		// have reached Kafka; behind it, the slot is not the one the copy
		// started with.
		return actionRecreate, fmt.Sprintf("the initial snapshot did not finish and the slot is at %s, not at the snapshot's consistent point %s",
			slot.confirmed, stored.ConsistentPoint)
	case !stored.SnapshotDone:
		return actionResumeSnapshot, fmt.Sprintf("the initial snapshot did not finish; continuing it from its stored progress (slot still at its consistent point %s)",
			slot.confirmed)
	case stored.Confirmed > slot.confirmed && stored.Timeline != 0 && stored.Timeline == slot.timeline:
		return actionResume, fmt.Sprintf("the slot is at %s, behind the stored %s on the same timeline %d: PostgreSQL went down before it persisted the slot's newer position; resuming from the slot, so the changes in between are produced again (the loader drops the repeats)",
			slot.confirmed, stored.Confirmed, slot.timeline)
	case stored.Confirmed > slot.confirmed:
		return actionRecreate, fmt.Sprintf("the slot is at %s, behind the stored %s, and the timeline is %d (stored: %d; 0 = not recorded): the database or the slot was restored or recreated behind our back, so what the slot streams cannot be trusted to match what was produced",
			slot.confirmed, stored.Confirmed, slot.timeline, stored.Timeline)
	}
	return actionResume, fmt.Sprintf("resuming at the slot's confirmed position %s (stored %s; the slot wins: it only moves after Kafka acknowledged)",
		slot.confirmed, stored.Confirmed)
}
