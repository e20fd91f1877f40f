package poller

import (
	"container/list"
	"sync"
)

// runInputCache keeps recent runs' inputs: they never change, and a map step's tasks all
// share one run, so a 2,000-element map reads its (possibly large) input once, not 2,000 times.
type runInputCache struct {
	mu    sync.Mutex
	max   int
	order *list.List // front = most recent; values are run ids
	byRun map[string]*list.Element
	input map[string][]byte
}

func newRunInputCache(max int) *runInputCache {
	return &runInputCache{max: max, order: list.New(), byRun: map[string]*list.Element{}, input: map[string][]byte{}}
}

func (c *runInputCache) get(run string) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byRun[run]; ok {
		c.order.MoveToFront(e)
		return c.input[run]
	}
	return nil
}

func (c *runInputCache) put(run string, input []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byRun[run]; ok {
		c.order.MoveToFront(e)
		c.input[run] = input
		return
	}
	c.byRun[run] = c.order.PushFront(run)
	c.input[run] = input
	for c.order.Len() > c.max {
		old := c.order.Back()
		c.order.Remove(old)
		delete(c.byRun, old.Value.(string))
		delete(c.input, old.Value.(string))
	}
}
