package ring

import (
	"math"
	"slices"
)

// ringSize is 2^64, the number of positions, as a float.
const ringSize = float64(1 << 64)

// Diff returns the fraction of the hash space, in [0, 1], whose owner
// differs between from and to: the expected share of keys that move when
// routers switch from one map to the other. It is exact (up to float64 rounding): the
// owner of both maps is constant between consecutive points of either map.
func Diff(from, to *Map) float64 {
	bounds := make([]uint64, 0, len(from.points)+len(to.points))
	for _, p := range from.points {
		bounds = append(bounds, p.Position)
	}
	for _, p := range to.points {
		bounds = append(bounds, p.Position)
	}
	slices.Sort(bounds)
	bounds = slices.Compact(bounds)

	// The arc (bounds[i-1], bounds[i]] belongs, in each map, to the owner of
	// bounds[i]; the wrapping arc (last, 2^64) ∪ [0, bounds[0]] to the owner
	// of bounds[0].
	moved := 0.0
	for i, b := range bounds {
		if from.OwnerOfHash(b) == to.OwnerOfHash(b) {
			continue
		}
		if i > 0 {
			moved += float64(b - bounds[i-1])
			continue
		}
		if len(bounds) == 1 {
			return 1
		}
		moved += float64(b) + (ringSize - float64(bounds[len(bounds)-1]))
	}
	return math.Min(moved/ringSize, 1)
}
