package poller

import (
	"container/list"
	"sync"
)

// runInputCache keeps recent runs' inputs: they never change, and a map step's tasks all
// share one run, so a 2,000-element map reads its (possibly large) input once, not 2,000 times.
// It is bounded in bytes, not entries: a few huge inputs must not pile up (six 50 MB runs
// once kept 1.1 GB). An input larger than the whole budget is not kept at all.
type runInputCache struct {
	mu       sync.Mutex
	maxBytes int
	bytes    int
	order    *list.List // front = most recent; values are run ids
	byRun    map[string]*list.Element
	input    map[string][]byte
}

// runInputCacheBytes is the default budget of a flow's run-input cache.
const runInputCacheBytes = 64 << 20

func newRunInputCache(maxBytes int) *runInputCache {
	return &runInputCache{maxBytes: maxBytes, order: list.New(), byRun: map[string]*list.Element{}, input: map[string][]byte{}}
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
		c.order.Remove(e)
		delete(c.byRun, run)
		c.bytes -= len(c.input[run])
		delete(c.input, run)
	}
	if len(input) > c.maxBytes {
		return
	}
	c.byRun[run] = c.order.PushFront(run)
	c.input[run] = input
	c.bytes += len(input)
	for c.bytes > c.maxBytes {
		old := c.order.Back()
		c.order.Remove(old)
		id := old.Value.(string)
		c.bytes -= len(c.input[id])
		delete(c.byRun, id)
		delete(c.input, id)
	}
}
