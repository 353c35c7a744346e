// Package clock is the time the broker's data plane (broker/replication)
// reads: the wall clock in production, a Fake that tests move by hand.
package clock

import "time"

// Clock is the time and the timers a data plane reads.
type Clock interface {
	Now() time.Time
	// After delivers the time once d has passed.
	After(d time.Duration) <-chan time.Time
}

// Wall is the wall clock.
type Wall struct{}

// Now is time.Now.
func (Wall) Now() time.Time { return time.Now() }

// After is time.After.
func (Wall) After(d time.Duration) <-chan time.Time { return time.After(d) }
