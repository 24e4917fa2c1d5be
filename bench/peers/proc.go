package peers

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one system under test, run as a child process so that both
// systems are measured the same way, from outside: CPU from
// /proc/<pid>/stat, peak RSS from VmHWM in /proc/<pid>/status.
type process struct {
	name    string
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{}
	err     error
	logPath string
	log     *os.File
	lines   *lineWatch
}

// startProcess starts argv with env added to the environment; its stdout
// and stderr go to logPath and are watched for lines (see waitLine).
func startProcess(name string, argv, env []string, logPath string) (*process, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	p := &process{name: name, done: make(chan struct{}), logPath: logPath, log: f, lines: newLineWatch()}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = append(os.Environ(), env...)
	w := io.MultiWriter(f, p.lines)
	p.cmd.Stdout, p.cmd.Stderr = w, w
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits for a clean exit; after grace it kills the
// process (it is ours: started by this bench).
func (p *process) stop(grace time.Duration) error {
	if p.exited() {
		return p.exitErr()
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.exitErr()
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within %s after SIGTERM (killed); log %s", p.name, grace, p.logPath)
	}
}

// exitErr treats an exit by our own SIGTERM as clean (a JVM exits 143).
func (p *process) exitErr() error {
	var ee *exec.ExitError
	if p.err == nil {
		return nil
	}
	if errors.As(p.err, &ee) && (ee.ExitCode() == 143 || ee.ExitCode() == 130) {
		return nil
	}
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM {
		return nil
	}
	return fmt.Errorf("%s exited: %w; log %s", p.name, p.err, p.logPath)
}

// lineWatch remembers whether a line containing a given text was written.
type lineWatch struct {
	mu   sync.Mutex
	buf  []byte
	seen []string
}

func newLineWatch() *lineWatch { return &lineWatch{} }

func (l *lineWatch) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, b...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		if len(l.seen) < 10000 {
			l.seen = append(l.seen, string(l.buf[:i]))
		}
		l.buf = l.buf[i+1:]
	}
	return len(b), nil
}

func (l *lineWatch) has(text string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.seen {
		if strings.Contains(s, text) {
			return true
		}
	}
	return false
}
