package progress

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestLineAndBar(t *testing.T) {
	for _, c := range []struct {
		s         Status
		line, bar string
	}{
		{Status{Label: "copy", Done: 540, Total: 1200, Rate: 270}, "copy: 540 of ~1200 rows (45%), 270 rows/s, ETA 2s",
			"copy [#########-----------]  45%  540/~1200 rows  270 rows/s  ETA 2s"},
		{Status{Label: "copy", Done: 1500, Total: 1200}, "copy: 1500 of ~1200 rows (100%)", "copy [####################] 100%  1500/~1200 rows"},
		{Status{Label: "copy", Done: 7}, "copy: 7 rows", "copy: 7 rows"},
	} {
		if got := Line(c.s); got != c.line {
			t.Errorf("Line(%+v) = %q, want %q", c.s, got, c.line)
		}
		if got := Bar(c.s, 20); got != c.bar {
			t.Errorf("Bar(%+v) = %q, want %q", c.s, got, c.bar)
		}
	}
}

// TestTerminal: log lines land above the status lines, which are cleared
// (one erase per line drawn) and drawn again after each write.
func TestTerminal(t *testing.T) {
	var out strings.Builder
	term := NewTerminal(&out)
	term.Show("b", "bar b")
	term.Show("a", "bar a")
	term.Write([]byte("a log line\n")) //nolint:errcheck // a builder
	term.Finish("a", "a done")
	want := "bar b" + // Show b
		"\r\x1b[2K" + "bar a\nbar b" + // Show a: erase b, draw both
		"\r\x1b[2K\x1b[1A\x1b[2K" + "a log line\n" + "bar a\nbar b" + // Write: erase both, the line, both again
		"\r\x1b[2K\x1b[1A\x1b[2K" + "a done\n" + "bar b" // Finish a
	if got := out.String(); got != want {
		t.Errorf("terminal output\n%q\nwant\n%q", got, want)
	}
	if IsTerminal(nil) {
		t.Error("no file is a terminal")
	}
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if IsTerminal(f) {
		t.Error("a plain file is taken for a terminal")
	}
	if pty, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0); err == nil { // a pseudo-terminal, where there is one
		defer pty.Close()
		if !IsTerminal(pty) {
			t.Error("a pseudo-terminal is not taken for a terminal")
		}
	}
}

// TestFit: a status line is cut to fewer columns than the terminal has
// (runes, not bytes), so that it never wraps; a line that fits, or an
// unknown width, is left as it is.
func TestFit(t *testing.T) {
	for _, c := range []struct {
		line  string
		width int
		want  string
	}{
		{"resnapshot [#####-----] 50%", 80, "resnapshot [#####-----] 50%"},
		{"resnapshot [#####-----] 50%", 12, "resnapshot "},
		{"ååååå", 4, "ååå"},
		{"abcd", 4, "abc"},
		{"abc", 4, "abc"},
		{"abcd", 0, "abcd"},
	} {
		if got := fit(c.line, c.width); got != c.want {
			t.Errorf("fit(%q, %d) = %q, want %q", c.line, c.width, got, c.want)
		}
	}
}

// TestTerminalWidth: a Terminal on a pseudo-terminal reads its width, and
// cuts the status lines it draws to it.
func TestTerminalWidth(t *testing.T) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	defer m.Close()
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := unix.IoctlSetWinsize(int(s.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: 40}); err != nil {
		t.Fatal(err)
	}
	term := NewTerminal(s)
	if w := term.width(); w != 40 {
		t.Fatalf("width of a 40-column pseudo-terminal: %d", w)
	}
	if got := fit(Bar(Status{Label: "resnapshot shard 3 documents copying", Done: 540, Total: 1200, Rate: 270}, 30), term.width()); len([]rune(got)) != 39 {
		t.Errorf("a bar on 40 columns is %d columns: %q", len([]rune(got)), got)
	}
}
