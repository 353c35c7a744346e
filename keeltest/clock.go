package keeltest

import (
	"sync"
	"time"
)

// Clock is a clock a test moves by hand, for WithClock: broker sessions
// then expire when the test says so, not when a loaded machine happens to
// be slow. It is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock at a fixed instant, so that runs are alike.
func NewClock() *Clock { return &Clock{now: time.Unix(1_700_000_000, 0)} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Add moves the clock on by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
