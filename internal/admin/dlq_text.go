package admin

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// WriteDeadLetters writes dead letters as a text table, one a line.
func WriteDeadLetters(w io.Writer, dead []DeadLetter) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DLQ\tTIME\tTABLE\tSOURCE\tREASON\tKEY\tERROR")
	for _, d := range dead {
		table := d.Table
		if table == "" {
			table = "-"
		}
		msg := d.Error
		if d.Problem != "" {
			msg += " (not replayable: " + d.Problem + ")"
		}
		fmt.Fprintf(tw, "%d/%d\t%s\t%s\t%s[%d]@%d\t%s\t%s\t%s\n", d.Partition, d.Offset, d.Time.UTC().Format(time.RFC3339),
			table, d.SourceTopic, d.SourcePartition, d.SourceOffset, d.Reason, d.Key, msg)
	}
	fmt.Fprintf(tw, "%d dead letters\n", len(dead))
	return tw.Flush()
}
