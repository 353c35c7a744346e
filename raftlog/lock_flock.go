//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package raftlog

import (
	"errors"
	"os"
	"syscall"
	"time"
)

// errDirLocked is lockDir's error when another process holds the lock.
var errDirLocked = errors.New("directory is locked by another process")

// lockDir takes a flock(2) on dir itself (no lock file), exclusive or shared,
// retrying until timeout. The lock lasts until unlock is called or the
// process exits, so a killed node never leaves a stale lock behind.
func lockDir(dir string, shared bool, timeout time.Duration) (unlock func(), err error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	how := syscall.LOCK_EX
	if shared {
		how = syscall.LOCK_SH
	}
	deadline := time.Now().Add(timeout)
	for {
		err = syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil // closing the descriptor releases the lock
		}
		if err != syscall.EINTR && err != syscall.EWOULDBLOCK {
			_ = f.Close()
			return nil, &os.PathError{Op: "flock", Path: dir, Err: err}
		}
		if err == syscall.EWOULDBLOCK && time.Now().After(deadline) {
			_ = f.Close()
			return nil, errDirLocked
		}
		// As bolt waits for its own file lock: the previous process may be
		// exiting right now.
		time.Sleep(20 * time.Millisecond)
	}
}
