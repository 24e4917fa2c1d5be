package fleet

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Select returns the fleet's shards that spec names, ascending: "all",
// or a comma-separated list of numbers and inclusive ranges of the fleet's
// own numbers ("0-31", "1,5,17", "100-131,200"). A range takes the fleet's
// shards within it (a fleet numbered 1, 5, 17 and "0-10" gives 1 and 5),
// but must hold at least one; a single number must be in the fleet. A
// shard named twice (overlapping ranges included) is refused: the set is
// what one process serves, and a typo there would hide a shard nobody
// serves.
func (f *Fleet) Select(spec string) ([]Shard, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, errors.New("--shards is empty: name shards of the fleet file (0-31, 1,5,17, or all)")
	}
	if spec == "all" {
		return slices.Clone(f.Shards), nil
	}
	named := map[int]string{} // shard -> the item that named it
	var errs []error
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		lo, hi, err := parseItem(item)
		if err != nil {
			errs = append(errs, fmt.Errorf("--shards %q: %w", spec, err))
			continue
		}
		n := 0
		for _, s := range f.Shards {
			if s.Number < lo || s.Number > hi {
				continue
			}
			n++
			if prev, dup := named[s.Number]; dup {
				errs = append(errs, fmt.Errorf("--shards %q: shard %d is named twice (%s and %s); name every shard once", spec, s.Number, prev, item))
				continue
			}
			named[s.Number] = item
		}
		if n == 0 {
			errs = append(errs, fmt.Errorf("--shards %q: %s names no shard of %s (its shards: %s)", spec, item, f.File, compact(f.Numbers())))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var out []Shard
	for _, s := range f.Shards {
		if _, ok := named[s.Number]; ok {
			out = append(out, s)
		}
	}
	return out, nil
}

// parseItem reads "N" or "N-M" (N <= M, both 0..MaxShard).
func parseItem(item string) (lo, hi int, err error) {
	a, b, isRange := strings.Cut(item, "-")
	num := func(s string) (int, error) {
		v, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || v < 0 || v > MaxShard {
			return 0, fmt.Errorf("%q is not a shard number 0..%d", s, MaxShard)
		}
		return v, nil
	}
	if lo, err = num(a); err != nil {
		return 0, 0, err
	}
	if !isRange {
		return lo, lo, nil
	}
	if hi, err = num(b); err != nil {
		return 0, 0, err
	}
	if hi < lo {
		return 0, 0, fmt.Errorf("range %s runs backwards", item)
	}
	return lo, hi, nil
}

// compact writes ascending numbers as ranges: "0-3,7,9-10".
func compact(nums []int) string {
	var parts []string
	for i := 0; i < len(nums); {
		j := i
		for j+1 < len(nums) && nums[j+1] == nums[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", nums[i], nums[j]))
		} else {
			parts = append(parts, strconv.Itoa(nums[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
