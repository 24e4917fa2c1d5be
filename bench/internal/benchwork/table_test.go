package benchwork

import (
	"strconv"
	"strings"
	"testing"
)

func TestTable(t *testing.T) {
	var b strings.Builder
	Table(&b, "n\tsquare\t", []int{3, 12}, func(n int) string {
		return strconv.Itoa(n) + "\t" + strconv.Itoa(n*n) + "\t"
	})
	want := "   n  square\n   3       9\n  12     144\n" // padding 2, aligned right
	if b.String() != want {
		t.Fatalf("got\n%q\nwant\n%q", b.String(), want)
	}
}

func TestMeanMSAndStageSeconds(t *testing.T) {
	a := Scrape{"h_sum": 1, "h_count": 10, "tributary_loader_stage_seconds_total|stage=insert": 2}
	b := Scrape{"h_sum": 3, "h_count": 14, "tributary_loader_stage_seconds_total|stage=insert": 5,
		"tributary_loader_stage_seconds_total|stage=poll": 1}
	if got := MeanMS(a, b, "h"); got != 500 {
		t.Errorf("MeanMS = %v, want 500 (2 s over 4 observations)", got)
	}
	if got := MeanMS(a, a, "h"); got != 0 {
		t.Errorf("MeanMS without observations = %v, want 0", got)
	}
	st := LoaderStageSeconds(a, b)
	if len(st) != 2 || st["insert"] != 3 || st["poll"] != 1 {
		t.Errorf("LoaderStageSeconds = %v, want insert 3, poll 1", st)
	}
}
