//go:build !unix

package keelproc

import "syscall"

// pauseSignals: there is no SIGSTOP outside unix, so no Pause either.
func pauseSignals() (stop, cont syscall.Signal, ok bool) { return 0, 0, false }
