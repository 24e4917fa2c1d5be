package progress

import (
	"os"
	"strings"
	"testing"
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
