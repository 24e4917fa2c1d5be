package latency

import "testing"

// TestLatRatios: the ratios compare the p99s of read-your-writes, plain
// visibility and the floor's total (produce + insert), and are 0 when a
// row is missing or has no ok sample.
func TestLatRatios(t *testing.T) {
	floor := floorSummaries([]floorSample{{ProduceMS: 10, InsertMS: 30}, {Err: "down"}})
	if len(floor) != 3 || floor[0].Name != floorRow || floor[0].P99MS != 40 || floor[0].OK != 1 || floor[0].Fails["error"] != 1 {
		t.Fatalf("floor rows %+v", floor)
	}
	rows := append([]summary{
		{Name: rywRow, OK: 1, P99MS: 240},
		{Name: visibleRow, OK: 1, P99MS: 200},
	}, floor...)
	if r := ratiosOf(rows); r.RYWToVisibleP99 != 1.2 || r.VisibleToFloorP99 != 5 {
		t.Errorf("ratios %+v, want 1.2 and 5", r)
	}
	if r := ratiosOf(rows[:2]); r.VisibleToFloorP99 != 0 || r.RYWToVisibleP99 != 1.2 {
		t.Errorf("without a floor: %+v, want visible/floor 0", r)
	}
	if floorSummaries(nil) != nil {
		t.Error("rows for a floor that was not measured")
	}
}
