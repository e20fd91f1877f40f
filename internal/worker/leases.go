package worker

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/kit"
)

// A loop holding a fetch lease gives it to another worker when its handlers, not the
// database, are the limit: every handler slot is taken and its handlers take longer than
// handlerBound times its fetches (their slots will not free before another fetch could run),
// or no handler has ended yet to tell. A worker running quick handlers fills its slots for a
// moment after each fetch and keeps its lease while they stay full for less than
// fullGiveBack.
const (
	handlerBound = 2
	fullGiveBack = 100 * time.Millisecond
)

// A worker refused a lease asks again after minLeaseRetry, waiting longer (up to
// maxLeaseRetry) while refused: where handlers are the limit leases are given back after
// every fetch and are mostly free, so a free slot waits little; where the database is, the
// holders keep them and the others ask once a second (four times a second cost 16 workers a
// little more in three alternating pairs: 974-1,147 against 1,144-1,177 tasks/s).
const (
	minLeaseRetry = 20 * time.Millisecond
	maxLeaseRetry = time.Second
)

// leaseRetry is a queue's wait before asking again for a lease it was refused.
func leaseRetry() kit.Backoff { return kit.Backoff{Min: minLeaseRetry, Max: maxLeaseRetry} }

// emptyGiveBack is how long a holder keeps its lease while its reads find the queue empty.
// A chain's next step is queued milliseconds after the completion that queues it; a holder
// that gave its lease back at every empty read had to win it again for the next step, from
// workers asking every 20 ms to a second (16 workers' chain run p50 637 ms against 265 ms
// with one).
const emptyGiveBack = time.Second

// ewma is a moving average of durations, updated without a lock (a lost update only delays
// the average a little).
type ewma struct{ nanos atomic.Int64 }

func (e *ewma) observe(d time.Duration) {
	old := e.nanos.Load()
	if old == 0 {
		e.nanos.Store(int64(d))
		return
	}
	e.nanos.Store(old + (int64(d)-old)/8)
}

func (e *ewma) get() time.Duration { return time.Duration(e.nanos.Load()) }

// autoLeaseReaders is how many live workers must read a flow before automatic fetch leases
// (the default, Config.FetchLeases 0) take hold of its queues. A worker alone takes no lease:
// it would only add two statements to its idle polls and a connection. Two workers reading
// one queue of quick handlers do less together than one alone, unless one reads at a time.
const autoLeaseReaders = 2

// leasing says whether q's reads need a lease: always with a set number of leases, and
// with automatic ones while the flow has autoLeaseReaders live readers.
//
// Until its sweeps have counted twice a worker leases as if shared: workers started together
// (a deployment scaled up, a restart) each find themselves alone at their first count, taken
// as they start, and would all read the backlog at once for a whole interval.
func (w *Worker) leasing(q *queueState) bool {
	if w.leases == nil {
		return false
	}
	return w.cfg.FetchLeases > 0 || w.readerCounts.Load() < 2 || int(q.fs.readers.Load()) >= autoLeaseReaders
}

// handlersBound says whether q's handlers, not its fetches, are the limit: they take more
// than handlerBound times its fetches that found tasks. Such a worker reads without a lease,
// as all would without leases: the lease saves database work where fetches are the cost,
// and where handlers are, taking turns only left free slots waiting for their turn (16
// one-slot workers of a 20 ms handler did 43-44 tasks/s taking turns against 55-57 without).
func (w *Worker) handlersBound(q *queueState) bool {
	handlers, fetches := q.fs.handlerTime.get(), q.fetchTime.get()
	return handlers > 0 && fetches > 0 && handlers > handlerBound*fetches
}

// holdsLease reports whether q's loop may read its queue now: fetch leases are off, its reads
// need none (it reads the flow alone, or its handlers are the limit), it holds one, or it
// just took one. Without one it says when to ask again. A lease session the database refuses
// never stops the reading.
//
// Every read needs a lease, an idle queue's too: reading an idle queue without one (tried)
// let every worker's first read of a new backlog take a batch of its own, and left 16
// workers at 0.52x of one against 0.70x (means of four alternating pairs).
// An idle poll costs two more statements (take and give back), and a notification wakes
// every worker to ask for the lease instead of to read.
func (w *Worker) holdsLease(ctx context.Context, q *queueState, now time.Time) (bool, time.Time) {
	if w.leases == nil {
		return true, time.Time{}
	}
	if !w.leasing(q) || w.handlersBound(q) {
		if w.leases.Held(q.name) {
			w.giveBackLease(ctx, q) // alone again, or its handlers are the limit: others may read
		}
		return true, time.Time{}
	}
	if w.leases.Held(q.name) {
		return true, time.Time{}
	}
	if now.Before(q.leaseRetryAt) {
		return false, q.leaseRetryAt
	}
	got, err := w.leases.Acquire(ctx, q.name)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Debug("no fetch lease session; reading without a lease", "queue", q.name, "error", err)
		}
		return true, time.Time{}
	}
	if !got {
		q.leaseRetryAt = now.Add(q.leaseRetry.Next())
		return false, q.leaseRetryAt
	}
	q.leaseRetry.Reset()
	return true, time.Time{}
}

// giveBackLease lets another worker read q's queue.
func (w *Worker) giveBackLease(ctx context.Context, q *queueState) {
	if w.leases == nil {
		return
	}
	if err := w.leases.Release(ctx, q.name); err != nil && ctx.Err() == nil {
		w.log.Debug("giving back a fetch lease failed; the session was dropped, which gives it back", "queue", q.name, "error", err)
	}
}

// slotsFull tells the lease whether the loop found every handler slot taken: once they have
// stayed taken for fullGiveBack the lease goes to another worker. It returns how long the
// loop should wait before looking again (0: the caller's own wait).
func (w *Worker) slotsFull(ctx context.Context, q *queueState, full bool, now time.Time) time.Duration {
	if !full {
		q.fullSince = time.Time{}
		return 0
	}
	if w.leases == nil || !w.leases.Held(q.name) {
		return 0
	}
	if q.fullSince.IsZero() {
		q.fullSince = now
	}
	// Nothing known yet: 16 one-slot workers starting on a backlog of 20 ms handlers each
	// kept the lease 100 ms in turn, and did 47-48 tasks/s against 52-54 reading freely.
	known := q.fs.handlerTime.get() > 0
	if held := now.Sub(q.fullSince); known && held < fullGiveBack && !w.handlersBound(q) {
		return fullGiveBack - held
	}
	w.giveBackLease(ctx, q)
	return 0
}

// queueEmpty tells the lease that q's read found nothing: after emptyGiveBack of empty
// reads the lease goes back. It returns how soon the loop should look again to give it back
// (0: no lease held, or given back now).
func (w *Worker) queueEmpty(ctx context.Context, q *queueState, now time.Time) time.Duration {
	if w.leases == nil || !w.leases.Held(q.name) {
		return 0
	}
	if since := now.Sub(q.lastTasksAt); since < emptyGiveBack {
		return emptyGiveBack - since
	}
	w.giveBackLease(ctx, q)
	return 0
}
