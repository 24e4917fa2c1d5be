package chstore

import (
	"errors"
	"testing"
)

func TestInChunks(t *testing.T) {
	items := make([]int, 2*maxInList+7)
	for i := range items {
		items[i] = i
	}
	var calls []int
	got, err := inChunks(items, func(part []int) (map[int]bool, error) {
		calls = append(calls, len(part))
		if len(part) > maxInList {
			t.Fatalf("part of %d > %d", len(part), maxInList)
		}
		out := map[int]bool{}
		for _, v := range part {
			out[v] = true
		}
		return out, nil
	})
	if err != nil || len(got) != len(items) || len(calls) != 3 || calls[2] != 7 {
		t.Fatalf("got %d results, calls %v, err %v", len(got), calls, err)
	}
	if _, err := inChunks(items, func([]int) (map[int]bool, error) { return nil, errors.New("boom") }); err == nil {
		t.Fatal("error swallowed")
	}
	if got, err := inChunks[int, int, bool](nil, nil); err != nil || len(got) != 0 {
		t.Fatal("empty input")
	}
}
