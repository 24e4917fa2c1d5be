package loadgen

import (
	"slices"
	"testing"
)

func sum(p [bulkKinds]int) int {
	n := 0
	for _, v := range p {
		n += v
	}
	return n
}

func TestSplitRows(t *testing.T) {
	cases := []struct {
		n    int
		want [bulkKinds]int
	}{
		{0, [bulkKinds]int{}},
		{1, [bulkKinds]int{0, 0, 0, 1, 0, 0}},
		{20, [bulkKinds]int{5, 3, 1, 6, 4, 1}},
		{100, [bulkKinds]int{25, 15, 5, 30, 20, 5}},
		{7, [bulkKinds]int{2, 1, 0, 2, 2, 0}},
	}
	for _, c := range cases {
		got := splitRows(c.n, bulkWeights)
		if got != c.want {
			t.Errorf("splitRows(%d) = %v, want %v", c.n, got, c.want)
		}
		if sum(got) != c.n {
			t.Errorf("splitRows(%d) adds up to %d", c.n, sum(got))
		}
	}
	for n := range 500 {
		if s := sum(splitRows(n, bulkWeights)); s != n {
			t.Fatalf("splitRows(%d) adds up to %d", n, s)
		}
	}
}

func TestBulkPlan(t *testing.T) {
	cases := []struct {
		name                string
		n, docs, issued, pd int
		want                [bulkKinds]int
	}{
		{"empty shard: inserts only", 100, 0, 0, 0, [bulkKinds]int{45, 0, 0, 55, 0, 0}},
		{"everything available", 100, 1000, 1000, 1000, [bulkKinds]int{25, 15, 5, 30, 20, 5}},
		{"few documents: retitles first, then deletes", 100, 17, 1000, 1000, [bulkKinds]int{28, 15, 2, 30, 20, 5}},
		{"nothing paid yet", 100, 1000, 1000, 0, [bulkKinds]int{25, 15, 5, 35, 20, 0}},
		{"few issued", 100, 1000, 3, 1000, [bulkKinds]int{25, 15, 5, 47, 3, 5}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := bulkPlan(c.n, c.docs, c.issued, c.pd)
			if got != c.want {
				t.Fatalf("bulkPlan = %v, want %v", got, c.want)
			}
			if sum(got) != c.n {
				t.Fatalf("bulkPlan adds up to %d, want %d", sum(got), c.n)
			}
		})
	}
}

func TestTakeWindow(t *testing.T) {
	seq := func(n int) []int64 {
		l := make([]int64, n)
		for i := range l {
			l[i] = int64(i)
		}
		return l
	}
	cases := []struct {
		name    string
		n, i, k int
		taken   []int64
		restLen int
	}{
		{"middle", 10, 2, 3, []int64{2, 3, 4}, 7},
		{"at the end", 10, 7, 3, []int64{7, 8, 9}, 7},
		{"start past the end is moved back", 10, 9, 3, []int64{7, 8, 9}, 7},
		{"window overlapping the tail", 5, 1, 3, []int64{1, 2, 3}, 2},
		{"more than there are", 4, 0, 9, []int64{0, 1, 2, 3}, 0},
		{"none", 4, 1, 0, nil, 4},
		{"empty list", 0, 0, 3, nil, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			taken, rest := takeWindow(seq(c.n), c.i, c.k)
			if !slices.Equal(taken, c.taken) || len(rest) != c.restLen {
				t.Fatalf("takeWindow = %v, rest %v; want %v and %d left", taken, rest, c.taken, c.restLen)
			}
			// Every id is in exactly one of the two.
			all := append(append([]int64(nil), taken...), rest...)
			slices.Sort(all)
			if !slices.Equal(all, seq(c.n)) {
				t.Fatalf("taken %v + rest %v are not the ids 0..%d once each", taken, rest, c.n-1)
			}
		})
	}
}
