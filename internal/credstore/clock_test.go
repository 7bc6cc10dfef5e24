package credstore

import (
	"sync"
	"time"
)

// fakeClock is the time that becomes data in tests. Memory reads it
// directly; the Redis store shifts Redis' TIME (and its local view's clock)
// by how far it was advanced, so blocks expire without waiting.
type fakeClock struct {
	mu    sync.Mutex
	start time.Time
	t     time.Time
}

func newFakeClock() *fakeClock {
	now := time.Now()
	return &fakeClock{start: now, t: now}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// offset is how far the clock was advanced.
func (c *fakeClock) offset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t.Sub(c.start)
}
