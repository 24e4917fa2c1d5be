package chstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// Replica catch-up (schema/clickhouse.md "Cluster mode: every replica
// before the watermark"). An insert through a Distributed table returns
// once one replica of each ClickHouse shard has the rows; the shard's
// other replicas fetch the part later (a GET_PART entry of their
// replication queue). And a retried insert that ClickHouse deduplicates
// (the block's id was committed by a replica that then died) "succeeds"
// on a replica that does not hold the rows at all: its GET_PART waits for
// the dead one. A watermark written before the replicas hold the rows
// would claim rows a read through them misses, so the loader waits here
// first.

// ReplicaWaitStall is how long a reachable replica may be behind before
// SyncReplicas reports it as stalled (and again every ReplicaWaitStall).
const ReplicaWaitStall = 10 * time.Second

// replicaQueryTimeout bounds one poll of a node: a node that does not
// answer in it (down, SIGSTOPped, cut off) is unreachable and skipped.
const replicaQueryTimeout = 5 * time.Second

// ErrReadOnly: a node's replicated table is read-only, or the node cannot
// reach ZooKeeper to say where its replication stands. Nothing can be
// written then, watermarks included, so SyncReplicas returns it instead of
// waiting: the caller retries, and counts the failure like a failed write.
var ErrReadOnly = errors.New("clickhouse replicated table read-only (ZooKeeper lost)")

// zooKeeperCodes are the server's exceptions for a lost ZooKeeper:
// KEEPER_EXCEPTION (a Coordination::Exception: "All connection tries
// failed while connecting to ZooKeeper", measured on 18.16 with it
// SIGKILLed), NO_ZOOKEEPER and TABLE_IS_READ_ONLY.
var zooKeeperCodes = []int32{999, 225, 242}

// ReplicaEvent is what SyncReplicas reports of a node it did not find
// caught up at once.
type ReplicaEvent struct {
	Node Node
	// Unreachable: the node did not answer; it was skipped (it catches up
	// from the shard's log when it is back, and readers do not use a
	// replica that is behind: schema/clickhouse.md).
	Unreachable error
	// Behind says why a reachable node has not caught up yet (its queue's
	// last exception: "No active replica has part ..."), when it has been
	// behind for ReplicaWaitStall or more. SyncReplicas goes on waiting.
	Behind string
	// Waited is how long the node has been waited for.
	Waited time.Duration
}

// SyncReplicas waits until every reachable replica of the local tables of
// tables (source tables, sharded) holds every part their shard's log held
// when it was called: the node has copied the log past that entry into its
// queue, and no GET_PART of its queue was created before the call. A node
// that does not answer is skipped and reported; a node that answers but
// does not catch up (its missing part lives only on a node that is down)
// is waited for until ctx ends, reported every ReplicaWaitStall; one whose
// table is read-only, or that has lost ZooKeeper, is ErrReadOnly.
// Nothing to do on one server. report may be nil.
func (s *Store) SyncReplicas(ctx context.Context, tables []string, report func(ReplicaEvent)) error {
	if s.cluster == "" || len(tables) == 0 {
		return nil
	}
	start := time.Now()
	locals := make([]string, len(tables))
	for i, t := range tables {
		locals[i] = s.LocalTable(t)
	}
	for _, n := range s.nodes {
		if err := s.syncNode(ctx, n, locals, start, report); err != nil {
			return err
		}
	}
	return nil
}

