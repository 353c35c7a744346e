//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package raftlog

import (
	"errors"
	"time"
)

var errDirLocked = errors.New("directory is locked by another process")

// lockDir is a no-op where flock(2) is not available. raft-wal's bolt meta
// file is still locked, so a second process cannot share a wal dir, but it
// waits for the first to exit instead of failing at once; a reader still
// fails at once (its bolt open has a timeout).
func lockDir(string, bool, time.Duration) (func(), error) {
	return func() {}, nil
}
