//go:build unix

package keelproc

import "syscall"

// pauseSignals are the signals that freeze a process and let it go on.
func pauseSignals() (stop, cont syscall.Signal, ok bool) {
	return syscall.SIGSTOP, syscall.SIGCONT, true
}
