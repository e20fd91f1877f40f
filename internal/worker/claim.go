package worker

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/completer"
	"github.com/pgflow-wasm/pgflow-wasm/internal/poller"
)

// A completion whose step has dependents makes their tasks ready in its own transaction:
// pgflow queues them and sends their messages there. Nobody else can see those messages
// before the commit, so the completer hands the transaction to claimSuccessors before it
// commits, which starts the successors this worker serves there and then, with free slots:
// they run as soon as the commit returns, without waiting for a wake-up, a read and a fetch
// transaction of their own (docs/RATIONALE.md "Successors start in their predecessor's
// transaction").

// claimQueue is the fetch queue successors of the flow are claimed from: the flow's own
// queue. A flow with per-step queues (pgflow 0.17+) has none: its successors are fetched.
func (fs *flowState) claimQueue() *queueState {
	if len(fs.queues) != 1 || fs.queues[0].step != "" {
		return nil
	}
	return fs.queues[0]
}

// claim is what one flow's claim took: slots reserved, and the tasks started.
type claim struct {
	fs       *flowState
	reserved int
	tasks    []poller.Task
	q        *queueState
	began    time.Time
	claimed  time.Time
}

// claimSuccessors is the completer's Config.Claim: in the transaction open on conn, it starts
// the queued tasks of the steps this worker serves that depend on the completed tasks in
// written, as many as free slots allow. The returned done launches them once the commit
// is known to have landed, or gives their slots back; until then the flow counts as
// fetching, so the recovery round does not take the tasks for orphans.
func (w *Worker) claimSuccessors(ctx context.Context, conn *pgxpool.Conn, written []completer.Written) (func(committed bool), error) {
	w.claimGate.RLock()
	if w.noClaims { // draining: the fetch loops have stopped, and so do claims
		w.claimGate.RUnlock()
		return func(bool) {}, nil
	}
	type want struct {
		runs, steps []string
		seenRun     map[string]bool
		seenStep    map[string]bool
	}
	wants := map[*flowState]*want{}
	var order []*flowState
	for _, wr := range written {
		t := wr.Task
		fs := w.byFlow[t.FlowSlug]
		if wr.Stale || wr.Failed || wr.Status != "completed" || fs == nil || fs.steps[t.StepSlug] == nil || fs.claimQueue() == nil {
			continue
		}
		wt := wants[fs]
		if wt == nil {
			wt = &want{seenRun: map[string]bool{}, seenStep: map[string]bool{}}
			wants[fs] = wt
			order = append(order, fs)
		}
		if !wt.seenRun[t.RunID] {
			wt.seenRun[t.RunID] = true
			wt.runs = append(wt.runs, t.RunID)
		}
		for _, s := range fs.steps[t.StepSlug].claimable {
			if !wt.seenStep[s] {
				wt.seenStep[s] = true
				wt.steps = append(wt.steps, s)
			}
		}
	}
	var claims []*claim
	done := func(committed bool) {
		defer w.claimGate.RUnlock()
		for _, c := range claims {
			if committed {
				if w.trace != nil {
					for i := range c.tasks {
						w.trace.fetched(&c.tasks[i], "claimed", c.began, c.began, c.claimed)
					}
				}
				for _, t := range c.tasks {
					w.launch(c.fs, t)
				}
				w.unreserve(c.fs, c.reserved-len(c.tasks))
				if len(c.tasks) > 0 {
					c.q.foundTasks.Store(true) // the queue is busy: its loop polls at its quickest
				}
				if len(c.tasks) < c.reserved {
					// Slots were left: every visible successor was started, so the fetch loop
					// need not look for them (onWritten).
					for i := range written {
						if w.byFlow[written[i].Task.FlowSlug] == c.fs {
							written[i].SuccessorsClaimed = true
						}
					}
				}
			} else {
				w.unreserve(c.fs, c.reserved)
			}
			c.fs.fetches.Add(1)
			c.fs.fetching.Add(-1)
		}
	}
	for _, fs := range order {
		wt := wants[fs]
		if len(wt.steps) == 0 || fs.deprecated.Load() {
			continue
		}
		// A single step has one task a run: that many slots, so that claims and fetches
		// running at once do not take each other's (a map's other tasks are fetched).
		n := w.reserve(fs, min(w.cfg.BatchSize, len(wt.runs)*len(wt.steps)))
		if n == 0 {
			continue // every slot is taken: the fetch loop reads them when one frees
		}
		c := &claim{fs: fs, q: fs.claimQueue(), reserved: n, began: time.Now()}
		fs.fetching.Add(1)
		claims = append(claims, c)
		tasks, err := c.q.fetcher.Claim(ctx, conn, wt.runs, wt.steps, n)
		if err != nil {
			done(false)
			return nil, err
		}
		c.tasks, c.claimed = tasks, time.Now()
	}
	return done, nil
}
