package fleet

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestSelect: --shards names the fleet's own numbers, as ranges and lists;
// a fleet that does not start at 0 or has gaps keeps its numbers.
func TestSelect(t *testing.T) {
	var entries []string
	for _, n := range []int{1, 2, 3, 5, 17, 100, 101} {
		entries = append(entries, fmt.Sprintf(`{"shard": %d, "dsn_env": "D%d"}`, n, n))
	}
	f, err := Parse("fleet.json", []byte(`{"shards": [`+strings.Join(entries, ",")+`]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		spec string
		want []int
	}{
		{"all", []int{1, 2, 3, 5, 17, 100, 101}},
		{"0-31", []int{1, 2, 3, 5, 17}},
		{"17", []int{17}},
		{"101, 1,5", []int{1, 5, 101}},
		{"2-3,100-8191", []int{2, 3, 100, 101}},
	} {
		got, err := f.Select(c.spec)
		if err != nil {
			t.Errorf("Select(%q): %v", c.spec, err)
			continue
		}
		var nums []int
		for _, s := range got {
			nums = append(nums, s.Number)
		}
		if !slices.Equal(nums, c.want) {
			t.Errorf("Select(%q) = %v, want %v", c.spec, nums, c.want)
		}
	}
	for spec, want := range map[string]string{
		"":          "--shards is empty",
		"4":         `4 names no shard of fleet.json (its shards: 1-3,5,17,100-101)`,
		"6-16":      "6-16 names no shard",
		"1-5,3":     "shard 3 is named twice (1-5 and 3)",
		"5,5":       "shard 5 is named twice",
		"x":         `"x" is not a shard number 0..8191`,
		"9000":      `"9000" is not a shard number`,
		"5-1":       "range 5-1 runs backwards",
		"1,":        `"" is not a shard number`,
		"-3":        `"" is not a shard number`,
		"1-2-3":     `"2-3" is not a shard number`,
		"0-31,1-2x": `"2x" is not a shard number`,
	} {
		_, err := f.Select(spec)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Select(%q): error %v, want it to say %q", spec, err, want)
		}
	}
}
