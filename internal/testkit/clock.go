package testkit

import (
	"sync"
	"time"
)

// Clock is a fake clock for the time that becomes data (timestamps, block
// and cooldown expiries): it moves only when Advance is called, so a test
// expires a cooldown without waiting for it. Timers are not its business;
// tests of timer-driven logic use testing/synctest.
type Clock struct {
	mu    sync.Mutex
	start time.Time
	t     time.Time
}

// NewClock is a Clock that reads start until advanced.
func NewClock(start time.Time) *Clock {
	return &Clock{start: start, t: start}
}

// Now is the clock's time; pass the method value where a func() time.Time
// is wanted.
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

// Offset is how far the clock was advanced since NewClock.
func (c *Clock) Offset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t.Sub(c.start)
}