// syncNode waits for one node (SyncReplicas). Only ctx's end is an error.
func (s *Store) syncNode(ctx context.Context, n Node, locals []string, start time.Time, report func(ReplicaEvent)) error {
	var c catchUp
	wait := 10 * time.Millisecond
	nextReport := start.Add(ReplicaWaitStall)
	for {
		behind, err := s.nodeBehind(ctx, n, locals, &c)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, ErrReadOnly):
			return err
		case isServerError(err, zooKeeperCodes...):
			return fmt.Errorf("%w: %s: %w", ErrReadOnly, n, err)
		case err != nil && !isServerError(err):
			if report != nil {
				report(ReplicaEvent{Node: n, Unreachable: err, Waited: time.Since(start)})
			}
			return nil
		case err != nil:
			behind = err.Error()
		case behind == "":
			return nil
		}
		if now := time.Now(); !now.Before(nextReport) {
			if report != nil {
				report(ReplicaEvent{Node: n, Behind: behind, Waited: now.Sub(start)})
			}
			nextReport = now.Add(ReplicaWaitStall)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// catchUp is what one node must reach (syncNode): set by the first poll.
type catchUp struct {
	targets map[string]uint64 // per local table, the log entry it must be past
	// before: its GET_PART entries created before this, in Unix seconds
	// on the node's clock, are waited for. create_time is a DateTime: the
	// node's now() plus a second, so that an entry of that second counts
	// as before (waited for: at worst a later insert's part too). Unix
	// seconds keep the server's time zone out of the comparison.
	before uint32
}

// nodeBehind says why node n has not caught up with c ("": caught up).
// The first call sets c from the node's view of its shard's log (the
// newest entry of each table's log) and its clock.
func (s *Store) nodeBehind(ctx context.Context, n Node, locals []string, c *catchUp) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, replicaQueryTimeout)
	defer cancel()
	if c.targets == nil {
		var now uint32
		if err := n.conn.QueryRow(ctx, "SELECT toUInt32(now())").Scan(&now); err != nil {
			return "", err
		}
		c.before = now + 1
	}
	rows, err := n.conn.Query(ctx, `SELECT table, zookeeper_path, log_max_index, log_pointer, is_readonly
		FROM system.replicas WHERE database = ? AND has(?, table)`, s.db, locals)
	if err != nil {
		return "", err
	}
	type state struct {
		path              string
		maxIndex, pointer uint64
		readonly          bool
	}
	seen := map[string]state{}
	for rows.Next() {
		var table, path string
		var maxIndex, pointer uint64
		var readonly uint8
		if err := rows.Scan(&table, &path, &maxIndex, &pointer, &readonly); err != nil {
			rows.Close()
			return "", err
		}
		seen[table] = state{path, maxIndex, pointer, readonly == 1}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return "", err
	}
	if c.targets == nil {
		c.targets = map[string]uint64{}
		for t, st := range seen {
			c.targets[t] = st.maxIndex
		}
	}
	for _, t := range locals {
		st, ok := seen[t]
		switch {
		case !ok:
			// Not created yet (a watermark before the table's first
			// change): nothing was inserted into it, as a table is created
			// on every node before its first insert.
			continue
		case st.readonly:
			return "", fmt.Errorf("%w: %s: %s", ErrReadOnly, n, t)
		}
		if st.pointer > c.targets[t] {
			continue
		}
		// log_pointer is the next entry to copy, so 0 is also an empty
		// log: a table nothing was inserted into yet.
		if st.pointer == 0 {
			var entries uint64
			if err := n.conn.QueryRow(ctx, "SELECT count() FROM system.zookeeper WHERE path = ?", st.path+"/log").Scan(&entries); err != nil {
				return "", err
			}
			if entries == 0 {
				continue
			}
		}
		return fmt.Sprintf("%s: %s has not copied entry %d of its shard's log yet (its next: %d)", n, t, c.targets[t], st.pointer), nil
	}
	var gets uint64
	var last string
	err = n.conn.QueryRow(ctx, `SELECT count(), anyLast(last_exception) FROM system.replication_queue
		WHERE database = ? AND has(?, table) AND type = 'GET_PART' AND toUInt32(create_time) < ?`, s.db, locals, c.before).Scan(&gets, &last)
	if err != nil {
		return "", err
	}
	if gets == 0 {
		return "", nil
	}
	msg := fmt.Sprintf("%s: %d parts to fetch", n, gets)
	if last != "" {
		msg += ": " + strings.TrimSpace(last)
	}
	return msg, nil
}

// isServerError: the server answered, with an exception (as opposed to
// a node that did not answer); with codes, with one of them.
func isServerError(err error, codes ...int32) bool {
	var ex *clickhouse.Exception
	return errors.As(err, &ex) && (len(codes) == 0 || slices.Contains(codes, ex.Code))
}
