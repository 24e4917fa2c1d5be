package query

// Which copy of a row is current. A row is normally live on one shard; it
// is legitimately live on two while a saga moves it, and only one of the
// two is the row the application sees. Each rule below knows one reason
// for a second copy; PickCurrent applies them in order and the first that
// has something to say decides. Copies no rule explains stay visible, so
// real duplicates are still shown (and flagged) as such.

// CopyRule narrows a row's live copies (ordered by shard) to the current
// one(s). ok is false when the rule does not apply to these copies; then
// the next rule is asked.
type CopyRule func(copies []Copy) (current []Copy, ok bool)

// PickCurrent returns the copies to show and the index of the rule that
// chose them (-1: no rule applied, every copy is shown).
func PickCurrent(copies []Copy, rules ...CopyRule) ([]Copy, int) {
	for i, rule := range rules {
		if rule == nil {
			continue
		}
		if current, ok := rule(copies); ok {
			return current, i
		}
	}
	return copies, -1
}

// MoveRule is the move log's rule: while move is in progress the source's
// copy is current, until the source row is gone; then the target's. The
// copy on any other shard is not the move's doing and the rule does not
// apply. A nil move, or one not in progress, does not apply either: after a
// move, a copy left at the source is a real duplicate.
func MoveRule(move *Move, inProgress func(state string) bool) CopyRule {
	return func(copies []Copy) ([]Copy, bool) {
		if move == nil || !inProgress(move.State) || len(copies) == 0 {
			return nil, false
		}
		var source, target []Copy
		for _, c := range copies {
			switch c.Shard {
			case move.FromShard:
				source = append(source, c)
			case move.ToShard:
				target = append(target, c)
			default:
				return nil, false
			}
		}
		if len(source) > 0 {
			return source, true
		}
		return target, true
	}
}
