package tests

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// ptyRun is a command started on a pseudo-terminal: what the terminal
// received, as raw bytes.
type ptyRun struct {
	cmd    *exec.Cmd
	master *os.File
	mu     sync.Mutex
	out    bytes.Buffer
	read   chan struct{} // closed once the terminal's output ended
}

// startOnPty starts cmd with a pseudo-terminal of cols columns as its
// stdin, stdout, stderr and controlling terminal.
func startOnPty(t *testing.T, cmd *exec.Cmd, cols uint16) *ptyRun {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open a pseudo-terminal: %v", err)
	}
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
	if err := unix.IoctlSetWinsize(int(s.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: cols}); err != nil {
		t.Fatal(err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = s, s, s
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	r := &ptyRun{cmd: cmd, master: m, read: make(chan struct{})}
	go func() {
		defer close(r.read)
		buf := make([]byte, 4096)
		for {
			n, err := m.Read(buf)
			r.mu.Lock()
			r.out.Write(buf[:n])
			r.mu.Unlock()
			if err != nil { // EIO once the command and its children closed the terminal
				return
			}
		}
	}()
	t.Cleanup(func() { m.Close() })
	return r
}

// wait waits for the command and the end of its output, and returns both.
func (r *ptyRun) wait() (string, error) {
	err := r.cmd.Wait()
	<-r.read
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.String(), err
}

var csi = regexp.MustCompile("\x1b\\[[0-9;]*[A-Za-z]")

// screenLines splits what a terminal received into the pieces of text
// written between line starts and cursor movements, escape sequences
// removed.
func screenLines(raw string) []string {
	return strings.FieldsFunc(csi.ReplaceAllString(raw, "\r"), func(r rune) bool { return r == '\r' || r == '\n' })
}
