//go:build !unix

package bench

import (
	"errors"
	"time"
)

// selfCPU is not measured here: the CPU figures are left out.
func selfCPU() (time.Duration, error) {
	return 0, errors.New("the bench's CPU time is read with getrusage, which this system lacks")
}
