package keelproc

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Proc is one keel process. Its exit is observed by one goroutine, which
// closes done; every other user waits on done and never calls Wait, so a
// process is reaped exactly once and its PID is never signalled after that.
type Proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // from cmd.Wait; read only after done is closed
}

// StartProc starts exe with args, env added to this process's environment,
// and its stdout and stderr going to stdout and stderr (nil discards). The
// process runs in a process group of its own, so that a Ctrl-C at the
// terminal reaches only the caller, which stops it; on Linux the kernel
// kills it should the caller die without doing so.
func StartProc(exe string, env []string, stdout, stderr io.Writer, args ...string) (*Proc, error) {
	cmd := exec.Command(exe, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Running reports whether the process has not exited yet.
func (p *Proc) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Wait reports whether the process exited within timeout.
func (p *Proc) Wait(timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// Signal sends sig to the process, unless it has already exited: os.Process
// never signals a reaped PID, which another process may have by now.
func (p *Proc) Signal(sig os.Signal) error {
	if !p.Running() {
		return nil
	}
	return p.cmd.Process.Signal(sig)
}

// Stop sends SIGTERM, waits up to grace, then sends SIGKILL and waits. It
// reports whether the process exited with status 0 without the SIGKILL.
// A process still running after grace first gets SIGQUIT, which makes a Go
// program write every goroutine's stack to its stderr (its log): a stop
// that hangs then says where.
func (p *Proc) Stop(grace time.Duration) (clean bool) {
	if !p.Running() {
		return p.err == nil
	}
	_ = p.Signal(syscall.SIGTERM)
	if !p.Wait(grace) {
		_ = p.Signal(syscall.SIGQUIT)
		if !p.Wait(quitGrace) {
			_ = p.Signal(syscall.SIGKILL)
		}
		<-p.done
		return false
	}
	return p.err == nil
}

// quitGrace is how long a SIGQUIT process has to write its stacks.
const quitGrace = 2 * time.Second

// ExitCode is the exit status, or -1 while the process runs or if a signal
// ended it.
func (p *Proc) ExitCode() int {
	if p.Running() {
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

// Err is how the process ended (nil for status 0), as exec.Cmd.Wait says;
// nil while it runs.
func (p *Proc) Err() error {
	if p.Running() {
		return nil
	}
	return p.err
}

// Run runs exe with args to completion, for at most timeout, and returns
// what it wrote to stdout and stderr and its exit status. It fails if the
// process cannot start, or does not exit within timeout (it is then
// stopped).
func Run(exe string, timeout time.Duration, args ...string) (stdout, stderr string, code int, err error) {
	var out, errOut bytes.Buffer
	p, err := StartProc(exe, nil, &out, &errOut, args...)
	if err != nil {
		return "", "", -1, err
	}
	if !p.Wait(timeout) {
		p.Stop(time.Second)
		return out.String(), errOut.String(), p.ExitCode(),
			fmt.Errorf("keel %s did not exit within %s", strings.Join(args, " "), timeout)
	}
	return out.String(), errOut.String(), p.ExitCode(), nil
}
