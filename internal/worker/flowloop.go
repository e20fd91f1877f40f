package worker

import (
	"cmp"
	"context"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/kit"
	"github.com/pgflow-wasm/pgflow-wasm/internal/poller"

	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
)

// queueLoop fetches one queue's tasks until ctx is done or the flow is deprecated. It reads
// only as many messages as it has free slots, polls again at once while batches come back
// full, and otherwise waits for a wake-up (a notification, a completion whose step has
// dependents, a failure's retry time, a freed slot) or its timer: the polling backoff, or
// the notify fallback interval.
func (w *Worker) queueLoop(ctx context.Context, q *queueState, listen *poller.Listener) {
	fs := q.fs
	idle := kit.Backoff{Min: w.cfg.MinPollInterval, Max: w.cfg.MaxPollInterval}
	dbRetry := kit.Backoff{Min: 200 * time.Millisecond, Max: 5 * time.Second}
	timer := time.NewTimer(0) // first poll at once
	defer timer.Stop()
	dbDown := false
	idleWait := func() time.Duration {
		if q.notified && listen != nil && listen.Connected() {
			return w.cfg.NotifyFallback
		}
		return idle.Next()
	}
	for {
		cause := "wake"
		select {
		case <-ctx.Done():
			return
		case <-q.wake:
		case <-timer.C:
			cause = "timer"
		}
		woke := time.Now()
		if fs.deprecated.Load() {
			return
		}
		if w.drained.Load() {
			// The process is drained: an undrain rings the wake; the timer is a safety net.
			timer.Reset(w.cfg.MaxPollInterval)
			continue
		}
		n := 0
		backpressure := w.done.Pending() >= w.cfg.MaxUnwritten // finished work waits to be written
		if !backpressure {
			n = w.reserveForFetch(fs, w.cfg.BatchSize)
		}
		// Handler slots all taken for a while: the fetch lease goes to another worker.
		lookAgain := w.slotsFull(ctx, q, n == 0 && !backpressure, woke)
		if n == 0 {
			// Full, or outcomes wait to be written: a freed slot or a write rings the wake.
			// The timer is only a safety net.
			q.starved.Store(true)
			timer.Reset(cmp.Or(lookAgain, w.cfg.MaxPollInterval))
			continue
		}
		q.starved.Store(false)
		if ok, retryAt := w.holdsLease(ctx, q, woke); !ok {
			// Other workers hold this queue's fetch leases and read it.
			w.unreserve(fs, n)
			timer.Reset(retryAt.Sub(woke))
			continue
		}
		began := time.Now()
		fs.fetching.Add(1)
		if w.drained.Load() {
			// Drained since the look above: a drain waits for the fetches counted before it
			// (applyDrain), so this one must not begin.
			fs.fetching.Add(-1)
			w.unreserve(fs, n)
			timer.Reset(w.cfg.MaxPollInterval)
			continue
		}
		tasks, err := w.fetch(ctx, q, n)
		w.unreserve(fs, n-len(tasks))
		if w.cfg.Hooks.TaskWritten != nil {
			fetched := time.Now()
			for i := range tasks {
				tasks[i].Moments = &pgflowtype.TaskMoments{Cause: cause, Woke: woke, FetchBegan: began, ClaimSent: tasks[i].ClaimSent, Fetched: fetched}
			}
		}
		for _, t := range tasks {
			w.launch(fs, t)
		}
		fs.fetches.Add(1)
		fs.fetching.Add(-1)
		if err == errHalted {
			// pgflow changed under the worker: the watch rings every queue once it has
			// prepared for the new one (pgflowwatch.go).
			timer.Reset(w.cfg.MaxPollInterval)
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.metricPoll(fs, "error")
			w.dbError("fetch", err)
			wait := dbRetry.Next()
			if w.pgflowSuspect(err) {
				// The watch looks at once, halts the fetches and says on /readyz what the
				// worker waits for: not a database outage.
				w.log.Info("a fetch met a pgflow changed under the worker; it prepares for it", "flow", fs.def.Slug, "error", err)
				timer.Reset(wait)
				continue
			}
			w.cfg.Health.SetDatabase(false)
			if !dbDown {
				w.log.Warn("fetching tasks failed; retrying with backoff", "flow", fs.def.Slug, "error", err, "retry_in", wait)
			}
			dbDown = true
			timer.Reset(wait)
			continue
		}
		if dbDown {
			w.log.Info("database reachable again", "flow", fs.def.Slug)
			dbDown = false
		}
		w.cfg.Health.SetDatabase(true)
		dbRetry.Reset()
		took := time.Since(began)
		if len(tasks) > 0 { // an empty read skips start_tasks: it says little about a fetch's cost
			q.fetchTime.observe(took)
		}
		if m := w.cfg.Metrics; m != nil {
			m.ReadLatency.WithLabelValues(fs.def.Slug).Observe(took.Seconds())
		}
		if q.foundTasks.Swap(false) {
			idle.Reset()
		}
		if len(tasks) == 0 {
			w.metricPoll(fs, "empty")
			wait := idleWait()
			if giveBack := w.queueEmpty(ctx, q, woke); giveBack > 0 { // an idle queue holds no lease
				wait = min(wait, giveBack)
			}
			timer.Reset(wait)
			continue
		}
		q.lastTasksAt = woke
		w.metricPoll(fs, "tasks")
		idle.Reset()
		if len(tasks) == n {
			q.wake.Ring() // a full batch: more may be waiting
		}
		timer.Reset(idleWait())
	}
}

// reserve takes up to want slots from the global and the flow's limits.
func (w *Worker) reserve(fs *flowState, want int) int { return w.reserveLeaving(fs, want, 0, 0) }

// reserveForFetch takes up to want slots for a read of the queue, leaving free one slot for
// each awaited completion not yet written: its writer's transaction may start the
// completion's successor (claim.go) and needs a slot then. A read holds its whole batch of
// slots while it runs: without that headroom a claim during a read finds none, and its
// successor waits for a later read (most often under --signal notify, where every insert
// wakes a read). A flow's own limit keeps only its own completions'.
func (w *Worker) reserveForFetch(fs *flowState, want int) int {
	all, ofFlow := w.done.Awaited(fs.def.Slug)
	return w.reserveLeaving(fs, want, all, ofFlow)
}

// reserveLeaving takes up to want slots from the global and the flow's limits while
// keepGlobal and keepFlow stay free in each.
func (w *Worker) reserveLeaving(fs *flowState, want, keepGlobal, keepFlow int) int {
	g := w.global.tryAcquireLeaving(want, keepGlobal)
	f := fs.slots.tryAcquireLeaving(g, keepFlow)
	w.global.release(g - f)
	return f
}

// finished frees the slot of a task whose handler ended and wakes the loops waiting for one.
func (w *Worker) finished(fs *flowState) {
	fs.slots.release(1)
	w.global.release(1)
}

// unreserve gives back slots a fetch reserved and did not fill. The flow's own slots are
// given back quietly (its loop is the only one that waits for them, and it just found the
// queue empty); the global ones wake other flows that found none free.
func (w *Worker) unreserve(fs *flowState, n int) {
	fs.slots.giveBack(n)
	w.global.release(n)
}

func (w *Worker) metricPoll(fs *flowState, result string) {
	if m := w.cfg.Metrics; m != nil {
		m.Polls.WithLabelValues(fs.def.Slug, result).Inc()
	}
}
