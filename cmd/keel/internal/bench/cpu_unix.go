//go:build unix

package bench

import (
	"syscall"
	"time"
)

// selfCPU is the user plus system CPU time of the bench process, every
// thread of it; not its children, which are the processes the meter
// counts by role.
func selfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
