package query

// ClickHouse 18.16 keeps the move log's times to the second, so two moves
// of one document started within the same second tie on started_at, and
// their ids (random uuids in the demo) say nothing about their order.
// Their versions cannot either: each is an LSN of the shard that wrote the
// move, and the moves of a chain start on different shards. What does
// order them is the chain itself: a document moved from A to B and then
// from B to C has a second move that starts where the first one ended.

// maxTiedMoves is how many of a document's newest moves LatestMove reads
// to order those that tie on their start time.
const maxTiedMoves = 8

// newestOfTied picks the newest of moves that are ordered by start time,
// newest first (ties in any stable order). Among those started in the
// newest second, the newest is the one no other continues — none starts
// on the shard (and workspace) where it ended. When that does not decide
// (a move there and back within the second, or unrelated moves), a move in
// progress is newer than a finished one: a document's moves run one after
// another, so an unfinished move is the last one started. Then the given
// order decides.
func newestOfTied(moves []Move, inProgress func(state string) bool) Move {
	tied := moves[:1]
	for _, m := range moves[1:] {
		if !m.StartedAt.Equal(moves[0].StartedAt) {
			break
		}
		tied = append(tied, m)
	}
	if len(tied) == 1 {
		return tied[0]
	}
	var last []Move
	for i, m := range tied {
		continued := false
		for j, o := range tied {
			if i != j && continues(o, m) {
				continued = true
				break
			}
		}
		if !continued {
			last = append(last, m)
		}
	}
	if len(last) == 1 {
		return last[0]
	}
	if len(last) == 0 {
		last = tied // a cycle: every move is continued by another
	}
	for _, m := range last {
		if inProgress(m.State) {
			return m
		}
	}
	return last[0]
}

// continues says whether move b starts where move a ended.
func continues(b, a Move) bool {
	if b.FromShard != a.ToShard {
		return false
	}
	return b.FromWorkspace == "" || a.ToWorkspace == "" || b.FromWorkspace == a.ToWorkspace
}
