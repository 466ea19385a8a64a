package fakegithub

import (
	"sync"
	"time"
)

// Clock is a settable clock for tests, to share between a token provider and the Server
// (WithClock(c.Now)). It starts at a fixed instant and moves only with Advance.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock at 2026-03-01 12:00 UTC.
func NewClock() *Clock { return &Clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
