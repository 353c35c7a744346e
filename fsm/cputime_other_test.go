//go:build !unix

package fsm

import "time"

// cpuTime is not measured here; benchmarks then report zero CPU time.
func cpuTime() time.Duration { return 0 }
