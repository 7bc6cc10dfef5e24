package openai

import (
	"container/list"
	"sync"
)

// chainState is what a session's last stored response covers: the
// response's id, and how many context messages (the request's messages and
// the answer) it holds, with a fingerprint of those messages so that a
// context that changed underneath (a retry strip, a compaction, a model
// switch) is sent whole again.
type chainState struct {
	responseID string
	covered    int
	sum        [32]byte
}

// chainCache remembers the chain state of the most recently used sessions.
type chainCache struct {
	mu    sync.Mutex
	max   int
	order *list.List // of *chainEntry, most recent first
	items map[string]*list.Element
}

type chainEntry struct {
	session string
	state   chainState
}

func newChainCache(max int) *chainCache {
	return &chainCache{max: max, order: list.New(), items: map[string]*list.Element{}}
}

func (c *chainCache) get(session string) (chainState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[session]
	if !ok {
		return chainState{}, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*chainEntry).state, true
}

func (c *chainCache) put(session string, st chainState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[session]; ok {
		e.Value.(*chainEntry).state = st
		c.order.MoveToFront(e)
		return
	}
	c.items[session] = c.order.PushFront(&chainEntry{session: session, state: st})
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.items, last.Value.(*chainEntry).session)
	}
}

func (c *chainCache) remove(session string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[session]; ok {
		c.order.Remove(e)
		delete(c.items, session)
	}
}

func (c *chainCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
