package sandbox

import (
	"context"
	"sync"
	"time"
)

// The watchdog (supervise), the goroutine pool calls run on, and the reference counts
// that keep a module or engine alive until its last call, abandoned or not, has ended.

// poolIdle is how long a pooled goroutine waits for work before it exits.
const poolIdle = 10 * time.Second

// spawn runs fn on an idle pooled goroutine, or on a new one that joins the pool.
func (e *engine) spawn(fn func()) {
	select {
	case e.handoff <- fn:
	default:
		go e.pooled(fn)
	}
}

func (e *engine) pooled(fn func()) {
	idle := time.NewTimer(poolIdle)
	defer idle.Stop()
	for {
		fn()
		idle.Reset(poolIdle)
		select {
		case fn = <-e.handoff:
		case <-idle.C:
			return
		case <-e.quit:
			return
		}
	}
}

// supervise runs fn on a pooled goroutine and waits for it. fn calls stopped once no guest
// code can run any more (it may be called more than once). When ctx ends, the engine is
// expected to stop the guest promptly: if the guest has not stopped WatchdogGrace later,
// supervise returns (zero, true) and the goroutine keeps running; it is counted by
// Abandoned while its guest runs past its deadline + WatchdogGrace. A call whose guest stopped in time is waited
// for: what is left is the host's own work (closing the instance, freeing its memory),
// which can be slow on a loaded machine without anything being out of control.
func (e *engine) supervise(ctx context.Context, fn func(stopped func()) outcome) (outcome, bool) {
	c := &supervised{done: make(chan outcome, 1), stoppedCh: make(chan struct{})}
	e.spawn(func() {
		o := fn(c.stop)
		c.stop()
		c.mu.Lock()
		if c.abandoned {
			e.abandoned.Add(-1)
		}
		c.mu.Unlock()
		c.done <- o
	})
	select {
	case o := <-c.done:
		return o, false
	case <-ctx.Done():
	}
	t := time.NewTimer(e.cfg.WatchdogGrace)
	defer t.Stop()
	select {
	case o := <-c.done:
		return o, false
	case <-c.stoppedCh:
		return <-c.done, false
	case <-t.C:
	}
	// Run gives up waiting. The call counts as abandoned if its guest is still running at
	// its deadline + grace: a canceled call that has not stopped yet still stops at its
	// deadline at the latest, and is not abandoned before then.
	countAt := time.Now()
	if d, ok := ctx.Deadline(); ok {
		countAt = d.Add(e.cfg.WatchdogGrace)
	}
	count := func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		select {
		case <-c.stoppedCh:
		default:
			c.abandoned = true
			e.abandoned.Add(1)
		}
	}
	select {
	case <-c.stoppedCh:
		return <-c.done, false
	default:
	}
	if wait := time.Until(countAt); wait > 0 {
		time.AfterFunc(wait, count)
	} else {
		count()
	}
	return outcome{}, true
}

type supervised struct {
	done      chan outcome
	stoppedCh chan struct{} // closed when the guest can no longer run
	stopOnce  sync.Once
	mu        sync.Mutex
	abandoned bool
}

func (c *supervised) stop() { c.stopOnce.Do(func() { close(c.stoppedCh) }) }

// outcome is a finished call, already classified.
type outcome struct {
	res Result
	err error
}

// refs counts the users of a resource and releases it once it is closed and unused, so
// nothing is freed under a call that is still running (an abandoned one included).
type refs struct {
	mu      sync.Mutex
	n       int
	closed  bool
	release func()
}

func (r *refs) acquire() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.n++
	return true
}

func (r *refs) done() {
	r.mu.Lock()
	r.n--
	var release func()
	if r.closed && r.n == 0 {
		release, r.release = r.release, nil
	}
	r.mu.Unlock()
	if release != nil {
		release()
	}
}

// close marks the resource closed; release runs now if nobody uses it, else at the last done.
func (r *refs) close(release func()) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	if r.n > 0 {
		r.release = release
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	release()
}
