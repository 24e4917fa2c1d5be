package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// proc is a fleet process (a reader, the loader, the API, a traffic
// generator) restarted whenever it exits, as a service manager would,
// until stop. The soak SIGKILLs it through kill; nothing cleans up.
type proc struct {
	name string
	args []string
	env  []string
	log  *os.File

	mu       sync.Mutex // guards cmd, stopping, starts
	cmd      *exec.Cmd
	stopping bool
	starts   int
	done     chan struct{}
}

func newProc(name string, log *os.File, env []string, args ...string) *proc {
	return &proc{name: name, args: args, env: env, log: log, done: make(chan struct{})}
}

// run starts the process and restarts it 300 ms after each exit until stop.
func (p *proc) run() {
	defer close(p.done)
	for {
		p.mu.Lock()
		if p.stopping {
			p.mu.Unlock()
			return
		}
		cmd := exec.Command(p.args[0], p.args[1:]...)
		cmd.Env = append(os.Environ(), p.env...)
		cmd.Stdout, cmd.Stderr = p.log, p.log
		err := cmd.Start()
		if err == nil {
			p.cmd = cmd
			p.starts++
		}
		p.mu.Unlock()
		if err != nil {
			fmt.Fprintf(p.log, "chaos: %s: start failed: %v\n", p.name, err)
		} else {
			err = cmd.Wait()
			fmt.Fprintf(p.log, "chaos: %s exited: %v\n", p.name, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// pid is the running process's pid, or 0.
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil || p.cmd.ProcessState != nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// kill sends SIGKILL; run restarts the process.
func (p *proc) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.cmd.Process != nil {
		p.cmd.Process.Signal(syscall.SIGKILL) //nolint:errcheck // it may have exited already
	}
}

// stop ends the process with SIGTERM (SIGKILL after 30 s) and does not
// restart it.
func (p *proc) stop() {
	p.mu.Lock()
	p.stopping = true
	if p.cmd != nil && p.cmd.Process != nil {
		p.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // it may have exited already
	}
	p.mu.Unlock()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.kill()
		<-p.done
	}
}
