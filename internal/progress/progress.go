// Package progress shows how far long work is (a snapshot, a resnapshot):
// a bar redrawn in place when the output is a terminal, plain lines
// otherwise. Terminal keeps the bars below whatever else is written to
// the same terminal (log lines), so a command can log and show progress
// on one stderr.
package progress

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Status is how far one piece of work is.
type Status struct {
	// Label names the work ("shard 3 snapshot", "resnapshot of docs").
	Label string
	// Done and Total count its units (rows); Total 0: unknown.
	Done, Total int64
	// Rate is units per second (0: unknown yet).
	Rate float64
}

// fraction is Done/Total, capped at 1 (an estimate can be low).
func (s Status) fraction() (float64, bool) {
	if s.Total <= 0 {
		return 0, false
	}
	return min(1, float64(s.Done)/float64(s.Total)), true
}

// eta is the time left at Rate, when it can be told.
func (s Status) eta() (time.Duration, bool) {
	if s.Total <= 0 || s.Rate <= 0 {
		return 0, false
	}
	left := max(s.Total-s.Done, 0)
	return time.Duration(float64(left) / s.Rate * float64(time.Second)).Round(time.Second), true
}

// Line is s as one plain line: "label: 540 of ~1200 rows (45%), 245 rows/s, ETA 3s".
func Line(s Status) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d", s.Label, s.Done)
	if f, ok := s.fraction(); ok {
		fmt.Fprintf(&b, " of ~%d rows (%.0f%%)", s.Total, 100*f)
	} else {
		b.WriteString(" rows")
	}
	if s.Rate > 0 {
		fmt.Fprintf(&b, ", %.0f rows/s", s.Rate)
	}
	if left, ok := s.eta(); ok {
		fmt.Fprintf(&b, ", ETA %s", left)
	}
	return b.String()
}

// Bar is s as a bar of width cells and the same numbers:
// "label [##########----------]  45%  540/~1200 rows  245 rows/s  ETA 3s".
// Without a total the bar is left out.
func Bar(s Status, width int) string {
	f, ok := s.fraction()
	if !ok {
		return Line(s)
	}
	full := int(f * float64(width))
	var b strings.Builder
	fmt.Fprintf(&b, "%s [%s%s] %3.0f%%  %d/~%d rows", s.Label, strings.Repeat("#", full), strings.Repeat("-", width-full), 100*f, s.Done, s.Total)
	if s.Rate > 0 {
		fmt.Fprintf(&b, "  %.0f rows/s", s.Rate)
	}
	if left, ok := s.eta(); ok {
		fmt.Fprintf(&b, "  ETA %s", left)
	}
	return b.String()
}

// IsTerminal says whether f is a terminal.
func IsTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// Terminal draws status lines, one per key, at the bottom of a terminal.
// Write (give it to the logger) clears them, writes, and draws them again
// below, so log lines scroll above the bars. Safe for concurrent use.
type Terminal struct {
	mu    sync.Mutex
	out   io.Writer
	lines map[string]string
	drawn int // lines on screen, the cursor at the end of the last
}

// NewTerminal draws on out, a terminal.
func NewTerminal(out io.Writer) *Terminal {
	return &Terminal{out: out, lines: map[string]string{}}
}

// Write writes p above the status lines.
func (t *Terminal) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.clear()
	n, err := t.out.Write(p)
	t.draw()
	return n, err
}

// Show sets key's status line and redraws.
func (t *Terminal) Show(key, line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.clear()
	t.lines[key] = line
	t.draw()
}

// Finish writes key's last line above the others, to stay, and forgets it.
func (t *Terminal) Finish(key, line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.clear()
	delete(t.lines, key)
	io.WriteString(t.out, line+"\n") //nolint:errcheck // a terminal
	t.draw()
}

func (t *Terminal) clear() {
	if t.drawn == 0 {
		return
	}
	s := "\r\x1b[2K" + strings.Repeat("\x1b[1A\x1b[2K", t.drawn-1)
	io.WriteString(t.out, s) //nolint:errcheck // a terminal
	t.drawn = 0
}

// width is the terminal's columns (0: unknown), read at each draw: a
// status line longer than the terminal would wrap onto a second row, which
// clear, counting one row per line, would leave on the screen.
func (t *Terminal) width() int {
	f, ok := t.out.(*os.File)
	if !ok {
		return 0
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}

// fit cuts line to fewer than width columns (0: as it is), so that the
// cursor never reaches the last column, where terminals wrap.
func fit(line string, width int) string {
	if width <= 1 {
		return line
	}
	r := []rune(line)
	if len(r) < width {
		return line
	}
	return string(r[:width-1])
}

func (t *Terminal) draw() {
	if len(t.lines) == 0 {
		return
	}
	w := t.width()
	keys := make([]string, 0, len(t.lines))
	for k := range t.lines {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = fit(t.lines[k], w)
	}
	io.WriteString(t.out, strings.Join(out, "\n")) //nolint:errcheck // a terminal
	t.drawn = len(out)
}
