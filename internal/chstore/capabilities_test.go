package chstore

import "testing"

func TestUseInsertDeduplicationToken(t *testing.T) {
	for _, c := range []struct {
		server, replicated, want bool
	}{
		{false, false, false},
		{false, true, false}, // 18.16: no setting, whatever the engine
		{true, false, false}, // plain MergeTree ignores tokens
		{true, true, true},
	} {
		got := Capabilities{InsertDeduplicationToken: c.server}.UseInsertDeduplicationToken(c.replicated)
		if got != c.want {
			t.Errorf("server %v, replicated %v: got %v, want %v", c.server, c.replicated, got, c.want)
		}
	}
}
