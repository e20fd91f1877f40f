package worker

import (
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/completer"
	"github.com/pgflow-wasm/pgflow-wasm/internal/poller"
	"github.com/pgflow-wasm/pgflow-wasm/schema"

	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"
)

// A completion whose step has dependents makes their tasks ready in its own transaction:
// pgflow queues them and sends their messages there. Nobody else can see those messages
// before the commit, so the completer lets claimSuccessors join that transaction: the read of
// the messages of the successors this worker serves and their start ride in the completions'
// round trip, with free slots. They run as soon as the commit returns,
// without waiting for a wake-up, a read and a fetch transaction of their own
// (docs/RATIONALE.md "Successors start in their predecessor's transaction").

// claimQueue is the fetch queue successors of the flow are claimed from: the flow's own
// queue. A flow with per-step queues (pgflow 0.17+) has none: its successors are fetched.
func (fs *flowState) claimQueue() *queueState {
	if len(fs.queues) != 1 || fs.queues[0].step != "" {
		return nil
	}
	return fs.queues[0]
}

// claim is one flow's part of a successorClaim: the slots it reserved, and its read.
type claim struct {
	fs       *flowState
	q        *queueState
	reserved int
	read     *poller.ClaimRead
}

// successorClaim is the completer.Claim of one batch of completions: a claim per flow.
type successorClaim struct {
	w      *Worker
	pid    uint32 // the backend of the connection the claim's transaction runs on
	claims []*claim
	// expected are the channels whose notification of this commit the listener drops, by
	// claim (an index of claims).
	expected map[int]string
	began    time.Time // the completions' batch was sent with the reads, the starts and the commit
}

// claimSuccessors is the completer's Config.Claim: it queues into b, behind the completions
// of batch, the reads of the messages of their successors' tasks that this worker serves,
// as many as free slots allow, and reserves those slots. The returned claim launches the
// tasks once the commit is known to have landed, or gives their slots back; until then the
// flow counts as fetching, so the recovery round does not take the tasks for orphans.
func (w *Worker) claimSuccessors(conn *pgxpool.Conn, b *pgx.Batch, batch []completer.Outcome) completer.Claim {
	w.claimGate.RLock()
	if w.noClaims { // draining: the fetch loops have stopped, and so do claims
		w.claimGate.RUnlock()
		return nil
	}
	type want struct {
		runs, steps []string
		seenRun     map[string]bool
		seenStep    map[string]bool
		successors  map[[2]string]bool // (run, step): the tasks the batch can make ready
	}
	wants := map[*flowState]*want{}
	var order []*flowState
	for _, o := range batch {
		t := o.Task
		fs := w.byFlow[t.FlowSlug]
		if o.Failed || fs == nil || fs.steps[t.StepSlug] == nil || fs.claimQueue() == nil {
			continue
		}
		wt := wants[fs]
		if wt == nil {
			wt = &want{seenRun: map[string]bool{}, seenStep: map[string]bool{}, successors: map[[2]string]bool{}}
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
			wt.successors[[2]string{t.RunID, s}] = true
		}
	}
	sc := &successorClaim{w: w, pid: conn.Conn().PgConn().PID(), began: time.Now()}
	for _, fs := range order {
		wt := wants[fs]
		if len(wt.steps) == 0 || fs.deprecated.Load() || w.drained.Load() {
			continue
		}
		// A single step has one task a run: one slot for each step of each run that a
		// completion of the batch may make ready, so that claims and fetches running at once
		// do not take each other's (a map's other tasks are fetched). Not runs times steps:
		// a batch completing a of one run and b of another held four slots for two
		// successors, and a second writer's claim then found none (TestAReadLeavesTheClaimsTheirSlots).
		n := w.reserve(fs, min(w.cfg.BatchSize, len(wt.successors)))
		if n == 0 {
			continue // every slot is taken: the fetch loop reads them when one frees
		}
		c := &claim{fs: fs, q: fs.claimQueue(), reserved: n}
		if c.read = c.q.fetcher.QueueClaim(conn, b, wt.runs, wt.steps, n); c.read == nil {
			w.unreserve(fs, n)
			continue
		}
		fs.fetching.Add(1)
		// A read that takes messages takes what this transaction inserted: its commit
		// notifies the queue's channel, and the read that notification would wake finds
		// nothing (where the claim left a successor, onWritten rings the queue), so the
		// listener is told to drop it. Whether the read takes any is known only with the
		// commit's reply: Done takes back the expectation of one that took none.
		if c.q.notified && w.own != nil {
			ch := schema.InsertChannel(c.q.name)
			w.own.Expect(sc.pid, ch)
			if sc.expected == nil {
				sc.expected = map[int]string{}
			}
			sc.expected[len(sc.claims)] = ch
		}
		sc.claims = append(sc.claims, c)
	}
	if len(sc.claims) == 0 {
		w.claimGate.RUnlock()
		return nil
	}
	return sc
}

// Err is the first failure of a claim's own statements.
func (sc *successorClaim) Err() error {
	for _, c := range sc.claims {
		if err := c.read.Err(); err != nil {
			return err
		}
	}
	return nil
}

// Done launches the started tasks if the commit landed, and gives back the slots they did
// not take.
func (sc *successorClaim) Done(committed bool, written []completer.Written) {
	w := sc.w
	defer w.claimGate.RUnlock()
	now := time.Now()
	for i, c := range sc.claims {
		n, leftSome := c.read.Read()
		if ch, ok := sc.expected[i]; ok && (!committed || n == 0) {
			if stillExpected := w.own.Cancel(sc.pid, ch); !stillExpected && committed {
				// The listener dropped a notification of a commit whose claim read nothing:
				// the fetch loop looks in its place.
				c.fs.ring()
			}
		}
		if committed {
			tasks := c.read.Tasks(sc.began)
			if w.cfg.Hooks.TaskWritten != nil {
				for i := range tasks {
					tasks[i].Moments = &pgflowtype.TaskMoments{Cause: "claimed", Woke: sc.began, FetchBegan: sc.began, ClaimSent: tasks[i].ClaimSent, Fetched: now}
				}
			}
			for _, t := range tasks {
				w.launch(c.fs, t)
			}
			w.unreserve(c.fs, c.reserved-len(tasks))
			if len(tasks) > 0 {
				c.q.foundTasks.Store(true) // the queue is busy: its loop polls at its quickest
			}
			if c.read.Err() == nil && (!leftSome || len(tasks) < c.reserved) {
				// The read left no visible successor (or slots were left): every one was
				// started, so the fetch loop need not look for them (onWritten). A claim
				// that refused (a migration the worker did not prepare for) started none.
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
