package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/pgflow-wasm/pgflow-wasm/internal/recovery"
	"github.com/pgflow-wasm/pgflow-wasm/internal/taskwrite"
)

// A fetch runs start_tasks and reads its reply in one round trip. When the connection dies
// after the commit but before the reply arrives, pgflow holds tasks as started by this
// worker that it never heard of: alive and heartbeating, the worker would keep them from
// every sweep until their timeout ran out. So the worker remembers the tasks it runs (from
// launch until their outcome is written); each recovery round also lists the tasks pgflow
// holds as started by this worker (recovery.Started, in the sweep's own round trip), and
// those it does not know, of a flow where no fetch ran meanwhile, are put back in the queue
// the way pgflow's requeue_stalled_tasks puts a task back (taskwrite.RequeueOne): no attempt
// is failed for a handler that never ran, and the worker's own next fetch, woken at once,
// takes the task again (start_tasks builds its input, as only pgflow does on each release).
// No one can still write an outcome for such an attempt, so the requeue also gives the
// start's count back (GiveBack): the next start has the same attempt number, as if the task
// had run in place. At most taskwrite.MaxRequeues times per task: a task whose every fetch
// reply is lost (a reply too large for a proxy between, say) then counts its starts again,
// and the requeue bound ends it.

// fetchGenerations reads each flow's fetch counter; a flow with a fetch in flight reads -1.
func (w *Worker) fetchGenerations() map[*flowState]int64 {
	gens := map[*flowState]int64{}
	for _, fs := range w.flows {
		if fs.fetching.Load() > 0 {
			gens[fs] = -1
		} else {
			gens[fs] = fs.fetches.Load()
		}
	}
	return gens
}

// handBackOrphans requeues the started tasks of own that this worker does not know. before is
// fetchGenerations from before own was read: a flow that fetched since may have launched
// tasks own lists, so its turn waits for the next round.
func (w *Worker) handBackOrphans(ctx context.Context, own []recovery.Started, before map[*flowState]int64, readAt time.Time) {
	after := w.fetchGenerations()
	listed := map[taskKey]bool{}
	defer func() { w.known.settleForgotten(listed, readAt) }()
	for _, o := range own {
		key := taskKey{o.RunID, o.StepSlug, o.TaskIndex}
		listed[key] = true
		fs := w.byWorker[o.WorkerID]
		if fs == nil || w.known.has(key) {
			continue
		}
		why := fmt.Sprintf("Task stalled: worker %s started it, but the reply of start_tasks was lost (connection cut "+
			"during the fetch), so it never ran; requeued by pgflow-wasm", o.WorkerID)
		what := "requeued a task started by a fetch whose reply was lost"
		if reason, ok := w.known.forgottenReason(key, o.Attempt); ok {
			// Still started: the commit did not land.
			why = fmt.Sprintf("Task stalled: worker %s ran it, but %s, and the task is still started, so the commit "+
				"did not land and nothing the handler wrote is kept; requeued by pgflow-wasm", o.WorkerID, reason)
			what = "requeued a task whose transaction's COMMIT answer was lost: the commit did not land"
		} else if before[fs] < 0 || before[fs] != after[fs] {
			continue
		} else if at, ok := w.known.writtenAt(key, o.Attempt); ok {
			// It ran, and its outcome was committed: a database that lost the commit (a
			// failover to a standby the commit had not reached) holds it started again.
			why = fmt.Sprintf("Task stalled: worker %s ran it and wrote its outcome at %s, but the database no longer has that "+
				"commit (a failover to a standby it had not reached); requeued by pgflow-wasm to run again",
				o.WorkerID, at.UTC().Format(time.RFC3339Nano))
			what = "requeued a task whose written outcome the database lost (a failover)"
		}
		c := taskwrite.Call{RunID: o.RunID, StepSlug: o.StepSlug, TaskIndex: o.TaskIndex, Attempt: o.Attempt, Arg: why}
		if w.ownRequeues == nil || len(w.ownRequeues) > 10000 {
			w.ownRequeues = map[taskKey]int{} // a bound on memory; forgetting only makes one more give-back
		}
		giveBack := w.ownRequeues[key] < taskwrite.MaxRequeues
		res, err := taskwrite.RequeueOne(ctx, w.cfg.Pool, c, taskwrite.RequeueOptions{Options: taskwrite.Options{AttemptHistory: w.history},
			Counted: w.pgflow().Requeue, QueueNames: w.pgflow().QueueNames, GiveBack: giveBack})
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("requeueing a task of a lost fetch reply failed; next round retries", "run_id", o.RunID, "error", err)
			}
			return
		}
		if res.Stale {
			continue
		}
		if res.Requeued && giveBack {
			w.ownRequeues[key]++
		}
		if !res.Requeued {
			what += ", failed instead: past the requeue bound"
		} else if m := w.cfg.Metrics; m != nil {
			m.TasksRequeued.WithLabelValues(fs.def.Slug, "hand_back").Inc()
		}
		reason := why
		if !res.Requeued && res.ErrorMessage != "" {
			reason = res.ErrorMessage
		}
		w.log.Warn(what, "run_id", o.RunID, "flow", fs.def.Slug, "step", o.StepSlug, "task_index", o.TaskIndex,
			"attempt", o.Attempt, "status", res.Status, "attempt_given_back", res.Requeued && giveBack, "reason", reason)
		switch {
		case res.Status != "queued":
		case res.Requeued:
			fs.ring() // its message is visible now: fetch it again
		default:
			w.wakeAfterRetry(fs, o.StepSlug, res.Attempts)
		}
	}
}
