package benchwork

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// Table writes header and one line per row (line's tab-terminated cells),
// every column aligned right: the benchmarks' summary tables.
func Table[T any](w io.Writer, header string, rows []T, line func(T) string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, line(r))
	}
	tw.Flush()
}
