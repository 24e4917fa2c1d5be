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
